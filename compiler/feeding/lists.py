"""The input pipeline of a `Model`: Python inputs and labels into packed batches.

Inputs are expanded once up front (bad ones raise or are skipped, as the model's
`on_bad_example` says; many inputs show a progress bar when `verbose` is on), to
fill the cache; without one they are expanded as their batch is packed, and a bad
one raises there (unless bad ones are to be skipped, which needs the check up front).
Then a `BatchFeeder` hands Keras' loop one packed batch per step: Keras iterates
a `tf.data` range of batch indices (its length paces the loop), and the model's
step functions (`compiler.training.steps`) ask the feeder for batch i, which merges,
schedules and packs it there and then. That hand-off is a Python call: a `tf.data` producer
(`from_generator`) cost more per call of `fit` or `predict` (building it traces
functions, tearing it down waits on its thread) and per step (a `py_func` and
a copy into the graph) than planning a batch does. The one exception: while a traced
step is first called (TensorFlow optimizes its graph then, outside Python), a thread
plans the pass's next batches (`BatchFeeder.planning_ahead`). The packed arrays are those
of the executor plus `metric_bounds` (where each `td.Metric`'s values are in the
outputs) and `batch_size`, which is all a step, or a SavedModel's signature, needs
(`compiler.feeding.packed` documents them).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import keras
import numpy as np
import tensorflow as tf

from refold import compat
from refold.blocks.errors import InputError
from refold.blocks.evaluation.contexts import start_deep_thread
from refold.blocks.types import TensorType
from refold.callsite import warn
from refold.compiler.feeding import packed
from refold.compiler.feeding.feeder import Feeder
from refold.compiler.graphs.batch_plan import BatchPlan

if TYPE_CHECKING:  # annotations only: the compiler imports the pipeline's users
    from refold.compiler.compiler import Compiler

# With `verbose` on, expanding more inputs than this shows a progress bar.
PROGRESS_AFTER = 1000

# How many batches `BatchFeeder.planning_ahead` plans at most (their packed arrays are kept).
AHEAD = 128


class Labels:
    """Labels and sample weights aligned with the inputs (either may be None).

    Refused at once: labels that are not numbers, rows that do not match the inputs,
    and non-finite labels or weights (and negative weights), each error naming the
    first offending row. `check_against` compares the labels with the loss.
    """

    def __init__(self, y, sample_weight, n: int | None = None, what: str = "y",
                 rows: np.ndarray | None = None):
        self.what = what
        self.rows = rows  # the rows' indices in errors (a batch of a stream: its positions)
        self.y = None if y is None else np.asarray(y)
        self.w = None if sample_weight is None else np.asarray(sample_weight, np.float32)
        if self.y is not None:
            if self.y.ndim == 0:
                raise ValueError(f"{what} must have one row per input, got a scalar {y!r}")
            if not (np.issubdtype(self.y.dtype, np.number) or self.y.dtype == bool):
                raise TypeError(f"{what} must hold numbers (labels or targets), got dtype "
                                f"{self.y.dtype}")
        if self.w is not None and self.w.ndim != 1:
            raise ValueError(f"sample_weight must be one number per input, got shape "
                             f"{self.w.shape}")
        for name, a in ((what, self.y), ("sample_weight", self.w)):
            if a is not None and n is not None and len(a) != n:
                raise ValueError(f"{name} has {len(a)} rows but there are {n} inputs")
        if self.y is not None and self.y.dtype == np.float64:
            with np.errstate(over="ignore"):
                self.y = self.y.astype(np.float32)
        if self.y is not None and self.y.dtype.kind in "fc":
            finite = np.isfinite(self.y).reshape(len(self.y), -1).all(axis=1)
            if not finite.all():
                i = int(np.argmin(finite))
                raise ValueError(f"{what}[{self.row(i)}] is {_show(self.y[i])} (as float32): "
                                 "labels must be finite")
        if self.w is not None:
            good = np.isfinite(self.w) & (self.w >= 0)
            if not good.all():
                i = int(np.argmin(good))
                raise ValueError(f"sample_weight[{self.row(i)}] is {self.w[i]}: sample "
                                 "weights must be finite and >= 0")

    def check_against(self, loss, out_type: TensorType) -> None:
        """Refuses labels that a Keras built-in `loss` cannot take with the block's
        output `out_type` (one tensor per input, `y_pred`), before any step runs.

        Sparse categorical cross-entropy takes class ids in `[0, n_classes)` (the
        output's last dimension), one per row of the output (shape `(N,)` or
        `(N, 1)` for a vector output). Other built-in losses take rows of the
        output's shape (a trailing dimension of 1 may be left out or added, as
        Keras broadcasts). A loss of the user's own is not checked.
        """
        name, kwargs = _builtin_loss(loss)
        if self.y is None or name is None:
            return
        what, y = self.what, self.y
        row, out = tuple(y.shape[1:]), tuple(out_type.shape)
        if name == "sparse_categorical_crossentropy" and out:
            n_classes, want = out[-1], out[:-1]
            if row not in (want, (*want, 1)):
                raise ValueError(
                    f"{what} has shape {y.shape}, but {name} with the block's output "
                    f"{out_type} needs one class id per input: shape {(len(y), *want)} or "
                    f"{(len(y), *want, 1)}")
            ids = y.reshape(len(y), -1)
            if y.dtype.kind in "fc":
                whole = (ids == np.round(ids)).all(axis=1)
                if not whole.all():
                    i = int(np.argmin(whole))
                    raise ValueError(f"{what}[{self.row(i)}] is {_show(y[i])}: {name} needs "
                                     "integer class ids")
            ignore = kwargs.get("ignore_class")
            good = ((ids >= 0) & (ids < n_classes)) | (ids == ignore if ignore is not None
                                                        else False)
            good = good.all(axis=1)
            if not good.all():
                i = int(np.argmin(good))
                raise ValueError(f"{what}[{self.row(i)}] is {_show(y[i])}: {name} needs class "
                                 f"ids in [0, {n_classes}) (the block's output is {out_type})")
            return
        if not (row == out or row + (1,) == out or row == out + (1,)):
            hint = ""
            if name == "categorical_crossentropy" and row in ((), (1,)):
                hint = "; for class ids give sparse_categorical_crossentropy"
            raise ValueError(f"{what} has shape {y.shape}: rows of shape {row}, but {name} "
                             f"needs rows of the block's output shape {out} (its output is "
                             f"{out_type}){hint}")

    def row(self, i: int) -> int:
        """The index that errors give row `i`."""
        return int(i if self.rows is None else self.rows[i])

    def take(self, keep: np.ndarray) -> Labels:
        return Labels(None if self.y is None else self.y[keep],
                      None if self.w is None else self.w[keep], what=self.what)

    def batch(self, idx) -> tuple:
        if self.y is None:
            return ()
        return (self.y[idx],) if self.w is None else (self.y[idx], self.w[idx])

    def signature(self) -> tuple:
        if self.y is None:
            return ()
        ys = tf.TensorSpec((None, *self.y.shape[1:]), tf.as_dtype(self.y.dtype))
        return (ys,) if self.w is None else (ys, tf.TensorSpec((None,), tf.float32))


class InputPipeline:
    """Expands, packs and batches the inputs of one compiled block.

    Args:
        compiler: the `Compiler` of the block; its cache keeps expanded inputs.
    """

    def __init__(self, compiler: Compiler):
        self.compiler = compiler
        self.program = compiler.program

    def labels(self, y, sample_weight, n: int, loss=None, what: str = "y") -> Labels:
        """`Labels` for `n` inputs, refused where the block's output or the compiled
        `loss` (if given) cannot take them."""
        labels = Labels(y, sample_weight, n, what)
        out = self.program.root.output_type
        if labels.y is not None and not isinstance(out, TensorType):
            raise ValueError(f"labels y need a block whose output is one tensor per input "
                             f"(y_pred), but its output type is {out}")
        if loss is not None:
            labels.check_against(loss, out)
        if labels.y is None and labels.w is not None:
            raise ValueError("sample_weight needs labels y; with losses from td.Metric blocks "
                             "weigh them inside the block")
        return labels

    def expand(self, inputs: list, labels: Labels, skip: bool, what: str = "x",
               offset: int = 0, verbose=0) -> tuple[list, Labels, list[int]]:
        """Expands every input once (filling the cache): `(inputs, labels, skipped)`.

        A bad input raises its `InputError`, or with `skip` is left out (with its
        label) and its index listed in `skipped`, with one warning for them all.
        Errors name an input's index plus `offset` (its index in the caller's x).
        With `verbose` on (Keras' meaning) and more than `PROGRESS_AFTER` inputs, a
        Keras progress bar shows the inputs expanded so far.
        """
        return self.expand_graphs(inputs, labels, skip, what, offset, verbose)[:3]

    def expand_graphs(self, inputs: list, labels: Labels, skip: bool, what: str = "x",
                      offset: int = 0, verbose=0) -> tuple[list, Labels, list[int], list]:
        """`expand`, and the graphs of the inputs kept (None for an input whose
        graph is not known: the good inputs before a skipped one in its chunk)."""
        bad: list[int] = []
        graphs: list = [None] * len(inputs)
        first_error = None
        start, chunk = 0, 256
        bar = _progress_bar(len(inputs), what, verbose)
        try:
            while start < len(inputs):
                part = inputs[start:start + chunk]
                try:
                    graphs[start:start + len(part)] = self.compiler.expand(part, offset + start)
                    start += len(part)
                except InputError as e:
                    if what != "x" and e.example_index is not None:
                        e = type(e)(e.block_path, f"{e.reason} (in {what})", e.example_index)
                    if not skip or e.example_index is None:
                        raise e from e.__cause__
                    bad.append(e.example_index - offset)
                    first_error = first_error or e
                    start = e.example_index - offset + 1
                if bar is not None:
                    bar.update(start)
        finally:
            if bar is not None and start < len(inputs):
                print()  # end the unfinished bar's line before the error
        if bad:
            warn(f"skipped {len(bad)} of {len(inputs)} examples of {what} that do not fit "
                 f"the block (on_bad_example='skip'); the first: {first_error}")
            keep = np.setdiff1d(np.arange(len(inputs)), bad)
            return [inputs[i] for i in keep], labels.take(keep), bad, [graphs[i] for i in keep]
        return inputs, labels, bad, graphs

    def pack(self, batch: list, graphs: list | None = None) -> dict:
        """The arrays (`signature()`'s keys) one batch of inputs becomes; `graphs`,
        their expanded graphs if they are known (and checked) already."""
        return self.arrays(self.plan(batch, graphs))

    def plan(self, batch: list, graphs: list | None = None) -> BatchPlan:
        """The grouped `BatchPlan` of one batch of inputs (`graphs` as in `pack`)."""
        if graphs is not None:
            return self.compiler.plan_expanded(graphs, grouped=True)
        return self.compiler.plan(batch, grouped=True)

    def arrays(self, plan: BatchPlan) -> dict:
        """The packed arrays of a batch planned with `grouped=True`."""
        return packed.pack(plan, self.program)

    def signature(self) -> dict:
        """`tf.TensorSpec`s of the packed arrays, for every batch (`compiler.feeding.packed`)."""
        return packed.signature(self.compiler.executor)

    def feeder(self, inputs: list, labels: Labels, batch_size: int,
               order: Callable[[], np.ndarray], with_labels: bool = True,
               what: str = "x", graphs: list | None = None) -> BatchFeeder:
        """A `BatchFeeder` of `(arrays, y?, sample_weight?)` batches of `inputs`, taken
        in the order `order()` gives at the start of every pass; `what` names them in
        errors. `graphs`, the inputs' graphs as `expand_graphs` just found them,
        serve the first pass."""
        return BatchFeeder(self, inputs, labels, batch_size, order, with_labels, what,
                           graphs)


def _progress_bar(n: int, what: str, verbose) -> keras.utils.Progbar | None:
    """A titled bar over `n` inputs, or None when quiet or `n` is small."""
    if not verbose or n <= PROGRESS_AFTER:
        return None
    print(f"expanding {n} inputs" + ("" if what == "x" else f" of {what}"))
    return keras.utils.Progbar(n, verbose=2 if verbose == 2 else 1, unit_name="input")


class BatchFeeder(Feeder):
    """The batches of one `fit`, `evaluate` or `predict` call, packed on demand.

    Keras' loop iterates `dataset()`, the batch indices `0 .. n_batches - 1` (a
    `tf.data` range: cheap to build; the step functions count its elements rather
    than read them, and `Model.predict` runs over `n_batches` without it); the step
    function asks for `batch(i)`. Batch 0 starts a pass: `order()` is read again, so each epoch
    has its own shuffle. Inputs not expanded up front (a model without cache) are
    expanded here; a bad one raises its `InputError` naming its index in `x`.

    Each input's content is checked against the cache once a pass: the first pass
    packs the graphs the call's up-front expansion just found and checked
    (`graphs`), later passes look each input up again as they pack it, so a change
    made during the call (by a callback) is seen from the next pass on.
    """

    def __init__(self, pipeline: InputPipeline, inputs: list, labels: Labels,
                 batch_size: int, order: Callable[[], np.ndarray], with_labels: bool,
                 what: str = "x", graphs: list | None = None):
        self.pipeline, self.inputs, self.labels = pipeline, inputs, labels
        self._graphs = graphs  # the first pass's; dropped as the second starts
        self._passes = 0
        self.batch_size, self.with_labels, self.what = batch_size, with_labels, what
        self.n_batches = math.ceil(len(inputs) / batch_size)
        self._order_of_pass = order
        self._order: np.ndarray | None = None
        self.positions: np.ndarray | None = None  # inputs' indices in x, if some were skipped
        self.offset = 0  # added to an index in errors (a validation split's start in x)
        self.last_plan: BatchPlan | None = None  # the plan of the batch packed last
        self._planned: dict = {}  # batch index -> (plan, arrays) made by `planning_ahead`
        spec = (pipeline.signature(), *labels.signature())
        self.signature = spec if with_labels else spec[:1]

    def dataset(self) -> tf.data.Dataset:
        """What Keras iterates: one element, the batch index, per step (see
        `batch_indices`)."""
        return batch_indices(self.n_batches)

    def batch(self, i: int) -> tuple:
        """Batch i of the current pass: `(arrays, y?, sample_weight?)`, numpy."""
        if i == 0 or self._order is None:
            self._order = self._order_of_pass()
            self._passes += 1
            self._planned.clear()
            if self._passes > 1:
                self._graphs = None
        idx = self._order[i * self.batch_size:(i + 1) * self.batch_size]
        try:
            self.last_plan, arrays = self._planned.pop(i, None) or self._plan(i)
        except InputError as e:
            if e.example_index is None:
                raise
            reason = e.reason if self.what == "x" else f"{e.reason} (in {self.what})"
            index = self.offset + int(self.examples(i)[e.example_index])
            err = type(e)(e.block_path, reason, index)
            raise err from e.__cause__
        return (arrays, *self.labels.batch(idx)) if self.with_labels else (arrays,)

    def _plan(self, i: int) -> tuple[BatchPlan, dict]:
        """Batch i's plan and packed arrays (of the current pass)."""
        idx = self._order[i * self.batch_size:(i + 1) * self.batch_size]
        graphs = None if self._graphs is None else [self._graphs[j] for j in idx]
        if graphs is not None and any(g is None for g in graphs):
            graphs = None
        plan = self.pipeline.plan([self.inputs[j] for j in idx], graphs)
        return plan, self.pipeline.arrays(plan)

    @contextlib.contextmanager
    def planning_ahead(self, i: int):
        """Inside, a thread plans the pass's batches from `i` on (at most `AHEAD`),
        which `batch` then takes as made: for time the caller spends outside Python,
        a traced step's first call, in which TensorFlow optimizes its graph and makes
        its kernels (a fraction of a second, on one core). Batches planned ahead are
        those `batch` would plan, from the same order and inputs; one that fails is
        left for `batch` to plan again and report. None while `scheduler="auto"`
        measures the schedulers."""
        stop, last = threading.Event(), min(i + AHEAD, self.n_batches)

        def plan():
            for j in range(i, last):
                if stop.is_set() or j in self._planned:
                    return
                try:
                    self._planned[j] = self._plan(j)
                except Exception:  # noqa: BLE001 (`batch` plans it again and reports it)
                    return

        choice = self.pipeline.compiler.scheduler_choice
        if self._order is None or i >= last or (choice is not None and choice.chosen is None):
            yield  # (`scheduler="auto"` times each batch's planning with its step)
            return
        thread = start_deep_thread(plan, name="refold-plan-ahead", daemon=True)
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def examples(self, i: int) -> np.ndarray:
        """The indices in the caller's `x` of batch i's inputs (of the current pass)."""
        idx = self._order[i * self.batch_size:(i + 1) * self.batch_size]
        return idx if self.positions is None else self.positions[idx]


@functools.lru_cache(maxsize=16)
def batch_indices(n: int) -> tf.data.Dataset:
    """The range `0 .. n - 1` that Keras iterates for `n` batches.

    Without tf.data's graph optimizations and autotuning, which have nothing to do
    on a range but made creating its iterator (once per call of `fit` or `predict`
    and per epoch) cost more than a small step. Kept for the next call with as many
    batches (a dataset is immutable), since building one costs as much again
    (BENCHMARKS.md, "the hand-off")."""
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.autotune.enabled = False
    return tf.data.Dataset.range(n).with_options(options)


def _builtin_loss(loss) -> tuple[str | None, dict]:
    """`(name, keyword arguments)` of a Keras built-in loss (a name, function or
    `keras.losses.Loss`), or `(None, {})` for a loss of the user's own."""
    if isinstance(loss, (list, tuple)) and len(loss) == 1:
        loss = loss[0]
    if isinstance(loss, str):
        try:
            loss = keras.losses.get(loss)
        except ValueError:
            return None, {}
    kwargs: dict = {}
    if isinstance(loss, keras.losses.Loss):
        if type(loss).__module__.split(".")[0] != "keras":
            return None, {}
        kwargs = compat.loss_keywords(loss)
        loss = getattr(loss, "fn", None)
    if not callable(loss) or getattr(loss, "__module__", "").split(".")[0] != "keras":
        return None, {}
    return getattr(loss, "__name__", None), kwargs


def _show(row: np.ndarray) -> str:
    text = repr(np.asarray(row).tolist())
    return text if len(text) <= 60 else text[:57] + "..."


def as_inputs(x: Any, what: str = "x") -> list:
    """`x` as a list of Python inputs; refuses None, nothing, one input, and prepared
    datasets."""
    if x is None:
        raise ValueError(f"no inputs: {what} is None")
    if isinstance(x, (str, bytes, dict)) or not isinstance(x, Iterable):
        raise TypeError(f"{what} must be a list (or iterable) of inputs, got "
                        f"{type(x).__name__}")
    if isinstance(x, (tf.data.Dataset, keras.utils.PyDataset)):
        raise TypeError(f"{what} must be a list of Python inputs; Model packs its own "
                        "batches")
    inputs = x if isinstance(x, list) else list(x)
    if not inputs:
        raise ValueError(f"{what} is empty: give at least one input")
    return inputs


def split_validation(data) -> tuple:
    """`(x, y)` or `(x, y, sample_weight)` tuples; a list is Fold-style inputs only."""
    if isinstance(data, tuple):
        if len(data) not in (2, 3):
            raise ValueError("validation_data must be (x, y), (x, y, sample_weight) or a list "
                             f"of inputs, got a tuple of {len(data)}")
        return data[0], data[1], data[2] if len(data) == 3 else None
    return data, None, None


def hold_out(n: int, fraction) -> int:
    """Where `fit(validation_split=fraction)` splits `n` inputs: the last `fraction`
    is held out for validation (Keras: `floor(n * (1 - fraction))`)."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
            or not 0 < fraction < 1:
        raise ValueError(f"validation_split must be a fraction in (0, 1), got {fraction!r}")
    split_at = int(math.floor(n * (1.0 - fraction)))  # < n: one input held out at least
    if split_at == 0:
        raise ValueError(f"validation_split={fraction} of {n} inputs leaves nothing to "
                         "train on")
    return split_at


def class_weights(y, class_weight: dict) -> np.ndarray:
    """Per-input sample weights from `class_weight` (`{class id: weight}`): the class
    of a row of `y` is its id, or its argmax when it is a one-hot row; classes not in
    `class_weight` weigh 1, as in Keras."""
    if y is None:
        raise ValueError("class_weight needs labels y")
    if not isinstance(class_weight, dict):
        raise TypeError(f"class_weight must be a dict {{class id: weight}}, got "
                        f"{type(class_weight).__name__}")
    for k, v in class_weight.items():
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"class_weight keys must be class ids (ints >= 0), got {k!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) \
                or not np.isfinite(v) or v < 0:
            raise ValueError(f"class_weight[{k}] must be a finite number >= 0, got {v!r}")
    y = np.asarray(y)
    if y.ndim > 1 and y.shape[-1] != 1:
        ids = np.argmax(y, axis=-1)
    else:
        ids = y.reshape(len(y), *y.shape[1:-1]) if y.ndim > 1 else y
    ids = np.round(ids).astype(np.int64).reshape(len(y), -1)[:, 0]
    table = np.ones(max(class_weight, default=0) + 1, np.float32)
    for k, v in class_weight.items():
        table[k] = v
    weights = np.ones(len(ids), np.float32)
    listed = (ids >= 0) & (ids < len(table))
    weights[listed] = table[ids[listed]]
    return weights


def check_batch_size(batch_size) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
