"""A `Model`'s steps under XLA (`jit_compile=True`): packed batches padded to buckets.

`XlaBatches(model).convert(batch)` turns a packed batch (`compiler.feeding.lists`) into
the arrays of the engine's XLA program (`scheduler.xla`), plus what the step reads
after it: `result_rows` (the buffer row of each input's output, one per input, so
`y_pred` has the batch's exact size, as the labels do) and, per `td.Metric` m,
`metric_rows_m` (its values' rows, padded to a bucket) with `metric_counts[m]`
(how many are real). `forward(x)` is the step's forward pass: `y_pred` and the
metric values, the padded ones zero; `metric_weights` masks them in the metrics.

Every shape is then static and bucketed, so `StepFunction` traces one
`tf.function(jit_compile=True)` per bucket key (`key`) and XLA compiles each once.
Small batches share the buckets of `MIN_ROWS` rows.
"""

from __future__ import annotations

import numpy as np

from refold.scheduler.xla import XlaExecutor

# The smallest bucket of rows: batches of a few small inputs share few compiled
# programs (buffers, launches outside the loop and the loop's iteration table
# are cheap to pad).
MIN_ROWS = 32
# The loop's rows are not padded to MIN_ROWS: a row of a loop iteration costs
# far more than the iteration's fixed cost under XLA (BENCHMARKS.md, "XLA for the loop").
MIN_WIDTH, ITERATION_COST_ROWS = 1, 1

# The arrays of a converted batch that the program reads only the shape of.
SHAPE_ONLY = ("buffer_", "loop_width")


class XlaBatches:
    """The XLA form of a `Model`'s packed batches (see the module docstring)."""

    def __init__(self, model, min_rows: int = MIN_ROWS, min_width: int = MIN_WIDTH,
                 iteration_cost: float = ITERATION_COST_ROWS):
        self.program = model.program
        self.out_type = model.output_type_id
        self.xla = XlaExecutor(model.compiler.executor, min_rows,
                               variables=lambda: model.trainable_weights,
                               min_width=min_width, iteration_cost=iteration_cost)

    def convert(self, batch: tuple) -> tuple:
        """`(arrays, *labels)` with the arrays in their XLA form."""
        arrays, *rest = batch
        out, rows = self.xla.pack(arrays)
        n = int(arrays["batch_size"][0])
        out["batch_size"] = arrays["batch_size"]
        if self.out_type is not None:
            out["result_rows"] = rows[self.out_type][:n]
        bounds = np.asarray(arrays["metric_bounds"]).reshape(-1, 2)
        counts = []
        for m, t in enumerate(self.program.metric_types):
            k = self.program.type_id[t]
            mine = rows[k][bounds[m, 0]:bounds[m, 1]]
            padded = np.full(self.xla.bucket(len(mine)), out[f"buffer_{k}"].shape[0] - 1,
                             np.int32)
            padded[:len(mine)] = mine
            out[f"metric_rows_{m}"] = padded
            counts.append(len(mine))
        out["metric_counts"] = np.array(counts, np.int32)
        return (out, *rest)

    @staticmethod
    def key(batch: tuple) -> tuple:
        """The shapes a compiled step depends on."""
        arrays, *rest = batch
        return XlaExecutor.key(arrays), tuple(np.shape(a) for a in rest)

    @staticmethod
    def flatten(batch: tuple) -> tuple:
        """`(layout, flat)`: a converted batch as one 1-D array per dtype (`flat`,
        `(arrays, *labels)`) and where each array lies in them (`layout`, hashable:
        the compiled step's key, which `expand` reads back inside it).

        A step's arrays are ~40 small ones; converting each to a tensor and passing
        it to the compiled call costs more than the few concatenations here
        (BENCHMARKS.md, "XLA for the loop"). The arrays only their shape is read of
        (`SHAPE_ONLY`) are not passed at all."""
        arrays, *rest = batch
        parts: dict = {}
        ends: dict = {}  # per dtype, the length so far
        layout = []
        for name, a in sorted(arrays.items()):
            a = np.asarray(a)
            if name.startswith(SHAPE_ONLY):
                layout.append((name, a.shape, a.dtype.str, None))
                continue
            at = ends.get(a.dtype.str, 0)
            parts.setdefault(a.dtype.str, []).append(a.reshape(-1))
            ends[a.dtype.str] = at + a.size
            layout.append((name, a.shape, a.dtype.str, at))
        flat = {d: np.concatenate(p) for d, p in parts.items()}
        return (tuple(layout), tuple(np.shape(a) for a in rest)), (flat, *rest)

    @staticmethod
    def expand(batch: tuple, layout: tuple) -> tuple:
        """Inside the compiled step: the `(arrays, *labels)` of a flattened batch
        (static slices: XLA reads them in place)."""
        import tensorflow as tf
        flat, *rest = batch
        arrays = {}
        for name, shape, dtype, at in layout[0]:
            if at is None:
                arrays[name] = tf.zeros(shape, tf.as_dtype(np.dtype(dtype)))
            else:
                size = int(np.prod(shape, dtype=np.int64))
                arrays[name] = tf.reshape(flat[dtype][at:at + size], shape)
        return (arrays, *rest)

    def signature(self, batch: tuple) -> tuple:
        """Static `tf.TensorSpec`s of a converted (or flattened) batch."""
        import tensorflow as tf
        return tuple(tf.nest.map_structure(
            lambda a: tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)), batch))

    def forward(self, x: dict):
        """`(y_pred or None, {metric id: values, padded with zeros})` of a converted
        batch (inside the compiled step)."""
        import tensorflow as tf
        bufs = self.xla.compute(x)
        y_pred = tf.gather(bufs[self.out_type], x["result_rows"]) \
            if self.out_type is not None else None
        values = {}
        for m, t in enumerate(self.program.metric_types):
            v = tf.gather(bufs[self.program.type_id[t]], x[f"metric_rows_{m}"])
            real = tf.range(tf.shape(v)[0]) < x["metric_counts"][m]
            values[m] = tf.where(tf.reshape(real, [-1] + [1] * (v.shape.rank - 1)), v,
                                 tf.zeros_like(v))
        return y_pred, values


def metric_weights(x: dict, m: int, v):
    """Per element of metric m's flattened values `v`: 1 if real, 0 if padding."""
    import tensorflow as tf
    rows = tf.shape(v)[0]
    real = tf.cast(tf.range(rows) < x["metric_counts"][m], tf.float32)
    per_row = tf.size(v) // tf.maximum(rows, 1)
    return tf.reshape(tf.repeat(real, per_row), [-1])
