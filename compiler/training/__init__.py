"""The steps Keras calls for a `Model`: training, evaluation and prediction.

- `steps`: the traced step functions and the weight-gradient choice (`StepFunction`).
- `predict_loop`: `Model.predict`'s loop over the model's own batches.
- `weights`: the Keras layers and variables a model's blocks declare (`TracedWeights`).
- `tf_executor`: which of TensorFlow's function executors runs an inference step.
- `blame`: a TensorFlow error inside a batched step turned into an `InputError` naming the input.
"""
