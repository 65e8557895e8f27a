"""Wiring blocks together: `Composition`, `Pipe` (`>>`), wires and `convert_to_block`.

A `Composition` holds children wired in any directed acyclic graph. Inside
`comp.scope()`, `b.reads(a)` feeds `a`'s output to `b`; `b.reads(a, c)` feeds the
tuple `(a, c)`; `b.reads(a[0])` feeds the first item of `a`'s (tuple) output.
`comp.input` and `comp.output` stand for the composition's own input and output.

>>> import tensorflow as tf
>>> from refold.blocks import Composition, Scalar, Function
>>> c = Composition()
>>> with c.scope():
...     x = Scalar().reads(c.input[0])
...     y = Scalar().reads(c.input[1])
...     total = Function(tf.add).reads(x, y)
...     _ = c.output.reads(Function(tf.negative).reads(total))
>>> float(c.eval((2, 3)))
-5.0

`a >> b >> c` is `Pipe(a, b, c)`: each block reads the one before it.

>>> (Scalar() >> Function(tf.square) >> Function(tf.negative)).eval(3.0)
array(-9., dtype=float32)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from refold.blocks.block import Block, bad_input, raise_named
from refold.blocks.evaluation.dataflow import DataFlow
from refold.blocks.evaluation.values import describe
from refold.blocks.types import (
    PyObjectType,
    ResultType,
    TupleType,
    VoidType,
)

_local = threading.local()


def current_composition() -> Composition | None:
    """The composition whose `scope()` is active in this thread, if any."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


class Wire:
    """The `index`-th item of `block`'s tuple output, as a source for `reads`/`connect`.

    Made by `block[i]`; for a `Record`, `record[key]` wires the child named `key`.
    """

    __slots__ = ("block", "index")

    def __init__(self, block: Block, index: Any):
        self.block = block
        self.index = index

    def __repr__(self) -> str:
        return f"{self.block!r}[{self.index!r}]"


class _ComposeIO(Block):
    """The placeholder standing for a composition's input (or output) inside it."""

    def __init__(self, composition: Composition, which: str):
        self._composition = composition
        self._which = which
        super().__init__()
        self._constructor_name = f"{type(composition).__name__}.{which}"

    def _containers(self):
        return (self._composition,)

    def _path_parent(self):
        return self._composition, f".{self._which}"

    def _label(self) -> str:
        return ""

    def __repr__(self) -> str:
        name = "" if self._composition.name is None else f" {self._composition.name!r}"
        return f"<td.{self._constructor_name}{name}>"


def _source_type(src: Block, index: Any) -> ResultType | None:
    """The type a wire carries: the block's output, or one item of it."""
    t = src.output_type
    if index is None or t is None:
        return t
    if isinstance(t, PyObjectType):
        return t
    if not isinstance(t, TupleType):
        raise TypeError(f"{src.path}: cannot take output {index!r} of a block whose output "
                        f"is {t}")
    try:
        return t[index]
    except (IndexError, TypeError):
        raise TypeError(f"{src.path}: cannot get output {index!r} of a block with {len(t)} "
                        f"outputs ({t})") from None


