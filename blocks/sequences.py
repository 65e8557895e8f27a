"""Blocks over sequences: `Map`, `Fold`, `RNN`, `Reduce` (`Sum`, `Min`, `Max`, `Mean`),
`Broadcast`, `Zip`, `ZipWith`, `NGrams`, `Nth`, `Stack`.

A sequence is a Python list while it is evaluated; its type is
`SequenceType(element_type)`. A broadcast sequence (from `Broadcast`) repeats one
value forever; `Zip` truncates to the shortest finite input.

>>> import tensorflow as tf
>>> from refold.blocks import Scalar, Map, Function, Fold, Sum, FromTensor
>>> [float(v) for v in Map(Scalar() >> Function(tf.square)).eval([1, 2, 3])]
[1.0, 4.0, 9.0]
>>> float((Map(Scalar()) >> Sum()).eval([1, 2, 3]))
6.0
>>> float((Map(Scalar()) >> Fold(Function(tf.add), FromTensor(tf.zeros([])))).eval([1, 2]))
3.0
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Mapping
from typing import Any

from refold.blocks.block import PY, Block, bad_input, block_factory
from refold.blocks.composition import AllOf, Pipe, convert_to_block
from refold.blocks.evaluation.dataflow import DataFlow
from refold.blocks.types import (
    BroadcastSequenceType,
    PyObjectType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
)


def _element_type(block: Block, t, what: str, allow_broadcast: bool = True):
    """The element type of a sequence-like input type (None if unknown)."""
    if t is None:
        return None
    if isinstance(t, BroadcastSequenceType) and not allow_broadcast:
        raise TypeError(f"{block.path}: cannot {what} an infinite sequence: {t}")
    if isinstance(t, SequenceType):
        return t.element_type
    if isinstance(t, PyObjectType):
        return PY
    if isinstance(t, TupleType):
        items = list(t)
        if not items:
            return None
        if any(x != items[0] for x in items):
            raise TypeError(f"{block.path}: cannot {what} a tuple of mixed types: {t}")
        return items[0]
    raise TypeError(f"{block.path}: cannot {what} a {t}")


def _as_list(block: Block, x: Any) -> list:
    if isinstance(x, itertools.repeat):
        raise bad_input(block, "got an infinite sequence")
    unordered = _unordered(x)
    if unordered:
        raise bad_input(block, unordered)
    try:
        return list(x)
    except TypeError:
        raise bad_input(block, f"expected a sequence, got {type(x).__name__}: {x!r:.60}") \
            from None


def _unordered(x: Any) -> str | None:
    """Why `x` is not taken as a sequence though Python iterates it (None if it is):
    a dict iterates its keys, so children given as `{"a": node, ...}` would be the
    keys `"a", ...`, and a set has no order."""
    if isinstance(x, Mapping):
        keys = ", ".join(repr(k) for k in itertools.islice(x, 3)) + (", ..." if len(x) > 3
                                                                    else "")
        return (f"expected a sequence, got a {type(x).__name__} (keys {keys}), whose items "
                "Python would iterate as its keys: give a list, or read the values with "
                "td.InputTransform(lambda d: list(d.values()))")
    if isinstance(x, (set, frozenset)):
        return (f"expected a sequence, got a {type(x).__name__}, which has no order: give a "
                "list (e.g. td.InputTransform(sorted))")
    return None


class Map(Block):
    """Applies `elem_block` to every element of a sequence.

    Args:
        elem_block: the block applied to each element (block-like values allowed).
    """

    _expected_input_types = (SequenceType, TupleType, PyObjectType)
    _expected_output_types = (SequenceType, PyObjectType)

    def __init__(self, elem_block: Any, name: str | None = None):
        super().__init__([convert_to_block(elem_block)], name=name)

    @property
    def element_block(self) -> Block:
        return self._children[0]

    def infer_types(self):
        elem = self._children[0]
        t = self.input_type
        elem.set_input_type(_element_type(self, t, "map over"))
        out = self.output_type
        if isinstance(out, SequenceType):
            elem.set_output_type(out.element_type)
        if elem.output_type is None:
            return
        if isinstance(t, BroadcastSequenceType):
            if self.output_type is not None and not isinstance(
                    self.output_type, (BroadcastSequenceType, PyObjectType)):
                raise TypeError(
                    f"{self.path}: Map over a broadcast sequence {t}, but its output was "
                    f"already inferred to be a finite {self.output_type}; connect the Map "
                    "to its input before anything reads its output")
            self.set_output_type(BroadcastSequenceType(elem.output_type))
        else:
            # Until the input is known, assume a finite sequence (the common case) so
            # that types flow on at once, as in Fold.
            self.set_output_type(SequenceType(elem.output_type))

    def evaluate(self, ctx, x):
        elem = self._children[0]
        if isinstance(x, itertools.repeat):
            return itertools.repeat(elem.eval_in(ctx, next(x)))
        return [elem.eval_in(ctx, item) for item in _as_list(self, x)]

    def dataflow(self) -> DataFlow:
        """The element block reads (the elements of) the input; the output is its."""
        return DataFlow.parallel(self)


class Fold(Block):
    """A left fold: `state = start(); for x in xs: state = combine((state, x))`.

    Args:
        combine_block: takes `(state, element)` and returns the next state.
        start_block: the initial state; it takes no input (e.g. `Zeros`, `FromTensor`).
    """

    _expected_input_types = (SequenceType, TupleType, PyObjectType)

    def __init__(self, combine_block: Any, start_block: Any, name: str | None = None):
        combine = convert_to_block(combine_block)
        start = convert_to_block(start_block)
        super().__init__([combine, start], name=name)
        start.set_input_type(VoidType())
        combine.set_input_type_classes(TupleType)

    @property
    def combine_block(self) -> Block:
        return self._children[0]

    @property
    def start_block(self) -> Block:
        return self._children[1]

    def _child_key(self, child):
        return ".combine" if child is self._children[0] else ".start"

    def infer_types(self):
        combine, start = self._children
        elem = _element_type(self, self.input_type, "fold over", allow_broadcast=False)
        if isinstance(combine.input_type, TupleType) and len(combine.input_type) != 2:
            raise TypeError(f"{self.path}: Fold: combine_block input_type must be a 2-tuple, "
                            f"got {combine.input_type}")
        state = self.output_type or start.output_type or combine.output_type
        if state is None and isinstance(combine.input_type, TupleType):
            state = combine.input_type[0]
        if state is not None:
            for b in (self, start, combine):
                b.set_output_type(state)
        if state is not None and elem is not None:
            combine.set_input_type(TupleType(state, elem))

    def evaluate(self, ctx, x):
        combine, start = self._children
        state = start.eval_in(ctx, None)
        for item in _as_list(self, x):
            state = combine.eval_in(ctx, (state, item))
        return state

    def dataflow(self) -> DataFlow:
        """Anything inside may feed anything: the state goes round."""
        return DataFlow.opaque(self)


class RNN(Block):
    """Runs a cell over a sequence: `(outputs, final_state)`.

    `cell` takes `(element, state)` and returns `(output, state)`. The initial state
    is zeros (default), `initial_state` (a block with no input), or, with
    `initial_state_from_input=True`, the second item of the input
    `(sequence, state)`.

    A cell whose `split_recurrence()` returns two blocks, `(per_element,
    recurrent)`, runs as them: `per_element` on every element first (`x ->
    x'`, the part of the cell that does not read the state: the zoo's cells
    give their input projection `x W + b`), then `recurrent` over the sequence
    (`(x', state) -> (output, state)`). The compiler then runs `per_element` on
    all the batch's elements at once before its loop, and only `recurrent` in
    it (`compiler.graphs.op_feeds`). The results are the cell's.
    """

    _expected_input_types = (SequenceType, TupleType, PyObjectType)
    _expected_output_types = (TupleType,)

    def __init__(self, cell: Any, initial_state: Any = None,
                 initial_state_from_input: bool = False, name: str | None = None):
        if initial_state is not None and initial_state_from_input:
            raise ValueError("Cannot specify initial_state if initial_state_from_input is True.")
        from refold.blocks.tensors import Zeros
        split = getattr(cell, "split_recurrence", None)
        parts = split() if callable(split) else None
        self.per_element_block = None if parts is None else convert_to_block(parts[0])
        cell = convert_to_block(cell if parts is None else parts[1])
        self._from_input = initial_state_from_input
        children = [cell]
        if not initial_state_from_input:
            children.append(Zeros() if initial_state is None else
                            convert_to_block(initial_state))
        if self.per_element_block is not None:
            children.append(self.per_element_block)
        super().__init__(children, name=name)
        cell.set_input_type_classes(TupleType)
        cell.set_output_type_classes(TupleType)
        if not initial_state_from_input:
            children[1].set_input_type(VoidType())
        else:
            self.set_input_type_classes(TupleType)

    def _child_key(self, child):
        if child is self.per_element_block:
            return ".per_element"
        return ".cell" if child is self._children[0] else ".initial_state"

    def infer_types(self):
        cell = self._children[0]
        t = self.input_type
        if self._from_input and t is not None:
            if not isinstance(t, TupleType) or len(t) != 2:
                raise TypeError(f"{self.path}: Expected a two-tuple of (input_sequence, "
                                f"state), saw: {t}")
            seq, init = t[0], t[1]
            if not isinstance(seq, SequenceType):
                raise TypeError(f"{self.path}: First RNN input must be a sequence: {seq}")
        else:
            seq, init = t, None
        elem = _element_type(self, seq, "run an RNN on", allow_broadcast=False)
        if self.per_element_block is not None and elem is not None:
            self.per_element_block.set_input_type(elem)
            elem = self.per_element_block.output_type
        out = cell.output_type
        if out is not None and (not isinstance(out, TupleType) or len(out) != 2):
            raise TypeError(f"{self.path}: RNN cell must have tuple output type "
                            f"(output, state): {out}")
        state = out[1] if out is not None else None
        if state is None and isinstance(cell.input_type, TupleType) and len(cell.input_type) == 2:
            state = cell.input_type[1]
        if state is None and not self._from_input:
            state = self._children[1].output_type
        state = state or init
        if state is not None:
            if not self._from_input:
                self._children[1].set_output_type(state)
            if out is not None and out[1] != state:
                raise TypeError(f"{self.path}: RNN cell input and output state types don't "
                                f"match: {state} vs {out[1]}")
        if state is not None and elem is not None:
            cell.set_input_type(TupleType(elem, state))
        if out is not None:
            self.set_output_type(TupleType(SequenceType(out[0]), out[1]))

    def evaluate(self, ctx, x):
        cell = self._children[0]
        if self._from_input:
            seq, state = x
        else:
            seq, state = x, self._children[1].eval_in(ctx, None)
        items = _as_list(self, seq)
        if self.per_element_block is not None:
            items = [self.per_element_block.eval_in(ctx, item) for item in items]
        outputs = []
        for item in items:
            out, state = cell.eval_in(ctx, (item, state))
            outputs.append(out)
        return outputs, state

    def dataflow(self) -> DataFlow:
        """`per_element_block` (if the cell was split) reads the input only; the rest
        may feed anything inside: the state goes round."""
        flow = DataFlow.opaque(self)
        if self.per_element_block is None:
            return flow
        reads = {r: flow.sources(r) for r in flow.readers}
        reads[self.per_element_block] = [DataFlow.INPUT]
        return DataFlow(reads)


class Reduce(Block):
    """Combines a sequence pairwise in a balanced tree: ceil(log2 n) levels deep.

    Each round pairs items (0, 1), (2, 3), ...; an odd last item waits for the next
    round. An empty sequence gives `default_block` (zeros by default).
    """

    _expected_input_types = (SequenceType, TupleType, PyObjectType)

    def __init__(self, combine_block: Any, default_block: Any = None, name: str | None = None):
        from refold.blocks.tensors import Zeros
        combine = convert_to_block(combine_block)
        default = Zeros() if default_block is None else convert_to_block(default_block)
        super().__init__([combine, default], name=name)
        default.set_input_type(VoidType())
        combine.set_input_type_classes(TupleType)

    @property
    def combine_block(self) -> Block:
        return self._children[0]

    @property
    def default_block(self) -> Block:
        return self._children[1]

    def _child_key(self, child):
        return ".combine" if child is self._children[0] else ".default"

    def _repr_args(self):
        return {"combine_block": self._children[0]}

    def infer_types(self):
        combine, default = self._children
        elem = _element_type(self, self.input_type, "reduce", allow_broadcast=False)
        t = elem or self.output_type or combine.output_type or default.output_type
        if t is not None:
            for b in (self, combine, default):
                b.set_output_type(t)
            combine.set_input_type(TupleType(t, t))

    def evaluate(self, ctx, x):
        combine, default = self._children
        items = _as_list(self, x)
        if not items:
            return default.eval_in(ctx, None)
        while len(items) > 1:
            paired = [combine.eval_in(ctx, (items[i], items[i + 1]))
                      for i in range(0, len(items) - 1, 2)]
            if len(items) % 2:
                paired.append(items[-1])
            items = paired
        return items[0]

    def dataflow(self) -> DataFlow:
        """Anything inside may feed anything: the combined items combine again."""
        return DataFlow.opaque(self)


def _reducer(fn_name: str, doc: str):
    @block_factory
    def make(name: str | None = None) -> Reduce:
        import tensorflow as tf

        from refold.blocks.tensors import Function
        block = Reduce(Function(getattr(tf, fn_name), handles_empty=True), name=name)
        block._constructor_name = make.__name__
        return block
    make.__doc__ = doc
    return make


# The strings after each factory are their docstrings for the API pages, which read the
# source (`help(td.Sum)` reads `__doc__`).
Sum = _reducer("add", "Sums a sequence of tensors (zeros when empty).")
"""`Sum(name=None)`: sums a sequence of tensors (zeros when empty), a `Reduce` of `tf.add`."""
Sum.__name__ = "Sum"
Min = _reducer("minimum", "The elementwise minimum of a sequence of tensors (zeros when empty).")
"""`Min(name=None)`: the elementwise minimum of a sequence of tensors (zeros when empty)."""
Min.__name__ = "Min"
Max = _reducer("maximum", "The elementwise maximum of a sequence of tensors (zeros when empty).")
"""`Max(name=None)`: the elementwise maximum of a sequence of tensors (zeros when empty)."""
Max.__name__ = "Max"


@block_factory
def Mean(name: str | None = None) -> Block:  # noqa: N802
    """The mean of a sequence of tensors (zeros when empty).

    >>> from refold.blocks import Map, Scalar
    >>> float((Map(Scalar()) >> Mean()).eval([1, 2, 6]))
    3.0
    """
    import tensorflow as tf

    from refold.blocks.inputs import Length
    from refold.blocks.tensors import Function

    def mean(total, count):
        count = tf.reshape(count, [-1] + [1] * (total.shape.rank - 1))
        return tf.math.divide_no_nan(total, tf.cast(count, total.dtype))
    mean.pure = True  # TensorFlow ops only (`Op`'s `pure`)

    block = Pipe(AllOf(Sum(), Length()), Function(mean, handles_empty=True), name=name)
    block._constructor_name = "Mean"
    return block


class Broadcast(Block):
    """Repeats a value forever (`itertools.repeat`), for `Zip` with finite sequences."""

    _expected_output_types = (BroadcastSequenceType, PyObjectType)

    def infer_types(self):
        if self.input_type is not None:
            self.set_output_type(BroadcastSequenceType(self.input_type))
        if isinstance(self.output_type, BroadcastSequenceType):
            self.set_input_type(self.output_type.element_type)

    def evaluate(self, ctx, x):
        return itertools.repeat(x)


class Zip(Block):
    """Zips a tuple of sequences into a sequence of tuples (shortest wins).

    If every input is a broadcast sequence, so is the output. An item that is a
    plain Python object (a list of configurations, say) is zipped as a sequence of
    Python objects, so per-position data need not be turned into tensors first:

    >>> import refold as td
    >>> pairs = td.AllOf(td.GetItem(0) >> td.Scalar() >> td.Broadcast(), td.GetItem(1)) >> td.Zip()
    >>> [(float(a), b) for a, b in pairs.eval((2, ["x", "y"]))]
    [(2.0, 'x'), (2.0, 'y')]
    """

    _expected_input_types = (TupleType, PyObjectType)
    _expected_output_types = (SequenceType, PyObjectType)

    def infer_types(self):
        t = self.input_type
        if isinstance(t, PyObjectType):
            self.set_output_type(PY)  # zipped Python objects are a Python object
        if not isinstance(t, TupleType):
            return
        if len(t) == 0:
            raise TypeError(f"{self.path}: zip requires at least one input sequence")
        for item in t:
            if not isinstance(item, (SequenceType, PyObjectType)):
                raise TypeError(f"{self.path}: item types must be sequences: {t}")
        if all(isinstance(x, PyObjectType) for x in t):
            self.set_output_type(PY)
            return
        kind = BroadcastSequenceType if all(
            isinstance(x, BroadcastSequenceType) for x in t) else SequenceType
        self.set_output_type(kind(TupleType(*(
            PY if isinstance(x, PyObjectType) else x.element_type for x in t))))

    def evaluate(self, ctx, x):
        if all(isinstance(s, itertools.repeat) for s in x):
            return itertools.repeat(tuple(next(s) for s in x))
        for k, s in enumerate(x):
            if not isinstance(s, itertools.repeat):
                unordered = _unordered(s)
                if unordered:
                    raise bad_input(self, f"item {k}: {unordered}")
                try:
                    iter(s)
                except TypeError:
                    raise bad_input(self, f"item {k}: expected a sequence, got "
                                          f"{type(s).__name__}: {s!r:.60}") from None
        return [tuple(items) for items in zip(*x)]


@block_factory
def ZipWith(elem_block: Any, name: str | None = None) -> Block:  # noqa: N802
    """`Zip() >> Map(elem_block)`."""
    block = Pipe(Zip(), Map(elem_block), name=name)
    block._constructor_name = "ZipWith"
    return block


class NGrams(Block):
    """Sliding windows of `n` consecutive elements, as tuples."""

    _expected_input_types = (SequenceType, TupleType, PyObjectType)
    _expected_output_types = (SequenceType, PyObjectType)

    def __init__(self, n: int, name: str | None = None):
        if not isinstance(n, int) or n <= 0:
            raise ValueError(f"n must be positive: {n!r}")
        self._n = n
        super().__init__(name=name)

    @property
    def n(self) -> int:
        return self._n

    def _repr_args(self):
        return {"n": self._n}

    def infer_types(self):
        elem = _element_type(self, self.input_type, "take n-grams of", allow_broadcast=False)
        if elem is not None:
            self.set_output_type(SequenceType(TupleType(*([elem] * self._n))))

    def evaluate(self, ctx, x):
        items = _as_list(self, x)
        return [tuple(items[i:i + self._n]) for i in range(len(items) - self._n + 1)]


class Nth(Block):
    """`(sequence, n) -> sequence[n]`, for an int `n` in `[0, len(sequence))`.

    `n` comes from the data, where a negative number is most often a marker ("no
    such item") rather than a count from the end, so anything but an index in
    range is an input error naming the block path (`InputKeyError` for one out of
    range). A count from the end is `len(sequence) + n`, said in the data or in
    an `InputTransform`. (`GetItem(-1)` and `Slice` keep Python's meaning: their
    key is written in the block expression.)

    >>> import refold as td
    >>> nth = (td.Map(td.Scalar()), td.Identity()) >> td.Nth()
    >>> nth.eval(([1.0, 2.0, 3.0], 1)).tolist()
    2.0
    >>> nth.eval(([1.0, 2.0, 3.0], -1))
    Traceback (most recent call last):
    ...
    refold.blocks.errors.InputKeyError: Pipe[1] > Nth: index -1 is out of range for a sequence
    of length 3 (Nth takes indices from 0, not from the end)
    """

    _expected_input_types = (TupleType,)

    def infer_types(self):
        t = self.input_type
        if t is None:
            return
        if len(t) != 2:
            raise TypeError(f"{self.path}: Nth block takes 2 inputs: {t}")
        if isinstance(t[0], BroadcastSequenceType):
            raise TypeError(f"{self.path}: cannot call Nth on an infinite sequence: {t[0]}")
        if not isinstance(t[0], SequenceType):
            raise TypeError(f"{self.path}: first input to Nth must be a sequence: {t[0]}")
        if not isinstance(t[1], PyObjectType):
            raise TypeError(f"{self.path}: second input to Nth must be a PyObject: {t[1]}")
        self.set_output_type(t[0].element_type)

    def evaluate(self, ctx, x):
        seq, n = x
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise bad_input(self, f"index must be an integer, got {n!r}")
        if 0 <= n < len(seq):
            return seq[n]
        from refold.blocks.errors import InputKeyError
        hint = " (Nth takes indices from 0, not from the end)" if n < 0 else ""
        raise InputKeyError(self.path, f"index {n!r} is out of range for a sequence of "
                                       f"length {len(seq)}{hint}")


class Stack(Block):
    """A sequence of up to `max_length` tensors of one type `t` as one tensor
    `[max_length, *t.shape]`, the elements in order and zeros past the last.

    It is how a computation over a whole sequence at once (a loop on the device that
    indexes the sequence's elements by values it computes) reads a sequence the
    engine batched element by element: one op of `max_length` arguments per
    sequence, its missing elements read from one shared zero constant. Its cost is
    linear in `max_length` whatever the length, so choose it no larger than needed;
    a longer sequence is an input error naming the block path. Its gradient passes
    to the elements it stacked.

    >>> import refold as td
    >>> stack = td.Map(td.Scalar()) >> td.Stack(4)
    >>> stack.output_type
    TensorType((4,), 'float32')
    >>> stack.eval([1.0, 2.0, 3.0]).tolist()
    [1.0, 2.0, 3.0, 0.0]
    >>> (td.Map(td.Vector(2)) >> td.Stack(3)).eval([[1.0, 2.0]]).tolist()
    [[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]

    Args:
        max_length: the longest sequence accepted, the output's first dimension.
    """

    _expected_input_types = (SequenceType, TupleType, PyObjectType)
    _expected_output_types = (TensorType,)

    def __init__(self, max_length: int, name: str | None = None):
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"max_length must be a positive int, got {max_length!r}")
        self._max = max_length
        self._op = None
        super().__init__(name=name)

    @property
    def max_length(self) -> int:
        return self._max

    def _repr_args(self):
        return {"max_length": self._max}

    def infer_types(self):
        elem = _element_type(self, self.input_type, "stack", allow_broadcast=False)
        if elem is None or elem is PY or isinstance(elem, PyObjectType):
            return
        if not isinstance(elem, TensorType):
            raise TypeError(f"{self.path}: Stack takes a sequence of tensors, got {elem}")
        self.set_output_type(TensorType((self._max, *elem.shape), elem.dtype))

    def _element(self):
        out = self.output_type
        return TensorType(out.shape[1:], out.dtype)

    def op(self):
        """The op this block calls (its types must be known): `max_length` elements in,
        their stack out."""
        if self._op is None:
            import tensorflow as tf

            from refold.blocks.op import Op
            elem = self._element()
            self._op = Op("stack", lambda *xs: [tf.stack(xs, axis=1)], [elem] * self._max,
                          [self.output_type], key=("stack", self._max, elem),
                          handles_empty=True, side_by_side=True)
        return self._op

    def ops(self):
        return [self.op()]

    def evaluate(self, ctx, x):
        import numpy as np
        items = _as_list(self, x)
        if len(items) > self._max:
            raise bad_input(self, f"a sequence of {len(items)} elements is longer than "
                                  f"max_length={self._max}")
        if len(items) < self._max:
            elem = self._element()
            zero = ctx.constant(np.zeros(elem.shape, elem.numpy_dtype), elem)
            items = items + [zero] * (self._max - len(items))
        return ctx.op(self.op(), items)[0]


__all__ = ["Map", "Fold", "RNN", "Reduce", "Sum", "Min", "Max", "Mean", "Broadcast", "Zip",
           "ZipWith", "NGrams", "Nth", "Stack"]
