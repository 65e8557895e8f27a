"""Choosing and recursing: `OneOf`, `Optional` and `ForwardDeclaration`.

`OneOf` picks one of several blocks per input (e.g. leaf or internal node);
`ForwardDeclaration` lets a block refer to itself, which is how recursive models
over trees are written.

>>> import tensorflow as tf
>>> from refold.blocks import (ForwardDeclaration, OneOf, Record, Scalar, Function,
...                     PyObjectType, TensorType)
>>> total = ForwardDeclaration(PyObjectType(), TensorType(()))
>>> leaf = Scalar()
>>> node = Record((total(), total())) >> Function(tf.add)
>>> total.resolve_to(OneOf(lambda x: isinstance(x, tuple), {False: leaf, True: node}))
>>> float(total().eval(((1, 2), (3, (4, 5)))))
15.0
"""

from __future__ import annotations

from typing import Any

from refold.blocks.block import PY, Block, IOBase, bad_input, raise_named
from refold.blocks.composition import convert_to_block
from refold.blocks.errors import InputKeyError
from refold.blocks.evaluation.dataflow import DataFlow
from refold.blocks.evaluation.values import describe
from refold.blocks.types import PyObjectType, VoidType


class OneOf(Block):
    """Runs `case_blocks[key_fn(x)]` on `x` (or on `pre_block(x)` if given).

    Args:
        key_fn: a Python callable on the input, or a block whose output is the key.
        case_blocks: a dict of cases, a list of `(key, block)` pairs, or a tuple
            (keys 0, 1, ...). Every case has the same input and output types.
        pre_block: optional; its output is what the chosen case reads.
    """

    def __init__(self, key_fn: Any, case_blocks: Any, pre_block: Any = None,
                 name: str | None = None):
        if isinstance(key_fn, Block):
            key_block = key_fn
        elif callable(key_fn):
            key_block = None
        else:
            raise TypeError(f"key_fn is not callable: {key_fn!r}")
        if isinstance(case_blocks, dict):
            pairs = list(case_blocks.items())
        elif isinstance(case_blocks, tuple):
            pairs = list(enumerate(case_blocks))
        else:
            pairs = list(case_blocks)
        if not pairs:
            raise ValueError("case_blocks must be non-empty")
        self._keys = [k for k, _ in pairs]
        self._cases = {}
        for k, _ in pairs:
            try:
                hash(k)
            except TypeError:
                raise TypeError(f"case keys must be hashable: {k!r}") from None
        self._key_fn = key_fn
        cases = [convert_to_block(b) for _, b in pairs]
        self._n_cases = len(cases)
        children = list(cases)
        self._pre = convert_to_block(pre_block) if pre_block is not None else None
        if self._pre is not None:
            children.append(self._pre)
        self._key_block = key_block
        if key_block is not None:
            children.append(key_block)
        super().__init__(children, name=name)
        self._cases = dict(zip(self._keys, cases))
        if key_block is not None:
            key_block.set_output_type(PY)

    @property
    def case_blocks(self) -> dict:
        return dict(self._cases)

    def _child_key(self, child):
        if child is self._pre:
            return ".pre_block"
        if child is self._key_block:
            return ".key_fn"
        return f"[{self._keys[self._children.index(child)]!r}]"

    def infer_types(self):
        cases = self._children[:self._n_cases]
        readers = cases if self._pre is None else [self._pre]
        if self._key_block is not None:
            readers = readers + [self._key_block]
        for b in readers:
            b.set_input_type(self.input_type)
            self.set_input_type(b.input_type)
        if self._pre is not None:
            for c in cases:
                c.set_input_type(self._pre.output_type)
                self._pre.set_output_type(c.input_type)
        for c in cases:
            if c.output_type is not None and self.output_type is not None \
                    and c.output_type != self.output_type:
                from refold.blocks.types import first_difference
                raise TypeError(f"{c.path}: output type mismatch with the other cases: "
                                f"{first_difference(self.output_type, c.output_type)}; the "
                                f"other cases output {self.output_type}, this one "
                                f"{c.output_type}")
            c.set_output_type(self.output_type)
            self.set_output_type(c.output_type)

    def evaluate(self, ctx, x):
        if self._key_block is not None:
            key = self._key_block.eval_in(ctx, x)
        else:
            key = self._key_fn(x)
        try:
            case = self._cases[key]
        except (KeyError, TypeError):
            raise InputKeyError(self.path, f"key_fn gave {key!r}, which is not one of the "
                                           f"cases {self._keys}") from None
        if self._pre is not None:
            x = self._pre.eval_in(ctx, x)
        try:  # `case.eval_in`, inlined (see `Block.eval_in`)
            return case.evaluate(ctx, x)
        except Exception as e:
            raise_named(case, e, x)

    def dataflow(self) -> DataFlow:
        """The key block and `pre_block` read the input; the cases read `pre_block`'s
        output (or the input); the output is the cases'."""
        cases = self._children[:self._n_cases]
        reads = {b: [DataFlow.INPUT] for b in (self._pre, self._key_block) if b is not None}
        case_in = DataFlow.INPUT if self._pre is None else self._pre
        reads.update({case: [case_in] for case in cases})
        reads[DataFlow.OUTPUT] = cases
        return DataFlow(reads)