class Composition(Block):
    """Children wired in a directed acyclic graph (see the module docstring).

    Args:
        children: blocks to add as children up front (they may also be added by
            `reads` or `connect`); a child that never reads anything gets a void input.
        name: a name shown in reprs and block paths.
    """

    def __init__(self, children: Any = (), name: str | None = None):
        self._sources: dict[Block, list[tuple[Block, Any]]] = {}
        self._multi: dict[Block, bool] = {}
        self._plan: list | None = None
        super().__init__(name=name)
        self._input = _ComposeIO(self, "input")
        self._output = _ComposeIO(self, "output")
        for child in children:
            self._add_child(convert_to_block(child))

    @property
    def input(self) -> _ComposeIO:
        """Stands for the composition's input: `b.reads(comp.input)`."""
        return self._input

    @property
    def output(self) -> _ComposeIO:
        """Stands for the composition's output: `comp.output.reads(b)`."""
        return self._output

    def _child_key(self, child):
        return f"[{self._children.index(child)}]"

    def get_config(self) -> dict:
        """A composition wired with `reads` / `connect` is saved as its children and
        its wires: `(reader, [(source, item), ...], several)` by child index, with
        -1 for the composition's input and -2 for its output. (A subclass that
        wires itself in its constructor, such as `Pipe`, saves its arguments.)"""
        if type(self) is not Composition:
            return super().get_config()
        index = {id(c): i for i, c in enumerate(self._children)}
        index[id(self._input)], index[id(self._output)] = -1, -2
        wires = []
        for reader, sources in self._sources.items():
            items = [[index[id(b)], _wire_key(b, i)] for b, i in sources]
            wires.append([index[id(reader)], items, self._multi[reader]])
        return {"children": list(self._children), "name": self._name, "wires": wires}

    @classmethod
    def from_config(cls, config: dict):
        if "wires" not in config:
            return super().from_config(config)
        comp = cls(config["children"], name=config["name"])
        blocks = dict(enumerate(comp.children))
        blocks[-1], blocks[-2] = comp._input, comp._output
        for reader, items, multi in config["wires"]:
            sources = [blocks[b] if key is None else Wire(blocks[b], key) for b, key in items]
            comp.connect(sources if multi else sources[0], blocks[reader])
        return comp

    @contextlib.contextmanager
    def scope(self) -> Iterator[Composition]:
        """Makes this composition the one that `reads` wires into, in this thread."""
        stack = _local.__dict__.setdefault("stack", [])
        stack.append(self)
        try:
            yield self
        finally:
            if not stack or stack.pop() is not self:
                raise AssertionError("scope nesting violation.")

    def _own(self, block: Block, role: str) -> None:
        if isinstance(block, _ComposeIO):
            if block._composition is not self:
                raise ValueError(f"{self.path}: {block!r} is the {block._which} of a different "
                                 "composition")
            return
        if block.parent is not self:
            self._add_child(block)

    def connect(self, source: Any, reader: Any) -> None:
        """Feeds `source` (a block, a wire `b[i]`, or a tuple/list of them) to `reader`."""
        reader = convert_to_block(reader)
        if reader is self._input:
            raise ValueError(f"{self.path}: cannot write to composition input")
        self._own(reader, "reader")
        if reader in self._sources:
            raise ValueError(f"{reader.path}: input of block is already connected: "
                             f"{reader!r}")
        multi = isinstance(source, (tuple, list))
        items = list(source) if multi else [source]
        sources = []
        for item in items:
            if isinstance(item, Wire):
                block, index = item.block, item.index
            else:
                block, index = convert_to_block(item), None
            if block is self._output:
                raise ValueError(f"{self.path}: cannot read from composition output")
            self._own(block, "source")
            if index is not None:
                if isinstance(block, Record):
                    index = block._position(index)
                block.set_output_type_classes(TupleType, PyObjectType)
            sources.append((block, index))
        self._sources[reader] = sources
        self._multi[reader] = multi
        self._plan = None
        if multi and not sources:
            reader.set_input_type(VoidType())
        elif multi:
            reader.set_input_type_classes(TupleType, PyObjectType)
        self.infer_types()

    def infer_types(self) -> None:
        if not hasattr(self, "_output"):
            return  # still constructing
        self._input.set_output_type(self.input_type)
        self.set_input_type(self._input.output_type)
        self._output.set_input_type(self.output_type)
        self.set_output_type(self._output.input_type)
        self._output.set_output_type(self._output.input_type)
        self._output.set_input_type(self._output.output_type)
        for reader, sources in list(self._sources.items()):
            types = [_source_type(b, i) for b, i in sources]
            multi = self._multi[reader]
            expected = reader.input_type
            if multi and sources and isinstance(expected, TupleType) \
                    and len(expected) != len(sources):
                raise TypeError(f"{reader.path}: block has {len(sources)} inputs but expects "
                                f"{len(expected)} ({expected})")
            if not sources:  # `reads()` of nothing: a void input, not an empty tuple
                reader.set_input_type(VoidType())
            elif all(t is not None for t in types):
                reader.set_input_type(TupleType(*types) if multi else types[0])
            if not multi and sources[0][1] is None:
                # Even before types are known, the kinds of type must be able to meet.
                source = sources[0][0]
                reader.set_input_type_classes(*source.output_type_classes)
                source.set_output_type_classes(*reader.input_type_classes)
            expected = reader.input_type
            if expected is None or not sources:
                continue
            if not multi:
                wanted = [expected]
            elif isinstance(expected, TupleType):
                wanted = list(expected)
            else:  # a tuple of Python objects is itself a Python object
                wanted = [expected] * len(sources)
            for (block, index), t in zip(sources, wanted):
                if index is None:
                    block.set_output_type(t)

    # --- validation and evaluation ------------------------------------------------------

    def sources(self, reader: Block) -> list[tuple[Block, Any]]:
        """What `reader` (a child, or `output`) reads: its wires `(block, item)`, with
        `item` None for a whole output, in the order `reads` named them."""
        return list(self._sources.get(reader, ()))

    def validate_wiring(self) -> None:
        """Orders the children, gives unwired ones a void input, checks outputs are used."""
        for child in self._children:
            if child not in self._sources:
                child.set_input_type(VoidType())
        if self._output not in self._sources:
            if not isinstance(self.output_type, VoidType) and self.output_type is not None:
                raise TypeError(f"{self.path}: Composition block has no output")
            self.set_output_type(VoidType())
        order: list[Block] = []
        state: dict[Block, int] = {}  # 1: on the stack, 2: done

        def visit(start: Block) -> None:
            stack = [(start, iter(self._sources.get(start, ())))]
            state[start] = 1
            while stack:
                block, it = stack[-1]
                for src, _ in it:
                    if src is self._input:
                        continue
                    s = state.get(src)
                    if s == 1:
                        raise ValueError(f"{self.path}: Composition cannot have cycles.")
                    if s is None:
                        state[src] = 1
                        stack.append((src, iter(self._sources.get(src, ()))))
                        break
                else:
                    stack.pop()
                    state[block] = 2
                    if block is not self._output:
                        order.append(block)

        visit(self._output)
        for child in self._children:
            if child not in state:
                visit(child)
        read = {src for sources in self._sources.values() for src, _ in sources}
        unused = [c for c in self._children
                  if c not in read and not isinstance(c.output_type, VoidType)]
        if unused:
            raise TypeError(f"{self.path}: children have unused outputs: "
                            f"{', '.join(c.path for c in unused)}")
        slot = {self._input: 0}
        for i, child in enumerate(order):
            slot[child] = i + 1
        self._plan = [(child, [(slot[b], i) for b, i in self._sources.get(child, ())],
                       self._multi.get(child, False)) for child in order]
        self._out_plan = ([(slot[b], i) for b, i in self._sources.get(self._output, ())],
                          self._multi.get(self._output, False))

    def evaluate(self, ctx, x):
        values = [x]
        for child, sources, multi in self._plan:
            values.append(child.eval_in(ctx, _gather(values, sources, multi)))
        sources, multi = self._out_plan
        return _gather(values, sources, multi) if sources or multi else None

    def dataflow(self) -> DataFlow:
        """Each child reads what its wires name; the output, what the output's do."""
        if self._plan is None:
            self.validate_wiring()
        parts = [DataFlow.INPUT] + [child for child, _, _ in self._plan]
        reads = {child: [parts[slot] for slot, _ in sources]
                 for child, sources, _ in self._plan}
        reads[DataFlow.OUTPUT] = [parts[slot] for slot, _ in self._out_plan[0]]
        return DataFlow(reads)


