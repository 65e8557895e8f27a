"""`compiler.feeding.handoff`: a packed batch enters the traced step as few tensors, whole."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from refold.compiler import Model
from refold.compiler.feeding.handoff import Handoff
from tests.compiler import factories


def _spec(dtype, shape=(None,)):
    return tf.TensorSpec(shape, dtype)


def _roundtrip(structure, batch):
    """The batch through `tensors` and, in a traced function, `unfold`."""
    h = Handoff(structure)
    fn = tf.function(lambda *t: h.unfold(t), input_signature=h.signature,
                     autograph=False)
    return h, fn(*h.tensors(batch))


def _assert_same(got, want):
    for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        assert g.dtype == tf.as_dtype(w.dtype)
        np.testing.assert_array_equal(g.numpy(), w)


def test_int32_vectors_fold_into_one_tensor_and_come_back_whole():
    structure = ({"index": _spec(tf.int32), "layout": _spec(tf.int32),
                  "consts_float32": _spec(tf.float32), "consts_int32": _spec(tf.int32),
                  "metric_bounds": _spec(tf.int32), "batch_size": _spec(tf.int32, [1])},
                 _spec(tf.int32), _spec(tf.float32))
    batch = ({"index": np.arange(7, dtype=np.int32), "layout": np.array([0, 3, 7], np.int32),
              "consts_float32": np.array([0.5, -1.0], np.float32),
              "consts_int32": np.zeros(0, np.int32),  # empty ones too
              "metric_bounds": np.zeros(0, np.int32), "batch_size": np.array([2], np.int32)},
             np.array([1, 0], np.int32), np.array([1.0, 0.5], np.float32))
    h, got = _roundtrip(structure, batch)
    assert len(h.signature) == 3  # the int32 buffer, the floats, the weights
    _assert_same(got, batch)


def test_static_shapes_of_the_specs_survive_the_fold():
    structure = {"a": _spec(tf.int32), "batch_size": _spec(tf.int32, [1])}
    h = Handoff(structure)
    shapes = {}

    def look(*t):
        shapes.update({k: v.shape.as_list() for k, v in h.unfold(t).items()})
        return t[0]
    tf.function(look, input_signature=h.signature, autograph=False).get_concrete_function()
    assert shapes == {"a": [None], "batch_size": [1]}


def test_other_dtypes_and_ranks_pass_as_they_are():
    structure = ({"index": _spec(tf.int32), "batch_size": _spec(tf.int32, [1])},
                 _spec(tf.int64), _spec(tf.int32, (None, 3)))
    batch = ({"index": np.array([5, 6], np.int32), "batch_size": np.array([2], np.int32)},
             np.array([3, 4], np.int64), np.arange(6, dtype=np.int32).reshape(2, 3))
    h, got = _roundtrip(structure, batch)
    assert [s.dtype for s in h.signature] == [tf.int32, tf.int64, tf.int32]
    _assert_same(got, batch)


def test_a_single_int32_array_is_not_folded():
    structure = (_spec(tf.int32), _spec(tf.float32))
    batch = (np.array([1, 2], np.int32), np.array([0.5], np.float32))
    h, got = _roundtrip(structure, batch)
    assert h.folded == [] and len(h.signature) == 2
    _assert_same(got, batch)


def test_a_models_steps_take_the_folded_batch():
    # the TreeLSTM-like tree model with int32 labels: index, layout, metric_bounds,
    # batch_size and the labels in one tensor, the float inputs in another
    model = Model(factories.tree_sign())
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    model.fit([(1.0, 2.0), -1.0], np.array([1, 0], np.int32), batch_size=2, verbose=0)
    step = next(c.cell_contents for c in model.train_function.__closure__
                if hasattr(c.cell_contents, "_traced"))
    (handoff, fn), = step._traced.values()
    assert [s.dtype for s in handoff.signature] == [tf.int32, tf.float32]
    assert len(fn.structured_input_signature[0]) == 2
