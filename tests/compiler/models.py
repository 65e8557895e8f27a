"""A family of small block models and input generators for engine tests.

Each `make_*` returns a `Case`: the block, a hypothesis strategy for one input, and
the variables gradients are checked against. Sizes are small so the reference
evaluator (one eager op at a time) stays quick.
"""

from __future__ import annotations

from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf
from hypothesis import strategies as st

import refold as td
from refold.models import encoders, heads, rnn_cells, tree_lstm

H = 4  # hidden size everywhere


@dataclass
class Case:
    name: str
    block: td.Block
    inputs: st.SearchStrategy
    variables: list


def trees(max_leaves: int = 6, vocab: int = 7):
    """Random binary trees as nested tuples with int word ids at the leaves."""
    return st.recursive(st.integers(0, vocab - 1),
                        lambda sub: st.tuples(sub, sub), max_leaves=max_leaves)


def labelled_trees(max_leaves: int = 6, vocab: int = 7):
    """Trees of dicts: {'word': w, 'label': y} leaves, {'left','right','label'} nodes."""
    leaf = st.builds(lambda w, y: {"word": w, "label": y}, st.integers(0, vocab - 1),
                     st.integers(0, 2))
    return st.recursive(
        leaf, lambda sub: st.builds(lambda a, b, y: {"left": a, "right": b, "label": y},
                                    sub, sub, st.integers(0, 2)), max_leaves=max_leaves)


def weights_of(*layers) -> list:
    """The layers' variables, as `tf.Variable`s (what a GradientTape differentiates)."""
    return [tf_variable(w) for layer in layers for w in layer.weights]


def tf_variable(w):
    return w.value if isinstance(w, keras.Variable) else w


def make_tree_lstm() -> Case:
    """Binary TreeLSTM over word trees, classifying the root."""
    keras.utils.set_random_seed(1)
    emb = td.Embedding(7, 3)
    leaf_cell = tree_lstm.leaf_cell(H, 3)
    cell = tree_lstm.binary_cell(H)
    out = td.FC(3, activation=None)
    tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(H))
    leaf = td.Scalar("int32") >> emb >> leaf_cell
    node = td.Record((tree(), tree())) >> cell
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: leaf, True: node}))
    block = tree() >> td.GetItem(0) >> out
    return Case("tree_lstm", block, trees(), weights_of(emb, leaf_cell, cell, out))


def make_tree_lstm_loss_everywhere() -> Case:
    """TreeLSTM with a loss Metric at every node (labels from the input)."""
    keras.utils.set_random_seed(2)
    emb = td.Embedding(7, 3)
    leaf_cell = tree_lstm.leaf_cell(H, 3)
    cell = tree_lstm.binary_cell(H)
    out = td.FC(3, activation=None)

    def loss(logits, label):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(label, tf.int32), logits=logits)

    tree = td.ForwardDeclaration(td.PyObjectType(), tree_lstm.state_type(H))
    leaf = td.GetItem("word") >> td.Scalar("int32") >> emb >> leaf_cell
    node = td.AllOf(td.GetItem("left") >> tree(), td.GetItem("right") >> tree()) >> cell
    with_loss = td.Composition()
    with with_loss.scope():
        state = td.OneOf(lambda t: "word" in t, {True: leaf, False: node}).reads(with_loss.input)
        logits = td.Function(out).reads(td.GetItem(0).reads(state))
        label = (td.GetItem("label") >> td.Scalar("int32")).reads(with_loss.input)
        td.Metric("loss").reads(td.Function(loss).reads(logits, label))
        with_loss.output.reads(state)
    tree.resolve_to(with_loss)
    block = tree() >> td.GetItem(0) >> td.Function(lambda h: tf.reduce_sum(h, 1))
    return Case("tree_lstm_loss_everywhere", block, labelled_trees(),
                weights_of(emb, leaf_cell, cell, out))


def make_fold_rnn() -> Case:
    """A Fold RNN over variable-length sequences of vectors, then a classifier."""
    keras.utils.set_random_seed(3)
    cell = td.FC(H, activation="tanh")
    out = td.FC(2, activation=None)
    step = td.Concat() >> cell
    block = (td.Map(td.Vector(2)) >> td.Fold(step, td.Zeros(td.TensorType((H,))))
             >> out)
    seqs = st.lists(st.lists(st.floats(-2, 2, width=32), min_size=2, max_size=2),
                    max_size=7)
    return Case("fold_rnn", block, seqs, weights_of(cell, out))


