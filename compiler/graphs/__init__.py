"""From a block expression to op graphs: lowering, expansion, and the batch plan.

- `lowering`: a block expression's ops, value types and metrics (`Program`).
- `op_feeds`: which op can feed which (from the blocks' `DataFlow`), so the engine runs
  each op before, in or after its loop.
- `expansion`: each input into its op graph (`ExampleGraph`), a batch into one (`BatchGraph`).
- `expansion_cache`: the graphs of inputs seen before, kept while the inputs are unchanged.
- `batch_plan`: a batch of expanded inputs with the scheduler's plan of it (`BatchPlan`).
"""
