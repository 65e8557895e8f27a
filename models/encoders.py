"""Encoders: blocks that turn a sequence or a tree into vectors.

- `bidirectional(forward, backward)`: a sequence of vectors to a sequence of
  vectors, each the concatenation of a forward and a backward RNN's outputs at
  that position (cell layers run as one `rnn_cells.CellPair`: one launch per step
  for both directions);
- `sequence_encoder(cell, backward_cell=None)`: a sequence of vectors to one vector
  (the final `h`, of both directions if `backward_cell` is given; two layer cells
  run as one `CellPair`, as in `bidirectional`);
- `tree_encoder(cell, node_input)`: a tree whose nodes have any number of children
  to the root's state, with a cell taking `(x, [child states])` (child-sum TreeLSTM);
- `binary_tree_encoder(leaf, node)`: a binary tree of nested pairs to the root's
  state, with an N = 2 cell (binary TreeLSTM, Tree-RNN).

The tree encoders take `per_node`, a block run at every node on `(state, node)`,
e.g. `heads.node_classifier(...)` for a loss at every node.

>>> import refold as td
>>> from refold.models import rnn_cells
>>> bi = td.Map(td.Vector(2)) >> bidirectional(rnn_cells.GRUCell(3), rnn_cells.GRUCell(3))
>>> bi.output_type
SequenceType(TensorType((6,), 'float32'))
>>> [v.shape for v in bi.eval([[1, 0], [0, 1], [1, 1]])]
[(6,), (6,), (6,)]
>>> enc = td.Map(td.Vector(2)) >> sequence_encoder(rnn_cells.LSTMCell(3))
>>> enc.eval([[1, 0], [0, 1]]).shape
(3,)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import refold.blocks as td
from refold.blocks.block import Block, block_factory
from refold.blocks.layers import Layer
from refold.blocks.types import TupleType
from refold.models.rnn_cells import CellPair, InputProjection, ProjectedCell, projects_input


@block_factory
def bidirectional(forward_cell: Any, backward_cell: Any) -> Block:
    """`[x_1..x_n] -> [concat(f_1, b_1), ..., concat(f_n, b_n)]`.

    `f_t` is the output of `td.RNN(forward_cell)` at position t, `b_t` that of
    `td.RNN(backward_cell)` run from the end, at the same position.

    Args:
        forward_cell, backward_cell: cells (layers or blocks) taking `(x, state)`
            and returning `(output, state)`; two different cells, as a rule.
    """
    if isinstance(forward_cell, Layer) and isinstance(backward_cell, Layer):
        # Both directions in one RNN over (x_t, x_{n+1-t}): one op per step, so the
        # engine batches the two directions together (rnn_cells.CellPair).
        inputs, pair = _paired_inputs(forward_cell, backward_cell)
        outputs = inputs >> td.RNN(pair) >> td.GetItem(0)
        forward = td.Map(td.GetItem(0))
        backward = td.Map(td.GetItem(1)) >> td.Slice(step=-1)
        return outputs >> td.AllOf(forward, backward) >> td.Zip() >> td.Map(td.Concat())
    forward = td.RNN(forward_cell) >> td.GetItem(0)
    backward = (td.Slice(step=-1) >> td.RNN(backward_cell) >> td.GetItem(0)
                >> td.Slice(step=-1))
    return td.AllOf(forward, backward) >> td.Zip() >> td.Map(td.Concat())


@block_factory
def sequence_encoder(cell: Any, backward_cell: Any = None) -> Block:
    """`[x_1..x_n] -> h`: the final `h` of `td.RNN(cell)` (zeros for an empty sequence).

    With `backward_cell`, the final `h` of a second RNN run over the reversed
    sequence is concatenated to it. `h` is the state, or the state's first item
    when the state is a tuple (an LSTM's `(h, c)`).

    Two layer cells run as one `rnn_cells.CellPair` over the sequence zipped with its
    reverse, as in `bidirectional`: one launch per step for both directions (a
    character BiLSTM over every rare word of a batch, say, takes half the steps).
    """
    if backward_cell is None:  # td.RNN projects a zoo cell's inputs before its loop
        return td.RNN(cell) >> td.GetItem(1) >> _StateH()
    if isinstance(cell, Layer) and isinstance(backward_cell, Layer):
        inputs, pair = _paired_inputs(cell, backward_cell)
        states = inputs >> td.RNN(pair) >> td.GetItem(1)
        return states >> td.AllOf(td.GetItem(0) >> _StateH(),
                                  td.GetItem(1) >> _StateH()) >> td.Concat()
    forward = td.RNN(cell) >> td.GetItem(1) >> _StateH()
    backward = td.Slice(step=-1) >> td.RNN(backward_cell) >> td.GetItem(1) >> _StateH()
    return td.AllOf(forward, backward) >> td.Concat()


def _paired_inputs(first: Layer, second: Layer) -> tuple[Block, Layer]:
    """`(block, pair)`: the block makes the sequence of `(x_t, x_{n+1-t})` the cell
    pair reads; for the library's cells, both inputs projected first, over the
    whole sequence (`rnn_cells.InputProjection`), so that the loop runs only the
    recurrent half of each cell."""
    if projects_input(first) and projects_input(second):
        projected = td.Map(InputProjection(first, second))
        inputs = projected >> td.AllOf(td.Map(td.GetItem(0)),
                                       td.Map(td.GetItem(1)) >> td.Slice(step=-1))
        return inputs >> td.Zip(), CellPair(ProjectedCell(first), ProjectedCell(second))
    return td.AllOf(td.Identity(), td.Slice(step=-1)) >> td.Zip(), CellPair(first, second)


class _StateH(Block):
    """`h` of a state: the state itself, or its first item if it is a tuple."""

    def infer_types(self):
        t = self.input_type
        if t is not None:
            self.set_output_type(t[0] if isinstance(t, TupleType) else t)

    def evaluate(self, ctx, x):
        return x[0] if isinstance(self.input_type, TupleType) else x


@block_factory
def tree_encoder(cell: Any, node_input: Any, children: Any = "children",
                 per_node: Any = None) -> Block:
    """A tree to its root's state, with any number of children per node.

    Every node is encoded as `cell((node_input(node), [encode(c) for c in
    children(node)]))`; a leaf is a node with no children.

    Args:
        cell: a block or layer `(x, sequence of states) -> state`, such as
            `tree_lstm.ChildSumTreeLSTMCell`; its output type is the state type.
        node_input: a block reading a node (a Python object) to its input vector `x`.
        children: the key of a node's list of children, or a block reading them.
        per_node: optional; a block run on `(state, node)` at every node (its
            output is discarded), e.g. a loss.
    """
    cell = td.convert_to_block(cell)
    state = cell.output_type
    if state is None:
        raise ValueError(f"tree_encoder: the cell's output (state) type must be known: {cell!r}")
    tree = td.ForwardDeclaration(td.PyObjectType(), state, name="tree_encoder")
    kids = children if isinstance(children, Block) else td.GetItem(children)
    node = td.AllOf(node_input, kids >> td.Map(tree())) >> cell
    tree.resolve_to(_with_hook(node, per_node))
    return tree()


@block_factory
def binary_tree_encoder(leaf: Any, node: Any, is_leaf: Callable[[Any], bool] | None = None,
                        per_node: Any = None) -> Block:
    """A binary tree of nested pairs `(left, right)` to its root's state.

    Args:
        leaf: a block or layer encoding a leaf (a Python object) to a state.
        node: a block or layer `(left state, right state) -> state` (e.g.
            `tree_lstm.binary_cell`, `tree_rnn.TreeRNNCell(h, 2)`); its output type
            is the state type.
        is_leaf: tells leaves from pairs; by default, anything but a tuple is a leaf.
        per_node: optional; a block run on `(state, node)` at every node and leaf.
    """
    node = td.convert_to_block(node)
    state = node.output_type
    if state is None:
        raise ValueError(f"binary_tree_encoder: the node's output (state) type must be "
                         f"known: {node!r}")
    is_leaf = is_leaf or (lambda t: not isinstance(t, tuple))
    tree = td.ForwardDeclaration(td.PyObjectType(), state, name="binary_tree_encoder")
    pair = td.Record((tree(), tree())) >> node
    choose = td.OneOf(lambda t: bool(is_leaf(t)), {True: leaf, False: pair})
    tree.resolve_to(_with_hook(choose, per_node))
    return tree()


def _with_hook(block: Block, per_node: Any) -> Block:
    if per_node is None:
        return block
    comp = td.Composition()
    with comp.scope():
        state = block.reads(comp.input)
        (td.convert_to_block(per_node) >> td.Void()).reads(state, comp.input)
        comp.output.reads(state)
    return comp


__all__ = ["bidirectional", "sequence_encoder", "tree_encoder", "binary_tree_encoder"]