def make_rnn_with_metric_per_step() -> Case:
    """td.RNN with a Keras LSTM cell; a metric on every output; the final state out."""
    keras.utils.set_random_seed(4)
    cell = td.ScopedLayer(keras.layers.LSTMCell(H))
    head = td.FC(1, activation=None)
    rnn = td.Map(td.Vector(3)) >> td.RNN(cell)
    block = td.Composition()
    with block.scope():
        outs = rnn.reads(block.input)
        seq = td.GetItem(0).reads(outs)
        td.Void().reads(td.Map(td.Function(head) >> td.Metric("per_step")).reads(seq))
        block.output.reads(td.GetItem(1).reads(outs))
    seqs = st.lists(st.lists(st.floats(-1, 1, width=32), min_size=3, max_size=3),
                    max_size=6)
    variables = weights_of(head) + [tf_variable(w) for w in cell.weights]
    return Case("rnn_metric_per_step", block, seqs, variables)


def make_rnn_of_a_library_cell() -> Case:
    """td.RNN of a zoo GRU cell, which it runs split (the input projection on every
    element, the recurrent half in the loop), its initial state from the input."""
    cell = rnn_cells.GRUCell(H, name="gru")
    block = (td.Record((td.Map(td.Vector(3)), td.Vector(H)))
             >> td.RNN(cell, initial_state_from_input=True) >> td.GetItem(1))

    def vec(n):
        return st.lists(st.floats(-1, 1, width=32), min_size=n, max_size=n)
    return Case("rnn_of_a_library_cell", block, st.tuples(st.lists(vec(3), max_size=6), vec(H)),
                weights_of(cell))


def make_bidirectional_tagger() -> Case:
    """A bidirectional RNN (an LSTM forward, a GRU backward, run as one `CellPair`)
    with a metric at every position; the sequence of encodings out."""
    keras.utils.set_random_seed(5)
    fw, bw = rnn_cells.LSTMCell(H), rnn_cells.GRUCell(H)
    head = td.FC(2, activation=None)
    block = td.Composition()
    with block.scope():
        encoded = (td.Map(td.Vector(3)) >> encoders.bidirectional(fw, bw)).reads(block.input)
        td.Void().reads(td.Map(td.Function(head) >> td.Metric("per_word")).reads(encoded))
        block.output.reads(encoded)
    seqs = st.lists(st.lists(st.floats(-1, 1, width=32), min_size=3, max_size=3),
                    max_size=6)
    return Case("bidirectional_tagger", block, seqs, weights_of(fw, bw, head))


def make_features_after_a_loop() -> Case:
    """Per output of an LSTM, four views of it side by side (a `td.Concat` of four
    vectors of one type), an FC of those and scores of that: launches after the loop
    that lay their arguments side by side and read the latest launch's outputs, as
    the parser's scoring does."""
    keras.utils.set_random_seed(6)
    cell = rnn_cells.LSTMCell(H)
    views = [td.FC(H, activation="tanh") for _ in range(3)]
    hidden, score = td.FC(H, activation="tanh"), td.FC(2, activation=None)
    per_output = td.AllOf(td.Identity(), *views) >> td.Concat() >> hidden >> score
    block = (td.Map(td.Vector(3)) >> td.RNN(cell) >> td.GetItem(0)) >> td.Map(per_output)
    seqs = st.lists(st.lists(st.floats(-1, 1, width=32), min_size=3, max_size=3),
                    max_size=6)
    return Case("features_after_a_loop", block, seqs, weights_of(cell, *views, hidden, score))


def make_stacked_encodings() -> Case:
    """`td.Stack`: a BiLSTM's encodings, an element per word made in the loop, as one
    padded `[5, 2H]` tensor that an op indexes by position (the parser's walk on the
    device reads its sentence so)."""
    keras.utils.set_random_seed(11)
    fw, bw = rnn_cells.LSTMCell(H), rnn_cells.LSTMCell(H)
    head = td.FC(2, activation=None)
    position = tf.constant(np.linspace(-1.0, 1.0, 5, dtype="float32"))[None, :, None]
    read = td.Function(lambda m: tf.reduce_sum(m * position, 1))
    block = (td.Map(td.Vector(3)) >> encoders.bidirectional(fw, bw) >> td.Stack(5) >> read
             >> td.Function(head))
    seqs = st.lists(st.lists(st.floats(-1, 1, width=32), min_size=3, max_size=3),
                    max_size=5)
    return Case("stacked_encodings", block, seqs, weights_of(fw, bw, head))


