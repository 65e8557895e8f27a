"""The packed batch: the flat tensors one planned batch becomes.

A training step and an exported SavedModel's `serving_default` signature take the
same arrays. Whatever a batch holds (how many inputs, how deep their trees), it is
these few 1-D tensors, so one traced function runs every batch without retracing:

- `index`, int32 `[I]`: every integer the executor reads, segment after segment
  (`scheduler.layout.Layout.segments`: the loop's launches, gather rows, row
  counts, rows to read, and last the sizes of the constants).
- `layout`, int32 `[S + 1]`: the segment bounds; segment `s` is
  `index[layout[s]:layout[s + 1]]`, `layout[0] == 0`, `layout[S] == I`; the model
  fixes `S`.
- `consts_<dtype>`, that dtype, `[C]`: the batch's input numbers (what `td.Scalar`,
  `td.Vector`, ... read) of every value type of that dtype, flattened and
  concatenated; one such tensor per dtype among the model's values.
- `metric_bounds`, int32 `[2M]`: metric `m`'s values are rows `[b[2m], b[2m+1])`
  of its type's outputs (`M` metrics; training reads them, serving checks them).
- `batch_size`, int32 `[1]`: `N`, the number of inputs.

The output is `{"output": [N, *shape]}`: the block's output for each input, in
input order. Only expanding and planning the inputs (`compiler.Compiler`, or the
`serving.Predictor` client) makes these arrays; `checked` adds the cheap
consistency checks a SavedModel runs first, so a malformed request fails with a
message naming the tensor at fault rather than deep in the executor.

>>> import refold as td
>>> from refold.compiler.compiler import Compiler
>>> c = Compiler.create(td.Map(td.Scalar()) >> td.Sum())
>>> arrays = pack(c.plan([[1.0, 2.0], [3.0]], grouped=True), c.program)
>>> sorted(arrays), arrays["consts_float32"].tolist(), arrays["batch_size"].tolist()
(['batch_size', 'consts_float32', 'index', 'layout', 'metric_bounds'], [1.0, 2.0, 3.0], [2])
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from refold.compiler.graphs.batch_plan import BatchPlan
from refold.compiler.graphs.lowering import Program
from refold.scheduler.executor import Executor


def signature(executor: Executor) -> dict:
    """`tf.TensorSpec`s of the packed arrays (see the module docstring), by name."""
    spec = dict(executor.input_signature())
    spec["metric_bounds"] = tf.TensorSpec([None], tf.int32)
    spec["batch_size"] = tf.TensorSpec([1], tf.int32)
    return spec


def pack(plan: BatchPlan, program: Program) -> dict:
    """The packed arrays (numpy) of a batch planned with `grouped=True`."""
    arrays = dict(plan.feed.arrays)
    arrays["metric_bounds"] = plan.metric_bounds(program).reshape(-1)
    arrays["batch_size"] = np.array([plan.size], np.int32)
    return arrays


def checked(arrays: dict, executor: Executor, n_metrics: int) -> dict:
    """`arrays` (tensors) behind `tf.debugging` asserts of their consistency.

    Checked: `layout` has one bound per segment plus one, starts at 0, never
    decreases and ends at the size of `index`; each `consts_<dtype>` has the size
    its segment of `index` announces; `metric_bounds` has two entries per metric;
    `batch_size` is >= 0. The checks cost a few scalar ops per batch; without
    them a wrong `layout` fails inside `tf.split` ("size of the split_tensor must
    be 1-D" and the like), far from the cause. Use inside a `tf.function`.
    """
    lay = executor.layout
    index, bounds = arrays["index"], arrays["layout"]
    n_seg = len(lay.segments)
    first = [
        tf.debugging.assert_equal(
            tf.size(bounds), n_seg + 1,
            message=f"bad request: 'layout' must hold {n_seg + 1} int32 bounds (one per "
                    f"segment of 'index', plus one) for this model"),
        tf.debugging.assert_equal(
            tf.size(arrays["metric_bounds"]), 2 * n_metrics,
            message=f"bad request: 'metric_bounds' must hold {2 * n_metrics} int32 values "
                    f"(a start and an end for each of the model's {n_metrics} metrics)"),
        tf.debugging.assert_non_negative(
            arrays["batch_size"], message="bad request: 'batch_size' must be >= 0"),
    ]
    with tf.control_dependencies(first):
        second = [
            tf.debugging.assert_equal(
                bounds[0], 0, message="bad request: 'layout' must start at 0"),
            tf.debugging.assert_non_negative(
                bounds[1:] - bounds[:-1], message="bad request: 'layout' must not decrease"),
            tf.debugging.assert_equal(
                bounds[-1], tf.size(index),
                message="bad request: 'layout' must end at the size of 'index'"),
        ]
    with tf.control_dependencies(second):
        third = []
        for d in lay.dtypes:
            s = lay.segment_id[f"const_sizes_{d}"]
            sizes = index[bounds[s]:bounds[s + 1]]
            n_types = sum(1 for k in range(lay.n_types) if lay.type_dtype[k] == d)
            third += [
                tf.debugging.assert_equal(
                    tf.size(sizes), n_types,
                    message=f"bad request: 'index' segment const_sizes_{d} must hold "
                            f"{n_types} sizes (one per value type of dtype {d})"),
                tf.debugging.assert_equal(
                    tf.size(arrays[f"consts_{d}"]), tf.reduce_sum(sizes),
                    message=f"bad request: 'consts_{d}' must hold as many numbers as "
                            f"'index' segment const_sizes_{d} adds up to"),
            ]
    with tf.control_dependencies(third):
        return {k: tf.identity(v) for k, v in arrays.items()}


def check_output_rows(output: tf.Tensor, batch_size: tf.Tensor) -> tf.Tensor:
    """`output` (the first `batch_size` results) after checking that it has a row for
    each input."""
    check = tf.debugging.assert_equal(
        batch_size[0], tf.shape(output)[0],
        message="bad request: 'batch_size' is larger than the number of results the "
                "'index' asks for")
    with tf.control_dependencies([check]):
        return tf.identity(output)


# Written beside an exported SavedModel (TF Serving's place for a model's extra files):
# what a client needs to make its requests, the block and how it was planned.
EXPORT_CONFIG = os.path.join("assets.extra", "refold.json")
EXPORT_FORMAT, EXPORT_VERSION = "refold.serving", 1


def export_config(model_config: dict, executor: Executor, program: Program) -> dict:
    """What `Model.export` writes to `EXPORT_CONFIG`: the model's config (its block
    expression or factory call, and scheduler), the packed tensors' names and the
    index segments, so a client rebuilding the block can check it packs the same."""
    out = program.root.output_type
    return {"format": EXPORT_FORMAT, "version": EXPORT_VERSION,
            "model": {k: model_config[k] for k in ("block", "factory", "factory_kwargs",
                                                   "scheduler") if k in model_config},
            "inputs": {k: {"dtype": v.dtype.name, "shape": v.shape.as_list()}
                       for k, v in signature(executor).items()},
            "segments": list(executor.layout.segments),
            "metrics": list(program.metric_names),
            "output": {"dtype": out.dtype, "shape": list(out.shape)}}
