"""`LossAndMetrics`: a `Model`'s loss of a packed batch and the metrics it reports.

The loss has two sources, which add up: Keras' loss of the labels
(`compile(loss=...)`, with the layers' weight penalties) and the block's own loss
terms (`td.Metric`s, by default those whose name ends with "loss"), each the mean
of its values in the batch. Every other `td.Metric` is reported as the mean of its
values. Under a `tf.distribute` strategy a replica's part of a batch gives its share
of each, so that the replicas' sum is the single-device figure
(`compiler.distribute.strategy`).

Apart from `Model` so that the Keras class holds the Keras hooks and this one what
the steps compute besides the forward pass.
"""

from __future__ import annotations

import warnings

import keras
import tensorflow as tf

from refold import compat
from refold.compiler.feeding.xla_buckets import metric_weights


class LossAndMetrics:
    """The loss terms and reported metrics of a `Model`'s block.

    Args:
        model: the `Model` (its compiled loss and metrics exist after `compile`).
        loss_metrics: names of the `td.Metric`s that are loss terms; None: those
            whose name ends with "loss".

    Attributes:
        loss_metrics: the loss terms' names; `loss_ids` their metric ids.
        trackers: a `keras.metrics.Mean` per reported block metric (all but one
            named "loss", which is Keras' total), of metric ids `tracked_ids`.
    """

    def __init__(self, model, loss_metrics=None):
        self.model = model
        names = model.program.metric_names
        if loss_metrics is None:
            loss_metrics = [n for n in names if n.endswith("loss")]
        unknown = sorted(set(loss_metrics) - set(names))
        if unknown:
            raise ValueError(f"loss_metrics {unknown} are not metrics of the block; its "
                             f"metrics are {names}")
        self.loss_metrics = list(loss_metrics)
        self.loss_ids = [names.index(n) for n in loss_metrics]
        self.trackers = [keras.metrics.Mean(name=n) for n in names if n != "loss"]
        self.tracked_ids = [m for m, n in enumerate(names) if n != "loss"]

    def total(self, x: dict, y, y_pred, sample_weight, values: dict):
        """The loss of one packed batch: Keras' loss of the labels (with the weight
        penalties) plus, for each loss metric, the mean of its values.

        Arrays packed as one replica's part of a global batch (`compiler.distribute.strategy`
        adds "global_batch_size" and "global_metric_counts") give that part's share
        instead, so that the sum of the shares over the replicas is the loss of the
        whole batch on one device: the labelled mean counts `n_part / n_global`, a
        metric loss divides its sum by its number of values in the global batch,
        and the weight penalties count once over all replicas.
        """
        model = self.model
        part = "global_batch_size" in x
        compiled = compat.compiled_loss(model)
        labelled = y is not None and compiled is not None
        terms = []
        if labelled and not part:
            terms.append(model.compute_loss(x=x, y=y, y_pred=y_pred,
                                            sample_weight=sample_weight))
        else:
            replicas = float(tf.distribute.get_strategy().num_replicas_in_sync) if part \
                else 1.0
            if labelled:
                # Keras divides a loss by the number of replicas under a strategy; undo
                # that to get the mean over this part's inputs, then weigh it
                n_part = tf.cast(x["batch_size"][0], tf.float32)
                n_global = tf.cast(x["global_batch_size"][0], tf.float32)
                share = compiled(y, y_pred, sample_weight) * replicas * n_part / n_global
                terms.append(tf.where(n_part > 0, share, 0.0))  # an empty part: none
            if model.losses:
                terms.append(tf.add_n([tf.cast(v, tf.float32) for v in model.losses])
                             / replicas)
        counts = tf.cast(x["global_metric_counts"], tf.float32) if part else None
        for m in self.loss_ids:
            v = tf.cast(values[m], tf.float32)
            count = counts[m] if part else tf.reduce_sum(metric_weights(x, m, tf.reshape(
                v, [-1]))) if "metric_counts" in x else tf.cast(tf.size(v), tf.float32)
            terms.append(tf.reduce_sum(v) / tf.maximum(count, 1.0))
        if not terms:
            return tf.constant(0.0)
        return tf.add_n(terms) if len(terms) > 1 else terms[0]

    def update(self, x: dict, y, y_pred, sample_weight, values: dict, loss) -> dict:
        """Updates every metric with one packed batch; the model's metric results.

        Keras' loss metric, the compiled metrics and the block's metrics."""
        model = self.model
        n = tf.cast(x["batch_size"][0], tf.float32)
        if "global_batch_size" in x:
            # a replica's share of the batch's loss: summed over the replicas these
            # updates give the batch's loss weighted by its inputs, as on one device
            replicas = float(tf.distribute.get_strategy().num_replicas_in_sync)
            loss = loss * replicas
            n = tf.cast(x["global_batch_size"][0], tf.float32) / replicas
        compat.loss_tracker(model).update_state(loss, sample_weight=n)
        compiled = compat.compiled_metrics(model)
        if y is not None and compiled is not None:
            compiled.update_state(y, y_pred, sample_weight)
        for tracker, m in zip(self.trackers, self.tracked_ids):
            v = tf.cast(tf.reshape(values[m], [-1]), tf.float32)
            tracker.update_state(v, sample_weight=metric_weights(x, m, v)
                                 if "metric_counts" in x else None)
        return model.get_metrics_result()

    def build_compiled(self, signature) -> None:
        """Builds the metrics given to `compile` for steps of `signature` (packed
        arrays, labels, sample weights), as Keras' `fit` does before its first step:
        built inside a traced step, their variables would make TensorFlow trace the
        step twice."""
        model = self.model
        metrics = compat.compiled_metrics(model)
        if metrics is None or metrics.built or len(signature) < 2 \
                or model.output_type_id is None:
            return
        out = model.block.output_type
        metrics.build(keras.KerasTensor(signature[1].shape, signature[1].dtype.name),
                      keras.KerasTensor((None, *out.shape), out.dtype))

    def check_labels(self, y, labels_in_x: bool = False) -> None:
        """Refuses a call with nothing to train on; warns of labels no loss reads."""
        compiled = compat.compiled_loss(self.model)
        if labels_in_x and compiled is not None:
            return  # a stream of (input, label) tuples
        if y is not None and compiled is None and self.loss_ids:
            warnings.warn("labels y are given but the model was compiled without a loss; "
                          "only the td.Metric losses train it", stacklevel=3)
        if not self.loss_ids and (y is None or compiled is None):
            raise ValueError(
                "nothing to train on: give labels y and compile(loss=...), or emit losses "
                "from the block with td.Metric blocks whose names end with 'loss' (its "
                f"metrics are {self.model.program.metric_names})")

    def logs(self, logs: dict, return_dict: bool):
        """A step's logs as `train_on_batch` returns them: a dict of floats, or the
        values in Keras' order."""
        logs = {k: float(v) for k, v in logs.items()}
        return logs if return_dict else compat.logs_in_order(self.model, logs)