class Optional(Block):
    """`some_case(x)`, or `none_case` (zeros of the output type by default) when x is None.

    >>> from refold.blocks import Scalar
    >>> Optional(Scalar()).eval(None)
    array(0., dtype=float32)
    """

    _expected_input_types = (PyObjectType,)

    def __init__(self, some_case: Any, none_case: Any = None, name: str | None = None):
        from refold.blocks.tensors import Zeros
        some = convert_to_block(some_case)
        none = Zeros() if none_case is None else convert_to_block(none_case)
        super().__init__([some, none], input_type=PY, name=name)
        none.set_input_type(VoidType())

    def _child_key(self, child):
        return ".some_case" if child is self._children[0] else ".none_case"

    def infer_types(self):
        some, none = self._children
        some.set_input_type(self.input_type)
        for c in (some, none):
            c.set_output_type(self.output_type)
            self.set_output_type(c.output_type)

    def evaluate(self, ctx, x):
        some, none = self._children
        return none.eval_in(ctx, None) if x is None else some.eval_in(ctx, x)

    def dataflow(self) -> DataFlow:
        """Either case reads the input (`none_case` reads nothing); the output is theirs."""
        return DataFlow.parallel(self)


class ForwardDeclaration(IOBase):
    """A block that can be used before it is defined: the way to write recursion.

    `decl()` makes a reference to use in expressions; `decl.resolve_to(block)`
    defines it, after which every reference evaluates `block`. References may be
    made before and after the declaration is resolved.

    Args:
        input_type, output_type: the declared types (shorthand allowed); unknown
            types are inferred from the references and the definition.
    """

    def __init__(self, input_type: Any = None, output_type: Any = None,
                 name: str | None = None):
        self._refs: list[_ForwardDeclarationRef] = []
        self._target: Block | None = None
        super().__init__(input_type, output_type, name)

    def _label(self) -> str:
        return "ForwardDeclaration" if self._name is None else \
            f"ForwardDeclaration {self._name!r}"

    def __repr__(self) -> str:
        return f"<td.{self._label()}>"

    @property
    def target(self) -> Block | None:
        return self._target

    def __call__(self) -> Block:
        """A new reference to the declared block."""
        ref = _ForwardDeclarationRef(self)
        self._refs.append(ref)
        ref.infer_types()
        return ref

    def resolve_to(self, block_like: Any) -> None:
        """Defines the declared block; its types must agree with the declaration's."""
        if self._target is not None:
            raise ValueError(f"{self.path}: Declaration has already been resolved.")
        target = convert_to_block(block_like)
        if target._owner is not None:
            raise TypeError(f"block {target!r} already resolves {target._owner!r}")
        target._owner = self
        self._target = target
        self.infer_types()

    def infer_types(self) -> None:
        members = list(self._refs) + ([self._target] if self._target is not None else [])
        for b in members:
            b.set_input_type(self.input_type)
            b.set_output_type(self.output_type)
            self.set_input_type(b.input_type)
            self.set_output_type(b.output_type)


class _ForwardDeclarationRef(Block):
    """A use of a `ForwardDeclaration` inside an expression."""

    def __init__(self, decl: ForwardDeclaration):
        self._decl = decl
        super().__init__()

    def _label(self) -> str:
        return self._decl._label() + "()"

    def _named(self) -> bool:
        return self._decl.name is not None

    def __repr__(self) -> str:
        name = "" if self._decl.name is None else f" {self._decl.name!r}"
        return f"<td.ForwardDeclaration(){name}>"

    def is_forward_declaration_ref(self) -> bool:
        return True

    @classmethod
    def from_config(cls, config: dict):
        return config["decl"]()  # a reference its declaration knows

    @property
    def declaration(self) -> ForwardDeclaration:
        return self._decl

    def infer_types(self):
        self._decl.set_input_type(self.input_type)
        self._decl.set_output_type(self.output_type)
        self.set_input_type(self._decl.input_type)
        self.set_output_type(self._decl.output_type)

    def evaluate(self, ctx, x):
        target = self._decl._target
        if target is None:
            raise bad_input(self, "the forward declaration was never resolved")
        if type(x) in _ATOMS:  # cannot contain itself: nothing to track
            try:  # `target.eval_in`, inlined (see `Block.eval_in`)
                return target.evaluate(ctx, x)
            except Exception as e:
                raise_named(target, e, x)
        # A cyclic input (a node that is its own descendant) would recurse
        # forever. The objects on the recursion path are alive, so their ids are
        # distinct; meeting one again under the same declaration is a cycle
        # (evaluating the same block on the same object inside itself).
        key = (id(self._decl), id(x))
        path = ctx.recursion_path
        if key in path:
            raise bad_input(self, f"the input contains a cycle: {describe(x)} contains "
                                  "itself (a node that is its own descendant)")
        path.add(key)
        try:
            return target.evaluate(ctx, x)  # `target.eval_in`, inlined
        except Exception as e:
            raise_named(target, e, x)
        finally:
            path.discard(key)

    def dataflow(self) -> DataFlow:
        """The declared block reads the input; the output is its."""
        target = self._decl.target
        return DataFlow({target: [DataFlow.INPUT], DataFlow.OUTPUT: [target]})


# Types whose values cannot contain themselves: not tracked for cycles.
_ATOMS = frozenset({int, float, bool, str, bytes, complex, type(None)})