def make_char_tagger() -> Case:
    """A tagger whose words are a lookup or, for rare words, the final states of a
    character BiLSTM (`td.OneOf` per word, `encoders.sequence_encoder` over characters),
    then a BiLSTM over the words and a loss at every word (Plank et al. 2016)."""
    keras.utils.set_random_seed(8)
    words, chars = td.Embedding(5, 2 * H, name="words"), td.Embedding(6, 3, name="chars")
    cells = [rnn_cells.LSTMCell(H, name=n) for n in ("cf", "cb", "wf", "wb")]
    head = td.FC(3, activation=None)
    lookup = td.GetItem("word") >> td.Scalar("int32") >> words
    spelled = (td.GetItem("chars") >> td.Map(td.Scalar("int32") >> chars)
               >> encoders.sequence_encoder(cells[0], cells[1]))
    word = td.OneOf(lambda w: "chars" in w, {False: lookup, True: spelled})
    encoder = td.GetItem("words") >> td.Map(word) >> encoders.bidirectional(cells[2], cells[3])
    block = heads.tagger(encoder, 3, tags="tags", logits_layer=head)
    word_input = st.one_of(
        st.fixed_dictionaries({"word": st.integers(1, 4)}),
        st.fixed_dictionaries({"word": st.just(0),
                               "chars": st.lists(st.integers(0, 5), max_size=5)}))
    sentence = st.lists(st.tuples(word_input, st.integers(0, 2)), max_size=5).map(
        lambda pairs: {"words": [w for w, _ in pairs], "tags": [t for _, t in pairs]})
    return Case("char_tagger", block, sentence, weights_of(words, chars, *cells, head))


def make_reduce_and_oneof() -> Case:
    """OneOf over record kinds, each reducing a list with a learned combine."""
    keras.utils.set_random_seed(5)
    fcs = [td.FC(H, activation="tanh"), td.FC(H, activation="relu"), td.FC(H)]
    combine = td.Concat() >> fcs[0]
    lift = td.Vector(2) >> fcs[1]
    lift2 = td.Scalar() >> td.Function(lambda x: tf.stack([x, -x], 1)) >> fcs[2]
    sum_kind = td.Record({"xs": td.Map(lift) >> td.Sum()}) >> td.GetItem(0)
    red_kind = td.Record({"ys": td.Map(lift2) >> td.Reduce(combine)}) >> td.GetItem(0)
    block = td.OneOf(lambda d: "xs" in d, {True: sum_kind, False: red_kind})
    vec = st.lists(st.floats(-1, 1, width=32), min_size=2, max_size=2)
    inputs = st.one_of(st.fixed_dictionaries({"xs": st.lists(vec, max_size=5)}),
                       st.fixed_dictionaries({"ys": st.lists(st.floats(-1, 1, width=32),
                                                             max_size=6)}))
    return Case("reduce_oneof", block, inputs, weights_of(*fcs))


def make_nested_records() -> Case:
    """Nested Record/Map with a shared layer used by two different blocks."""
    keras.utils.set_random_seed(6)
    shared = td.FC(H, activation="tanh")
    block = td.Record({
        "a": td.Vector(2) >> shared,
        "b": td.Map(td.Record({"x": td.Vector(2) >> shared, "y": td.Scalar()})),
        "c": td.Map(td.Scalar()) >> td.Mean(),
    })
    vec = st.lists(st.floats(-1, 1, width=32), min_size=2, max_size=2)
    inputs = st.fixed_dictionaries({
        "a": vec,
        "b": st.lists(st.fixed_dictionaries({"x": vec, "y": st.floats(-3, 3, width=32)}),
                      max_size=4),
        "c": st.lists(st.floats(-3, 3, width=32), max_size=4)})
    return Case("nested_records", block, inputs, weights_of(shared))


class Gate(td.Block):
    """A block written from scratch, as a user would: `sigmoid(x . w) * y` on a pair of
    vectors, with its own weights, computing with one op it declares through `ops()`."""

    def __init__(self, size: int, seed: int = 0, name: str | None = None):
        self.w = tf.Variable(np.random.default_rng(seed).normal(size=size).astype("float32"))
        vec = td.TensorType((size,))
        super().__init__(input_type=td.TupleType(vec, vec), output_type=vec, name=name)
        self._op = td.Op(self.name or "Gate", self._gate, [vec, vec], [vec])

    def _gate(self, x, y):
        return [tf.sigmoid(tf.reduce_sum(x * self.w, -1, keepdims=True)) * y]

    def ops(self) -> list:
        return [self._op]

    def evaluate(self, ctx, x):
        return ctx.op(self._op, list(x))[0]


