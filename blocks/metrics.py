"""`Metric`: emit a value (a loss, a hit, a prediction) from anywhere in an expression.

A metric block outputs nothing (`VoidType`); every value it receives is collected
under its name, however many there are per input: a loss at every tree node is a
`Metric` inside the recursive block. With a `(tensor, label)` input, the label (any
Python object) is collected alongside.

>>> import tensorflow as tf
>>> from refold.blocks import Map, Scalar, Metric, Function, Void
>>> block = Map(Scalar() >> Function(tf.square) >> Metric('squares')) >> Void()
>>> result, metrics = block.eval([1, 2, 3])
>>> metrics['squares'].tolist()
[1.0, 4.0, 9.0]
"""

from __future__ import annotations

from refold.blocks.block import Block
from refold.blocks.types import PyObjectType, TensorType, TupleType, VoidType


class Metric(Block):
    """Collects its input under `metric_name`; outputs nothing.

    Args:
        metric_name: the name the values are reported under. All metrics of one
            name in an expression must have the same type.
    """

    _expected_input_types = (TensorType, TupleType)
    _expected_output_types = (VoidType,)

    def __init__(self, metric_name: str):
        if not isinstance(metric_name, str):
            raise TypeError(f"metric_name must be a string: {metric_name!r}")
        self._metric_name = metric_name
        super().__init__(output_type=VoidType(), name=metric_name)

    @property
    def metric_name(self) -> str:
        return self._metric_name

    @property
    def value_type(self) -> TensorType | None:
        """The type of the values collected (the tensor, without any label)."""
        t = self.input_type
        return t[0] if isinstance(t, TupleType) else t

    @property
    def has_labels(self) -> bool:
        return isinstance(self.input_type, TupleType)

    def infer_types(self):
        t = self.input_type
        if isinstance(t, TupleType):
            if len(t) != 2:
                raise TypeError(f"{self.path}: metric tuple input must have 2 items "
                                f"(value, label): {t}")
            if not isinstance(t[0], TensorType):
                raise TypeError(f"{self.path}: expected a tensor type, saw: {t[0]}")
            if not isinstance(t[1], PyObjectType):
                raise TypeError(f"{self.path}: expected a pyobj type, saw: {t[1]}")

    def evaluate(self, ctx, x):
        if isinstance(self.input_type, TupleType):
            ctx.metric(self._metric_name, x[0], x[1])
        else:
            ctx.metric(self._metric_name, x)
        return None


__all__ = ["Metric"]
