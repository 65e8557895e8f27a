"""Which op can feed which: the block expression's dataflow, at the level of ops.

The engine runs an op before its loop, in it or after it, from which ops can feed
it (`scheduler.layout`). Value types alone say too much: an LSTM's input
projection reads vectors of the size its cell writes, so by types the cell could
feed the projection, the two would form a cycle, and the projection, which reads
only the word embeddings, would run inside the loop one step at a time. The
block expression says more: a block's ops can only read what flows into the
block, and a `Pipe`'s second block reads what its first one wrote, not what a
later one does.

`op_feeds(program)` works that out as sets of ops (bit masks) per block: what may
flow into it (`IN`) and out of it (`OUT`), grown to a fixpoint over the rules:

- a `Function` or `FromTensor`: its op reads `IN`, `OUT` is its op;
- a `Composition` (`Pipe` is one): each child reads the outputs its wiring
  names; `Record`, `AllOf`, `Map`: each child reads `IN`; `OneOf`: as it is wired
  (the optional `pre_block` before the cases);
- a forward-declaration reference: its target reads `IN`, `OUT` is the target's;
- an `RNN` whose cell was split (`RNN.per_element_block`): that block reads `IN`,
  the rest as the next rule;
- any other block (`Fold`, `RNN`, a block written from scratch): each child and
  each op it declares may read `IN`, its own ops' outputs and every child's
  outputs, and all of that may flow out.

A rule applies only where the block evaluates as its class does (a subclass
that overrides `_evaluate` gets the last rule), so the result may hold edges that
never occur but misses none. The planner checks every batch anyway: a node that
reads a value computed after it is an `EngineError`, never a wrong result.

>>> import refold as td
>>> from refold.compiler.graphs.lowering import lower
>>> project, cell = td.FC(3, name="project"), td.FC(3, name="cell")
>>> rnn = td.Map(td.Vector(3) >> project) >> td.Fold(td.Concat() >> cell, td.Zeros(3))
>>> program = lower(rnn)
>>> [op.name for op in program.ops]
['project', 'concat', 'cell']
>>> op_feeds(program).astype(int).tolist()  # by types, cell would feed project too
[[0, 1, 0], [0, 0, 1], [0, 1, 0]]
"""

from __future__ import annotations

import numpy as np

from refold.blocks.block import Block
from refold.blocks.composition import AllOf, Composition, Pipe, Record
from refold.blocks.control import OneOf
from refold.blocks.sequences import RNN, Map
from refold.blocks.tensors import FromTensor, Function
from refold.blocks.validation import iter_blocks


def op_feeds(program) -> np.ndarray:
    """bool `[ops, ops]`: `[a, b]` is True when an output of op a may be an input of
    op b somewhere in `program` (a `compiler.graphs.lowering.Program`)."""
    blocks = list(iter_blocks(program.root))
    flow = _Flow(program, blocks)
    while flow.sweep():
        pass
    n = len(program.ops)
    feeds = np.zeros((n, n), bool)
    for b, mask in flow.op_sources.items():
        ids = _ids(mask)
        for o in flow.ops_of[b]:
            feeds[ids, o] = True
    return feeds


class _Flow:
    """The fixpoint's state: per block, the ops that may flow in and out."""

    def __init__(self, program, blocks: list):
        self.blocks = blocks
        self.ops_of = {id(b): sorted({program.op_id[op] for op in b.ops()}) for b in blocks}
        self.inflow = {id(b): 0 for b in blocks}
        self.outflow = {id(b): 0 for b in blocks}
        self.op_sources = {id(b): 0 for b in blocks if self.ops_of[id(b)]}
        self.changed = False

    def sweep(self) -> bool:
        """Applies every block's rule once; whether anything grew."""
        self.changed = False
        for b in self.blocks:
            _rule(b)(self, b)
        return self.changed

    def into(self, block: Block, mask: int) -> None:
        self.inflow[id(block)] = self._grow(self.inflow[id(block)], mask)

    def out_of(self, block: Block, mask: int) -> None:
        self.outflow[id(block)] = self._grow(self.outflow[id(block)], mask)

    def ops_read(self, block: Block, mask: int) -> None:
        self.op_sources[id(block)] = self._grow(self.op_sources[id(block)], mask)

    def own(self, block: Block) -> int:
        """The bit mask of the ops `block` declares."""
        return sum(1 << o for o in self.ops_of[id(block)])

    def _grow(self, old: int, mask: int) -> int:
        new = old | mask
        if new != old:
            self.changed = True
        return new


