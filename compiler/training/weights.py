"""Weights a model computes with: built before training, and declared by its blocks.

`Model` trains, checkpoints and saves the Keras layers and variables that its blocks
return from `Block.weights`. A Keras layer called inside a plain function (not passed
as `td.Function(layer)`) is read but not declared, so the model would leave it
untrained and lose it on saving. Two checks find such weights:

- when the model is made, from the variables each `td.Function` read when it was
  called on a batch of zeros to infer its output type (`check_functions`);
- after each step is traced, from the trainable variables the traced step read
  (`TracedWeights`): this also covers functions made with `infer_output_type=False`,
  which are never called before the step is traced.

Such a function's own Keras layers (`td.Function(layer, infer_output_type=False)`) are
built when the model is made (`build_functions`): Keras makes a layer's weights at its
first call, and the optimizer must know them before the first step.

>>> import warnings, keras
>>> import refold as td
>>> from refold.compiler import Model
>>> hidden = keras.layers.Dense(2, name="hidden")
>>> fn = td.Function(lambda x: hidden(x), infer_output_type=False)
>>> _ = fn.set_output_type(td.TensorType((2,)))
>>> model = Model(td.Vector(3) >> fn)   # not called yet: nothing to warn of
>>> with warnings.catch_warnings(record=True) as seen:
...     warnings.simplefilter("always")
...     _ = model.predict([[1.0, 2.0, 3.0]], verbose=0)
>>> "hidden/kernel" in str(seen[-1].message)
True
"""

from __future__ import annotations

import warnings

from refold.blocks.validation import validate

ADVICE = ("Make the function a Keras layer (a keras.layers.Layer whose call does its work "
          "tracks the layers it holds) and pass that, td.Function(layer)")


def build_functions(root) -> None:
    """Builds the Keras layers of functions not called to infer their output type
    (`td.Function.build_layers`): Keras makes a layer's weights at its first call,
    and a model must have them before its optimizer is built."""
    from refold.blocks import Function
    for b in validate(root):
        if isinstance(b, Function):
            b.build_layers()


def declared_ids(layers: list, variables: list) -> set[int]:
    """The ids of the `tf.Variable`s behind the declared layers' weights and variables
    (a `keras.Variable`'s `value` outside an autocast scope is its `tf.Variable`; under
    a `tf.distribute` strategy, a distributed variable whose replicas' variables are
    what a traced step reads)."""
    weights = [v for layer in layers for v in layer.weights] + list(variables)
    return {id(t) for v in weights for t in _behind(getattr(v, "value", v))}


def _behind(variable) -> list:
    """A variable and, if it is a distributed one, each replica's."""
    return [variable, *getattr(variable, "values", ())]


def check_functions(root, layers: list, variables: list) -> set[int]:
    """Warns of each `td.Function` that read undeclared weights when it was called to
    infer its output type; returns the ids of the variables it warned of."""
    from refold.blocks import Function
    declared, warned = declared_ids(layers, variables), set()
    for b in validate(root):
        missed = [v for v in b.variables_read() if id(v) not in declared] \
            if isinstance(b, Function) else []
        if missed:
            warned |= {id(v) for v in missed}
            names = ", ".join(sorted({v.name for v in missed}))
            warnings.warn(
                f"{b.path}: {_function_name(b.tf_fn)} reads weights that no block declares, "
                f"so Model will neither train nor save them: {names}. {ADVICE}", UserWarning,
                stacklevel=3)
    return warned


def _function_name(fn) -> str:
    """How a warning names a `td.Function`'s function: its name, else its repr."""
    name = getattr(fn, "__name__", None) or getattr(fn, "name", None)
    return name if isinstance(name, str) else repr(fn)


class TracedWeights:
    """After each trace of a step: warns, once per variable, of trainable variables
    the traced step read that no block declares and `check_functions` did not name.

    Args:
        root: the block expression (its uncalled functions are named as suspects).
        declared: `() -> set` of the declared variables' ids (read at each trace:
            a Keras layer builds its weights at the first call).
        warned: ids already warned of when the model was made.
    """

    def __init__(self, root, declared, warned: set[int]):
        self._root, self._declared, self._warned = root, declared, set(warned)

    def __call__(self, concrete_fn) -> None:
        declared = self._declared()
        missed = [v for v in concrete_fn.trainable_variables
                  if id(v) not in declared and id(v) not in self._warned]
        if not missed:
            return
        self._warned |= {id(v) for v in missed}
        names = ", ".join(sorted({v.name for v in missed}))
        warnings.warn(
            f"{self._root.path}: the traced step reads weights that no block declares, "
            f"so Model will neither train nor save them: {names}{self._suspects()}. "
            f"{ADVICE}", UserWarning, stacklevel=2)

    def _suspects(self) -> str:
        """The functions not called before tracing (`infer_output_type=False`)."""
        from refold.blocks import Function
        paths = [b.path for b in validate(self._root)
                 if isinstance(b, Function) and not b.infers_output_type]
        return (f" (read by one of the functions made with infer_output_type=False: "
                f"{', '.join(paths)})") if paths else ""
