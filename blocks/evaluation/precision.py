"""Mixed precision: which dtype each value is held in under a Keras mixed policy.

Under `keras.mixed_precision.set_global_policy("mixed_float16")` (or
`"mixed_bfloat16"`), or with a block's layers built with such a `dtype=`, layers
compute in the low precision and keep their variables in float32. Blocks still
declare float32 types (`TensorType((8,))`); the evaluators hold the values of
those types in the policy's compute dtype instead, by one rule applied alike in
`block.eval` and in the batching engine, so that the two still agree:

- a value of a declared float32 type is held in the compute dtype (float16 or
  bfloat16): the engine's buffers, constants and gathered arguments, the op
  outputs passed along. Halving the loop's buffers is what saves memory, and a
  low-precision layer would cast its inputs down anyway;
- except the value types of the block's metrics (`td.Metric`, losses among them):
  they stay float32, as Keras keeps losses and metrics in float32; an op whose
  output has such a type has it cast up (it may still compute in low precision:
  a loss should be computed by a float32 function or layer, as in Keras);
- an op may return a declared float32 output in float32 or in the compute dtype:
  it is cast to the dtype the value is held in. Ops receive their float32-typed
  arguments in the held dtype; Keras layers cast them to their own compute dtype
  (a layer built with `dtype="float32"` computes in float32);
- results (`block.eval`, `Compiler.run`, `Model.predict`, the output the Keras
  loss sees) come back in the declared dtypes.

Other dtypes (float64, integers) are never changed.

>>> import keras
>>> import refold as td
>>> keras.mixed_precision.set_global_policy("mixed_bfloat16")
>>> block = td.Map(td.Vector(2) >> td.FC(3)) >> td.Sum()
>>> low = compute_dtype(block)
>>> low
'bfloat16'
>>> held_dtype(block.output_type, low, keep=())
'bfloat16'
>>> block.eval([[1.0, 2.0]]).dtype   # results in the declared dtype
dtype('float32')
>>> keras.mixed_precision.set_global_policy("float32")
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from refold.blocks.types import TensorType

LOW_DTYPES = ("float16", "bfloat16")


def _mixed(policy) -> str | None:
    """The compute dtype of a mixed policy (compute in float16/bfloat16, variables
    in float32); None for any other."""
    compute, variable = str(policy.compute_dtype), str(policy.variable_dtype)
    return compute if compute in LOW_DTYPES and variable == "float32" else None


def _layer_policies(layer) -> Iterable:
    """The dtype policies of a Keras layer and of the layers inside it."""
    from refold import compat
    for inner in compat.inner_layers(layer):
        policy = getattr(inner, "dtype_policy", None)
        if policy is not None:
            yield inner, policy


def compute_dtype(root) -> str | None:
    """The low dtype values of float32 types are held in for `root`, or None.

    It is the compute dtype of the mixed policy in effect: the global policy if it
    is mixed, and that of any of the block's layers built under a mixed policy.
    Two different low dtypes (a float16 layer in a bfloat16 model, say) are
    refused: one dtype per type keeps the engine's buffers one dtype each.
    """
    import sys
    keras = sys.modules.get("keras")
    if keras is None:
        return None
    from refold.blocks.layers import is_keras_layer
    from refold.blocks.validation import validate
    found: dict[str, str] = {}
    low = _mixed(keras.mixed_precision.global_policy())
    if low:
        found[low] = f"the global dtype policy ({keras.mixed_precision.global_policy().name!r})"
    for b in validate(root):
        for w in b.weights():
            if not is_keras_layer(w):
                continue
            for layer, policy in _layer_policies(w):
                low = _mixed(policy)
                if low and low not in found:
                    found[low] = f"{b.path}: layer {layer.name!r} ({policy.name!r})"
    if len(found) > 1:
        raise ValueError(
            "the block mixes two low precisions, " + " and ".join(found.values())
            + ": build all its layers under one mixed policy (or float32)")
    return next(iter(found), None)


@contextlib.contextmanager
def global_policy(name: str | None):
    """Sets Keras' global dtype policy to `name` inside the block (no change for
    None): how a saved mixed model's block is rebuilt mixed, whatever the policy
    of the loading process."""
    if name is None:
        yield
        return
    import keras
    before = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(before)


def held_dtype(t: TensorType, low: str | None, keep: Iterable[TensorType]) -> str:
    """The dtype values of type `t` are held in (see the module docstring): `low`
    for a float32 type not in `keep` (the metrics' types), else `t.dtype`."""
    if low is None or t.dtype != "float32" or t in set(keep):
        return t.dtype
    return low


def held_type(t: TensorType, low: str | None, keep: Iterable[TensorType]) -> TensorType:
    """`t` with the dtype its values are held in."""
    dtype = held_dtype(t, low, keep)
    return t if dtype == t.dtype else TensorType(t.shape, dtype)


def to_held(tensor: Any, declared: TensorType, held: str):
    """An op's output (or a constant) of type `declared`, cast to the `held` dtype
    (under a mixed policy). Only a float32 type's value is cast, and only from
    float32 or a low dtype: anything else is left for the caller's type check."""
    if declared.dtype != "float32":
        return tensor
    import tensorflow as tf
    tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype.name in ("float32", *LOW_DTYPES) and tensor.dtype.name != held:
        return tf.cast(tensor, held)
    return tensor





class HeldOp:
    """An op as the batching engine runs it under a mixed policy: its types are
    those its values are held in, and its outputs are cast to them (`to_held`)."""

    def __init__(self, op, low: str, keep: Iterable[TensorType]):
        keep = frozenset(keep)
        self.op = op
        self.input_types = tuple(held_type(t, low, keep) for t in op.input_types)
        self.output_types = tuple(held_type(t, low, keep) for t in op.output_types)
        self._declared = op.output_types

    def fn(self, *args):
        outs = self.op.fn(*args)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        if len(outs) != len(self._declared):
            return outs  # the engine reports the wrong count
        return [to_held(y, t, h.dtype)
                for y, t, h in zip(outs, self._declared, self.output_types)]

    def __getattr__(self, name: str):  # name, key, cost, handles_empty, ...
        return getattr(self.op, name)


def held_program(ops, value_types, low: str | None, keep: Iterable[TensorType]):
    """`(ops, value types)` as the engine runs them: unchanged without a low dtype,
    else each wrapped in a `HeldOp` and each type as held (same order, so value
    type ids stay those of the program)."""
    if low is None:
        return list(ops), list(value_types)
    keep = frozenset(keep)
    held = [held_type(t, low, keep) for t in value_types]
    for k, t in enumerate(held):
        if t in held[:k]:
            raise ValueError(
                f"under a mixed policy the block's float32 values of shape {t.shape} are "
                f"held in {low}, and it also declares {low} values of that shape: declare "
                f"those float32 too, or build the block under the float32 policy")
    return [HeldOp(op, low, keep) for op in ops], held
__all__ = ["LOW_DTYPES", "HeldOp", "compute_dtype", "global_policy", "held_dtype",
           "held_program", "held_type", "to_held"]
