"""Which op can feed which: the block expression's dataflow, at the level of ops.

The engine runs an op before its loop, in it or after it, from which ops can feed
it (`scheduler.layout`). Value types alone say too much: an LSTM's input
projection reads vectors of the size its cell writes, so by types the cell could
feed the projection, the two would form a cycle, and the projection, which reads
only the word embeddings, would run inside the loop one step at a time. The
block expression says more: a block's ops can only read what flows into the
block, and a `Pipe`'s second block reads what its first one wrote, not what a
later one does.

Each block declares which of its parts (its input, its children, its ops, its
output) may read which: `Block.dataflow()`, a `blocks.dataflow.DataFlow`, taken
through `blocks.dataflow.dataflow_of` (a subclass that evaluates in its own way
does not inherit a rule written for another `evaluate`). `op_feeds(program)`
chains the declarations into sets of ops (bit masks) per block, what may flow into
it (`IN`) and out of it (`OUT`), grown to a fixpoint: a child's `IN` holds what its
sources' masks hold (the block's `IN`, a child's `OUT`, an op itself), the
block's `OUT` what its output's sources hold, and an op's sources what the op's
sources hold. A block whose class declares no rule and has children is refused
with a `TypeError` naming its path. The planner checks every batch anyway: a node
that reads a value computed after it is an `EngineError`, never a wrong result.

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
from refold.blocks.evaluation.dataflow import DataFlow, dataflow_of
from refold.blocks.op import Op
from refold.blocks.validation import iter_blocks


def op_feeds(program) -> np.ndarray:
    """bool `[ops, ops]`: `[a, b]` is True when an output of op a may be an input of
    op b somewhere in `program` (a `compiler.graphs.lowering.Program`).

    Raises `TypeError` naming the block path for a block with children whose class
    declares no data flow, and `ValueError` for a declaration that names a part
    the block does not have."""
    blocks = list(iter_blocks(program.root))
    flow = _Flow(program, blocks)
    while flow.sweep():
        pass
    n = len(program.ops)
    feeds = np.zeros((n, n), bool)
    for o, mask in flow.op_sources.items():
        feeds[_ids(mask), o] = True
    return feeds


class _Flow:
    """The fixpoint's state: per block, the ops that may flow in and out; per op,
    the ops it may read."""

    def __init__(self, program, blocks: list):
        self.inflow = {id(b): 0 for b in blocks}
        self.outflow = {id(b): 0 for b in blocks}
        self.op_sources = {o: 0 for o in range(len(program.ops))}
        self.rules = [(b, _compiled(b, program.op_id)) for b in blocks]
        self.changed = False

    def sweep(self) -> bool:
        """Applies every block's declaration once; whether anything grew."""
        self.changed = False
        inflow, outflow, ops = self.inflow, self.outflow, self.op_sources
        for b, rule in self.rules:
            for kind, reader, sources in rule:
                mask = 0
                for skind, s in sources:
                    mask |= (inflow[id(b)] if skind == _IN else
                             outflow[s] if skind == _BLOCK else 1 << s)
                table, key = ((outflow, id(b)) if kind == _OUT else
                              (inflow, reader) if kind == _BLOCK else (ops, reader))
                new = table[key] | mask
                if new != table[key]:
                    table[key] = new
                    self.changed = True
        return self.changed


_IN, _OUT, _BLOCK, _OP = range(4)


def _compiled(b: Block, op_id: dict) -> list:
    """`b`'s declaration as `(kind, reader, [(kind, source), ...])` over ids: a block
    by `id`, an op by its op id."""
    flow = dataflow_of(b)
    evaluated = {id(c) for c in b.children}
    if b.is_forward_declaration_ref():
        evaluated.add(id(b.declaration.target))
    own = {id(op) for op in b.ops()}

    def part(p, role: str):
        if p is DataFlow.INPUT and role == "source":
            return _IN, None
        if p is DataFlow.OUTPUT and role == "reader":
            return _OUT, None
        if isinstance(p, Block) and id(p) in evaluated:
            return _BLOCK, id(p)
        if isinstance(p, Op) and id(p) in own:
            return _OP, op_id[p]
        raise ValueError(f"{b.path}: its dataflow() names {p!r} as a {role}, which is not "
                         "one of its parts (DataFlow.INPUT as a source, DataFlow.OUTPUT as a "
                         "reader, a child, an op of its ops())")

    rule = []
    for reader in flow.readers:
        kind, key = part(reader, "reader")
        rule.append((kind, key, [part(s, "source") for s in flow.sources(reader)]))
    return rule


def _ids(mask: int) -> list[int]:
    ids, o = [], 0
    while mask:
        if mask & 1:
            ids.append(o)
        mask >>= 1
        o += 1
    return ids
