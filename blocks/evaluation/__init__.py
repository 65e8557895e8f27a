"""Evaluating blocks on one input: the contexts, and what a value is while it flows.

- `contexts`: the contexts blocks evaluate in (the reference evaluator behind `block.eval`,
  and the base the compiler's expansion context extends).
- `values`: Python values into the arrays of a tensor type, strictly.
- `data_paths`: where inside an example a block failed (`['children'][1]['tok']`).
- `training_mode`: whether ops compute as in training, and the training step's seed.
- `dataflow`: what each part of a block may read (`DataFlow`), which the compiler plans by.
- `precision`: which dtype each value is held in under a Keras mixed-precision policy.
"""