def _wire_key(block: Block, index: Any) -> Any:
    """How a wire names an item of `block`'s output: a `Record`'s key, else `index`."""
    return block._keys[index] if index is not None and isinstance(block, Record) else index


def _gather(values: list, sources: list, multi: bool) -> Any:
    if not multi:
        if not sources:
            return None
        slot, index = sources[0]
        return values[slot] if index is None else values[slot][index]
    return tuple(values[s] if i is None else values[s][i] for s, i in sources)


class Pipe(Composition):
    """`Pipe(a, b, c)` is `a >> b >> c`: each block reads the output of the one before.

    Untyped `Identity` blocks are dropped; one whose type was set stays, since its
    type is a constraint the user wrote. `Pipe()` is an `Identity` and a pipe of one
    block is that block itself.
    """

    def __new__(cls, *blocks: Any, name: str | None = None, _from_rshift: bool = False):
        from refold.blocks.tensors import Identity
        converted = [convert_to_block(b) for b in blocks]
        kept = [b for b in converted if type(b) is not Identity
                or b.input_type is not None or b.output_type is not None]
        if len(kept) == 0:
            return Identity(name=name) if not converted else converted[0]
        if len(kept) == 1 and name is None:
            return kept[0]
        pipe = super().__new__(cls, *blocks, name=name, _from_rshift=_from_rshift)
        pipe._members = kept
        return pipe

    def __init__(self, *blocks: Any, name: str | None = None, _from_rshift: bool = False):
        members = self.__dict__.pop("_members", None)
        if members is None:  # __new__ returned something else; it is initialised already
            return
        self._from_rshift = _from_rshift and name is None
        super().__init__(members, name=name)  # a block given twice fails here
        previous: Block = self.input
        for block in members:
            self.connect(previous, block)
            previous = block
        self.connect(previous, self.output)

    def validate_wiring(self):
        super().validate_wiring()
        self._chain = [child for child, _, _ in self._plan]

    dataflow = Composition.dataflow  # evaluates as its wiring says, as a Composition

    def evaluate(self, ctx, x):
        for child in self._chain:
            try:  # `child.eval_in`, inlined (see `Block.eval_in`)
                x = child.evaluate(ctx, x)
            except Exception as e:
                raise_named(child, e, x)
        return x

    @property
    def path(self) -> str:
        # A pipe merged into its parent (see `_locate_child`) shows as that parent.
        return self._parent.path if self._merges_into_parent() else super().path

    def _locate_child(self, child):
        # `a >> b >> c` nests as Pipe(Pipe(a, b), c); show it as one flat Pipe[0..2].
        top = self
        while top._merges_into_parent():
            top = top.parent
        if child._named() and top.name is None:  # `Function 'cell'`, not `Pipe[1] > ...`
            return top, None
        return top, f"[{top.members.index(child)}]"

    def _merges_into_parent(self) -> bool:
        p = self._parent
        return (self._from_rshift and isinstance(p, Pipe) and p._from_rshift
                and p.children[0] is self)

    @property
    def members(self) -> list[Block]:
        """The blocks of the pipe in order, with `a >> b >> c` as one pipe of three
        (it nests as `Pipe(Pipe(a, b), c)`).

        >>> from refold.blocks import Scalar, Function
        >>> len((Scalar() >> Function(abs) >> Function(abs)).members)
        3
        """
        first, rest = self._children[0], self._children[1:]
        head = first.members if isinstance(first, Pipe) and first._merges_into_parent() \
            else [first]
        return head + rest

    def _label(self) -> str:
        label = getattr(self, "_constructor_name", "Pipe")  # e.g. `Mean`, `ZipWith`
        return label if self._name is None else f"{label} {self._name!r}"

    def __repr__(self) -> str:
        return f"<td.{self._label()}>"