def make_custom_block() -> Case:
    """A user-written block (`Gate`, its own op and weights) inside Map, Fold and a layer."""
    keras.utils.set_random_seed(7)
    gate, fc = Gate(H, seed=7), td.FC(H, activation="tanh")
    pair = td.Record((td.Vector(H), td.Vector(H))) >> gate
    block = td.Map(pair) >> td.Fold(td.Concat() >> fc, td.Zeros(H))
    vec = st.lists(st.floats(-1, 1, width=32), min_size=H, max_size=H)
    return Case("custom_block", block, st.lists(st.tuples(vec, vec), max_size=5),
                [gate.w, *weights_of(fc)])


class Residual(td.Block):
    """A block with a child, written with the public hooks as a user would:
    `x + child(x)`, adding with an op of its own, and declaring its data flow."""

    def __init__(self, child, name: str | None = None):
        self._add = None
        super().__init__([td.convert_to_block(child)], name=name)

    def infer_types(self):
        (child,) = self.children
        for t in (self.input_type, self.output_type, child.input_type, child.output_type):
            for b in (self, child):
                b.set_input_type(t)
                b.set_output_type(t)

    def ops(self) -> list:
        if self._add is None:
            t = self.input_type
            self._add = td.Op("residual_add", lambda x, y: [x + y], [t, t], [t])
        return [self._add]

    def evaluate(self, ctx, x):
        (child,) = self.children
        return ctx.op(self._add, [x, child.eval_in(ctx, x)])[0]

    def dataflow(self):
        (child,) = self.children
        add, inp = self._add, td.DataFlow.INPUT
        return td.DataFlow({child: [inp], add: [inp, child], td.DataFlow.OUTPUT: [add]})


def make_user_block_with_children() -> Case:
    """A user-written block with a child (`Residual`) before a Fold and inside it."""
    keras.utils.set_random_seed(11)
    inner, step = td.FC(H, activation="tanh"), td.FC(H, activation="tanh")
    residual = td.FC(H, activation="tanh")
    block = td.Map(td.Vector(H) >> Residual(inner)) >> td.Fold(
        td.Concat() >> step >> Residual(residual), td.Zeros(H))
    vec = st.lists(st.floats(-1, 1, width=32), min_size=H, max_size=H)
    return Case("user_block_with_children", block, st.lists(vec, max_size=5),
                weights_of(inner, step, residual))


END, START = 0, 4  # the greedy decoder's end symbol and start symbol (vocabulary 4)


def make_greedy_decoder() -> Case:
    """`td.Unfold`: a decoder feeding its own argmax back until END or 5 steps, with a
    metric at every step; the steps taken depend on the values computed."""
    keras.utils.set_random_seed(8)
    enc, cell = td.FC(H, activation="tanh"), td.FC(H, activation="tanh")
    emb, out = td.Embedding(START + 1, 3), td.FC(START, activation=None)
    last = td.InputTransform(lambda tokens: tokens[-1]) >> td.Scalar("int32") >> emb
    lse = td.Function(lambda z: tf.reduce_logsumexp(z, 1)) >> td.Metric("lse")
    step = (td.Record((td.Identity(), last)) >> td.Concat() >> cell
            >> td.AllOf(td.Identity(), out >> td.AllOf(td.Identity(), lse) >> td.GetItem(0)))
    decode = td.Unfold(step, decide=lambda tokens, z: tokens + (int(np.argmax(z)),),
                       done=lambda tokens: tokens[-1] == END, max_steps=5)
    block = td.AllOf(td.Vector(2) >> enc, td.InputTransform(lambda x: (START,))) >> decode
    vectors = st.lists(st.floats(-2, 2, width=32), min_size=2, max_size=2)
    return Case("greedy_decoder", block, vectors, weights_of(enc, cell, emb, out))


def make_device_decoder() -> Case:
    """`td.Unfold` with `lookahead`: the argmax is fed back on the device (the state
    carries the token; a `Function` embeds it), 3 steps a round, those after END
    dropped; a metric at every step."""
    keras.utils.set_random_seed(10)
    enc, cell = td.FC(H, activation="tanh"), td.FC(H, activation="tanh")
    emb, out = td.Embedding(START + 1, 3), td.FC(START, activation=None)
    embed = td.Function(lambda t: tf.gather(emb.embeddings, t))
    argmax = td.Function(lambda z: tf.argmax(z, 1, output_type=tf.int32))
    lse = td.Function(lambda z: tf.reduce_logsumexp(z, 1)) >> td.Metric("lse")
    step = (td.GetItem(0) >> td.AllOf(td.GetItem(0), td.GetItem(1) >> embed) >> td.Concat()
            >> cell >> td.AllOf(td.Identity(), out)
            >> td.AllOf(td.AllOf(td.GetItem(0), td.GetItem(1) >> argmax),
                        td.GetItem(1) >> td.AllOf(td.Identity(), lse) >> td.GetItem(0)))
    decode = td.Unfold(step, decide=lambda tokens, z: tokens + (int(np.argmax(z)),),
                       done=lambda tokens: tokens[-1:] == (END,), max_steps=5, lookahead=3)
    start = td.AllOf(td.Vector(2) >> enc, td.InputTransform(lambda x: START) >> td.Scalar(
        "int32"))
    block = td.AllOf(start, td.InputTransform(lambda x: ())) >> decode
    vectors = st.lists(st.floats(-2, 2, width=32), min_size=2, max_size=2)
    return Case("device_decoder", block, vectors, weights_of(enc, cell, emb, out))


