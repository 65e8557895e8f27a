"""`DataFlow`: which parts of one block may read which (what `Block.dataflow` returns).

A block's *parts* are its input (`DataFlow.INPUT`), its output (`DataFlow.OUTPUT`),
the blocks it evaluates (its children, and for a forward-declaration reference the
declared block) and the ops it declares (`Block.ops`). A `DataFlow` maps each part
that reads (a child, an op, the output) to the parts it may read from (the input,
a child, an op). The compiler chains the blocks' declarations into which op may
feed which (`compiler.graphs.op_feeds`), and runs an op before its loop when no op
in the loop can feed it: a declaration that says less than the truth would run an
op too early (the engine refuses that batch with an `EngineError`, never a wrong
result), one that says more only keeps an op in the loop that could have run
before it.

The rules of the library's blocks, for instance: a `Pipe`'s second block reads the
first one's output only; `Record` and `Map` feed the input to every child; `Fold`
and `RNN` say `opaque` (anything inside may feed anything: the state goes round).

>>> import refold as td
>>> f, g = td.Function(abs, name="f"), td.Function(abs, name="g")
>>> pipe = td.Pipe(td.Scalar(), f, g)
>>> _ = td.validate(pipe)  # orders the pipe's children
>>> flow = pipe.dataflow()
>>> flow.sources(g)
[<td.Function 'f' tf_fn='abs'>]
>>> flow.sources(td.DataFlow.OUTPUT)
[<td.Function 'g' tf_fn='abs'>]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from refold.blocks.op import Op


class _End(str):
    """`DataFlow.INPUT` or `DataFlow.OUTPUT`: a block's own input or output."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"DataFlow.{self}"


class DataFlow:
    """For each part of a block that reads, the parts it may read from.

    Args:
        reads: `{reader: [source, ...]}`. A reader is `DataFlow.OUTPUT`, a block the
            block evaluates or an `Op` it declares; a source is `DataFlow.INPUT`, a
            block or an `Op`. A reader left out reads nothing.

    >>> import refold as td
    >>> scalar = td.Scalar()
    >>> td.DataFlow({scalar: [td.DataFlow.INPUT], td.DataFlow.OUTPUT: [scalar]})
    DataFlow({<td.Scalar dtype='float32'>: [DataFlow.INPUT], DataFlow.OUTPUT: [<td.Scalar dtype='float32'>]})
    """  # noqa: E501

    INPUT = _End("INPUT")
    OUTPUT = _End("OUTPUT")

    __slots__ = ("_reads",)

    def __init__(self, reads: Mapping[Any, Iterable[Any]]):
        from refold.blocks.block import Block
        self._reads: dict[Any, list] = {}
        for reader, sources in reads.items():
            if reader is not DataFlow.OUTPUT and not isinstance(reader, (Block, Op)):
                raise TypeError(f"a DataFlow reader must be DataFlow.OUTPUT, a block or an "
                                f"Op, got {reader!r}")
            sources = list(sources)
            for s in sources:
                if s is not DataFlow.INPUT and not isinstance(s, (Block, Op)):
                    raise TypeError(f"a DataFlow source must be DataFlow.INPUT, a block or "
                                    f"an Op, got {s!r} (read by {reader!r})")
            self._reads[reader] = sources

    @property
    def readers(self) -> list:
        """The parts that read something, in the order given."""
        return list(self._reads)

    def sources(self, reader: Any) -> list:
        """What `reader` may read from (empty for a part that reads nothing)."""
        return list(self._reads.get(reader, ()))

    def __repr__(self) -> str:
        return f"DataFlow({self._reads!r})"

    # --- the common rules --------------------------------------------------------------

    @staticmethod
    def leaf(block) -> DataFlow:
        """A block without children: its ops read its input, its output is its input
        and its ops' outputs (`Block.dataflow`'s default for such a block). A block
        that feeds one of its ops' outputs to an op declares so itself."""
        ops = list(block.ops())
        reads: dict = {op: [DataFlow.INPUT] for op in ops}
        reads[DataFlow.OUTPUT] = [DataFlow.INPUT, *ops]
        return DataFlow(reads)

    @staticmethod
    def parallel(block) -> DataFlow:
        """Every child reads the input; the output is the children's (`Record`, `Map`)."""
        children = block.children
        reads: dict = {c: [DataFlow.INPUT] for c in children}
        reads[DataFlow.OUTPUT] = children
        return DataFlow(reads)

    @staticmethod
    def opaque(block, evaluated: Iterable = ()) -> DataFlow:
        """Anything inside may feed anything: the input, every child's output and every
        op's may reach every child, every op and the output. Always correct (`Fold`,
        `RNN`: the state goes round); `evaluated` adds blocks evaluated that are not
        children."""
        parts = [*block.children, *evaluated, *block.ops()]
        return DataFlow({r: [DataFlow.INPUT, *parts] for r in [*parts, DataFlow.OUTPUT]})



def opaque_rule(block) -> DataFlow:
    """`DataFlow.opaque(block)` as a `dataflow` method: the rule a class gets when it
    overrides the deprecated `_evaluate` and declares none (`blocks.block`)."""
    return DataFlow.opaque(block)


def dataflow_of(block) -> DataFlow:
    """`block.dataflow()`, where its class declared the rule for the way it evaluates.

    A class inherits its parent's `dataflow` only with its parent's `evaluate`: a
    subclass that overrides `evaluate` below the class that declared `dataflow` gets
    `Block.dataflow`'s default instead (the leaf rule, or a `TypeError` for a block
    with children), never a rule written for another `evaluate`.

    >>> import refold as td
    >>> class MapTwice(td.Map):  # each element through the element block, twice
    ...     def evaluate(self, ctx, x):
    ...         elem = self.element_block
    ...         return [elem.eval_in(ctx, elem.eval_in(ctx, item)) for item in x]
    >>> dataflow_of(MapTwice(td.Scalar()))
    Traceback (most recent call last):
    ...
    TypeError: MapTwice: MapTwice has children but does not declare its data flow: override dataflow() to say which parts of it read which (return td.DataFlow.opaque(self) if unsure: it is always correct, though it may keep ops in the loop that could run before it); see docs/guide/extending.md
    """  # noqa: E501
    from refold.blocks.block import Block
    mro = type(block).__mro__
    declared = next(k for k in mro if "dataflow" in k.__dict__)
    evaluates = next(k for k in mro if "evaluate" in k.__dict__)
    if not issubclass(declared, evaluates):
        return Block.dataflow(block)
    return block.dataflow()


__all__ = ["DataFlow", "dataflow_of"]