def _function(flow: _Flow, b: Block) -> None:
    flow.ops_read(b, flow.inflow[id(b)])
    flow.out_of(b, flow.own(b))


def _composition(flow: _Flow, b: Composition) -> None:
    slots = [flow.inflow[id(b)]]
    for child, sources, _ in b._plan:
        flow.into(child, _sources(slots, sources))
        slots.append(flow.outflow[id(child)])
    flow.out_of(b, _sources(slots, b._out_plan[0]))


def _sources(slots: list, sources: list) -> int:
    mask = 0
    for slot, _ in sources:
        mask |= slots[slot]
    return mask


def _parallel(flow: _Flow, b: Block) -> None:
    """Record, AllOf, Map: every child reads the input; the output is theirs."""
    for child in b._children:
        flow.into(child, flow.inflow[id(b)])
        flow.out_of(b, flow.outflow[id(child)])


def _one_of(flow: _Flow, b: OneOf) -> None:
    cases = b._children[:b._n_cases]
    for reader in ([b._pre] if b._pre is not None else []) + [b._key_block]:
        if reader is not None:
            flow.into(reader, flow.inflow[id(b)])
    case_in = flow.outflow[id(b._pre)] if b._pre is not None else flow.inflow[id(b)]
    for case in cases:
        flow.into(case, case_in)
        flow.out_of(b, flow.outflow[id(case)])


def _reference(flow: _Flow, b: Block) -> None:
    target = b.declaration.target
    flow.into(target, flow.inflow[id(b)])
    flow.out_of(b, flow.outflow[id(target)])


def _rnn(flow: _Flow, b: RNN) -> None:
    """An RNN whose cell was split (`RNN.per_element_block`): the per-element part
    reads the input only; the rest as any block."""
    if b.per_element_block is not None:
        flow.into(b.per_element_block, flow.inflow[id(b)])
    _anything(flow, b, reads_input_only=b.per_element_block)


def _anything(flow: _Flow, b: Block, reads_input_only: Block | None = None) -> None:
    """Any block: children and ops may read whatever is in it; all of it may leave."""
    inside = flow.inflow[id(b)] | flow.own(b)
    for child in b._children:
        inside |= flow.outflow[id(child)]
    for child in b._children:
        if child is not reads_input_only:
            flow.into(child, inside)
    if flow.ops_of[id(b)]:
        flow.ops_read(b, inside)
    flow.out_of(b, inside)


# (class, rule): a block gets the rule of the first class it is an instance of and
# evaluates as (same `_evaluate`), else `_anything`
_RULES = ((Function, _function), (FromTensor, _function), (OneOf, _one_of), (RNN, _rnn),
          (Record, _parallel), (AllOf, _parallel), (Map, _parallel),
          (Pipe, _composition), (Composition, _composition))


def _rule(b: Block):
    if b.is_forward_declaration_ref():
        return _reference
    evaluate = type(b)._evaluate
    for cls, rule in _RULES:
        if isinstance(b, cls) and evaluate is cls._evaluate:
            return rule
    return _anything


def _ids(mask: int) -> list[int]:
    ids, o = [], 0
    while mask:
        if mask & 1:
            ids.append(o)
        mask >>= 1
        o += 1
    return ids