SHIFT, REDUCE = 0, 1


def parser_decide(config, scores):
    """A transition system's bookkeeping: the best legal action, applied. `config` is
    `(stack, next word, arcs, length)`; REDUCE attaches the top to the one below."""
    stack, i, arcs, n = config
    legal = np.array([i < n, len(stack) >= 2])
    action = int(np.argmax(np.where(legal, scores, -np.inf)))
    if action == SHIFT:
        return stack + (i,), i + 1, arcs, n
    return stack[:-1], i, arcs + ((stack[-2], stack[-1]),), n


def make_transition_system() -> Case:
    """`td.Unfold` as a transition system: each step scores SHIFT/REDUCE from the
    encodings of the stack's top and the buffer's front, which the earlier decisions
    chose (`td.Nth` with a Python index); Python applies the action."""
    keras.utils.set_random_seed(9)
    enc, score = td.FC(H, activation="tanh"), td.FC(2, activation=None)

    def word_at(pick):  # (encodings, config) -> the encoding at pick(config)
        return td.Record((td.Identity(), td.InputTransform(pick))) >> td.Nth()
    top = word_at(lambda c: c[0][-1] if c[0] else 0)
    front = word_at(lambda c: min(c[1], c[3] - 1))
    step = td.AllOf(td.GetItem(0), td.AllOf(top, front) >> td.Concat() >> score)
    parse = td.Unfold(step, decide=parser_decide, max_steps=12,
                      done=lambda c: c[1] == c[3] and len(c[0]) <= 1)
    block = td.AllOf(td.Map(td.Vector(2) >> enc),
                     td.InputTransform(lambda words: ((), 0, (), len(words)))) >> parse
    sentences = st.lists(st.lists(st.floats(-2, 2, width=32), min_size=2, max_size=2),
                         min_size=1, max_size=6)
    return Case("transition_system", block, sentences, weights_of(enc, score))


def make_zip_with_python_objects() -> Case:
    """`td.Zip` pairs a broadcast sequence of encodings with a plain list of Python
    index pairs; each pair scores the concatenation of the two encodings it names."""
    keras.utils.set_random_seed(10)
    enc, score = td.FC(H, activation="tanh"), td.FC(2, activation=None)

    def word_at(k):  # (encodings, (i, j)) -> encodings[(i, j)[k]]
        return td.Record((td.Identity(), td.InputTransform(lambda p: p[k]))) >> td.Nth()
    pair = td.AllOf(word_at(0), word_at(1)) >> td.Concat() >> score
    block = td.AllOf(td.GetItem(0) >> td.Map(td.Vector(2) >> enc) >> td.Broadcast(),
                     td.GetItem(1)) >> td.Zip() >> td.Map(pair)
    vec = st.lists(st.floats(-2, 2, width=32), min_size=2, max_size=2)

    def with_pairs(words):
        index = st.integers(0, len(words) - 1)
        return st.tuples(st.just(words), st.lists(st.tuples(index, index), max_size=4))
    inputs = st.lists(vec, min_size=1, max_size=5).flatmap(with_pairs)
    return Case("zip_with_python_objects", block, inputs, weights_of(enc, score))


ALL = [make_tree_lstm, make_tree_lstm_loss_everywhere, make_fold_rnn,
       make_rnn_with_metric_per_step, make_rnn_of_a_library_cell, make_bidirectional_tagger,
       make_char_tagger, make_stacked_encodings, make_features_after_a_loop,
       make_reduce_and_oneof, make_nested_records, make_custom_block, make_user_block_with_children,
       make_greedy_decoder,
       make_device_decoder, make_transition_system, make_zip_with_python_objects]


def random_weights_like(shapes: list, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype("float32") for s in shapes]