def convert_to_block(block_like: Any) -> Block:
    """Turns a block-like value into a block.

    A block stays as it is; a `Layer` or Keras layer becomes a `Function`; a
    tensor, variable or numpy array becomes `FromTensor`; a dict, list or tuple of
    block-likes becomes a `Record`.

    >>> from refold.blocks import Scalar
    >>> convert_to_block((Scalar(), Scalar()))
    <td.Record ordered=True>
    """
    if isinstance(block_like, Block):
        return block_like
    from refold.blocks.layers import Layer, is_keras_layer
    from refold.blocks.tensors import FromTensor, Function
    if isinstance(block_like, Layer) or is_keras_layer(block_like):
        return Function(block_like)
    if isinstance(block_like, (dict, list, tuple)):
        return Record(block_like)
    if _is_tensor_like(block_like):
        return FromTensor(block_like)
    raise TypeError(f"{block_like!r} cannot be converted to a block")


def _is_tensor_like(x: Any) -> bool:
    import numpy as np
    if isinstance(x, np.ndarray):
        return True
    import tensorflow as tf
    return tf.is_tensor(x) or isinstance(x, tf.Variable) or type(x).__name__ == "Variable"


class Record(Block):
    """One child per key: the child named `k` gets item `k` of the input.

    The output is the tuple of the children's outputs. A dict's keys are sorted; a
    list of `(key, block)` pairs or a tuple of blocks (keys 0, 1, ...) keeps its
    order. An unordered (dict) record takes only Python-object inputs. A record of
    a tuple or list of blocks takes a tuple or list of exactly as many items (a
    3-tuple for 2 fields is an `InputError`); one with explicit keys takes those
    items of any larger input.

    >>> from refold.blocks import Scalar
    >>> Record({'b': Scalar('int32'), 'a': Scalar()}).eval({'a': 1, 'b': 2})
    (array(1., dtype=float32), array(2, dtype=int32))
    """

    _expected_input_types = (PyObjectType, TupleType)
    _expected_output_types = (TupleType, PyObjectType)

    def __init__(self, named_children: Any, name: str | None = None):
        positional = False
        if isinstance(named_children, dict) and not _is_ordered_dict(named_children):
            try:
                pairs = sorted(named_children.items(), key=lambda kv: kv[0])
            except TypeError:
                pairs = sorted(named_children.items(), key=lambda kv: repr(kv[0]))
            self._ordered = False
        elif isinstance(named_children, dict):
            pairs, self._ordered = list(named_children.items()), True
        elif isinstance(named_children, tuple):
            pairs, self._ordered = list(enumerate(named_children)), True
            positional = True
        elif isinstance(named_children, list):
            if all(isinstance(p, tuple) and len(p) == 2 and not isinstance(p[0], Block)
                   for p in named_children):
                pairs = list(named_children)
            else:
                pairs, positional = list(enumerate(named_children)), True
            self._ordered = True
        else:
            raise TypeError(f"Record takes a dict, a list of (key, block) pairs or a tuple, "
                            f"got {named_children!r}")
        self._keys = [k for k, _ in pairs]
        # fields by position only (a tuple or list of blocks): a Python tuple or list
        # input must have exactly one item per field
        self._positional = positional
        if len(set(map(repr, self._keys))) != len(self._keys):
            raise ValueError(f"Record keys must be unique: {self._keys}")
        children = [convert_to_block(b) for _, b in pairs]
        super().__init__(children, name=name)

    @property
    def keys(self) -> list:
        return list(self._keys)

    def _repr_args(self):
        return {"ordered": self._ordered}

    def _child_key(self, child):
        return f"[{self._keys[self._children.index(child)]!r}]"

    def _position(self, key: Any) -> int:
        for i, k in enumerate(self._keys):
            if k == key and type(k) is type(key):
                return i
        raise KeyError(f"{self.path}: no child named {key!r}; keys are {self._keys}")

    def __getitem__(self, key):
        if isinstance(key, slice):
            return super().__getitem__(key)
        self._position(key)  # fail early on an unknown key; `connect` resolves it
        return Wire(self, key)

    def infer_types(self):
        children = self._children
        t = self.input_type
        if isinstance(t, PyObjectType):
            for c in children:
                c.set_input_type(t)
        elif isinstance(t, TupleType):
            if not self._ordered:
                raise TypeError(f"{self.path}: record block created with an unordered dict "
                                f"cannot take ordered inputs ({t}); use an OrderedDict or "
                                "list of (key, block) instead")
            if len(t) != len(children):
                raise TypeError(f"{self.path}: Record block has {len(children)} children "
                                f"but {len(t)} inputs: {t}")
            for c, item in zip(children, t):
                c.set_input_type(item)
        ins = [c.input_type for c in children]
        if t is None and all(x is not None for x in ins):
            if all(isinstance(x, PyObjectType) for x in ins):
                self.set_input_type(PyObjectType())
            elif self._ordered:
                self.set_input_type(TupleType(*ins))
            else:
                raise TypeError(f"{self.path}: record block created with an unordered dict "
                                f"cannot take ordered inputs ({TupleType(*ins)}); use an "
                                "OrderedDict or list of (key, block) instead")
        out = self.output_type
        if isinstance(out, TupleType):
            if len(out) != len(children):
                raise TypeError(f"{self.path}: Record block has {len(children)} children "
                                f"but its output type has {len(out)} items: {out}")
            for c, item in zip(children, out):
                c.set_output_type(item)
        outs = [c.output_type for c in children]
        if all(x is not None for x in outs):
            self.set_output_type(TupleType(*outs))

    def evaluate(self, ctx, x):
        if isinstance(self.input_type, TupleType):
            if len(x) != len(self._children):
                raise ValueError(f"expected {len(self._children)} items, got {len(x)}")
            out = []
            for c, v in zip(self._children, x):
                try:  # `c.eval_in`, inlined (see `Block.eval_in`)
                    out.append(c.evaluate(ctx, v))
                except Exception as e:
                    raise_named(c, e, v)
            return tuple(out)
        n = len(self._keys)
        if self._positional and isinstance(x, (tuple, list)) and len(x) > n:
            # (a shorter one fails below, at the field that has no item)
            raise bad_input(self, f"expected a {type(x).__name__} of {n} items (one per "
                                  f"field), got {len(x)}: {describe(x)}")
        out = []
        for key, child in zip(self._keys, self._children):
            try:
                item = x[key]
            except (KeyError, IndexError, TypeError):
                from refold.blocks.errors import InputKeyError
                have = f"keys {sorted(map(repr, x))}" if isinstance(x, dict) else (
                    f"a {type(x).__name__}")
                if self._positional and isinstance(x, (tuple, list)):
                    have = f"{len(x)} items, expected {n}"
                # Name the child's slot (`Record['left']`): it is what lacks an input.
                raise InputKeyError(self.path + self._child_key(child),
                                    f"missing key {key!r}: the input has {have}") from None
            try:  # `child.eval_in`, inlined (see `Block.eval_in`)
                out.append(child.evaluate(ctx, item))
            except Exception as e:
                raise_named(child, e, item)
        return tuple(out)

    def dataflow(self) -> DataFlow:
        """Every child reads (an item of) the input; the output is theirs."""
        return DataFlow.parallel(self)


def _is_ordered_dict(d: dict) -> bool:
    from collections import OrderedDict
    return isinstance(d, OrderedDict)


class AllOf(Block):
    """Runs every block on the same input; the output is the tuple of their outputs.

    `AllOf()` is `Void()`; `AllOf(b)` outputs a 1-tuple. Blocks with a void input
    (constants) are not given the input.

    >>> from refold.blocks import Scalar, Length, Identity
    >>> AllOf(Length(), Identity()).eval([1, 2])
    (array(2., dtype=float32), [1, 2])
    """

    def __new__(cls, *blocks: Any, name: str | None = None):
        if not blocks:
            from refold.blocks.inputs import Void
            return Void(name=name)
        return super().__new__(cls, *blocks, name=name)

    def __init__(self, *blocks: Any, name: str | None = None):
        if not blocks:
            return
        super().__init__([convert_to_block(b) for b in blocks], name=name)

    def _child_key(self, child):
        return f"[{self._children.index(child)}]"

    def infer_types(self):
        t = self.input_type
        takers = [c for c in self._children if not isinstance(c.input_type, VoidType)]
        for c in takers:
            c.set_input_type(t)
            self.set_input_type(c.input_type)
        out = self.output_type
        if isinstance(out, TupleType) and len(out) == len(self._children):
            for c, item in zip(self._children, out):
                c.set_output_type(item)
        outs = [c.output_type for c in self._children]
        if all(x is not None for x in outs):
            self.set_output_type(TupleType(*outs))

    def evaluate(self, ctx, x):
        # A loop, not a generator expression: a generator running on every level of a
        # recursion makes each exception raised below it (TensorFlow and Keras raise
        # and catch some in every op call) walk all of them, quadratic in the depth
        # (CPython's search for the exception being handled, `_PyErr_GetTopmostException`).
        out = []
        for c in self._children:
            out.append(c.eval_in(ctx, None if isinstance(c.input_type, VoidType) else x))
        return tuple(out)

    def dataflow(self) -> DataFlow:
        """Every child reads the input; the output is theirs."""
        return DataFlow.parallel(self)

