"""How a packed batch enters a traced step: as few tensors as the batch allows.

Every tensor handed to a traced function costs on every step, whatever its size:
converting it from NumPy, and matching it against the function's signature. A
packed batch with its labels is 5 to 8 small arrays (`compiler.feeding.packed`), most of
them int32 vectors. `Handoff` folds those into one int32 buffer, their sizes first:

    [size_0, ..., size_k-1, array_0..., array_1..., ...]

and the traced step cuts it back apart with one `tf.split`, so that a batch of
the TreeLSTM with its int32 labels enters as 2 tensors instead of 7. The other
arrays (float inputs, sample weights, labels of other dtypes or ranks) pass as
they are. The traced function takes the tensors as a flat list (`signature`),
so one trace serves every batch of the same layout, as before.

`call` then hands those tensors to the step's `ConcreteFunction` as they are: a
plain call would first bind them to its signature again, checking and casting each,
which `tensors` has already made right, a cost felt at small batches (BENCHMARKS.md,
"The hand-off outside the traced step").

>>> import numpy as np, tensorflow as tf
>>> spec = ({"index": tf.TensorSpec([None], tf.int32),
...          "consts_float32": tf.TensorSpec([None], tf.float32),
...          "batch_size": tf.TensorSpec([1], tf.int32)}, tf.TensorSpec([None], tf.int32))
>>> h = Handoff(spec)
>>> batch = ({"index": np.array([4, 5, 6], np.int32),
...           "consts_float32": np.array([0.5], np.float32),
...           "batch_size": np.array([1], np.int32)}, np.array([2], np.int32))
>>> tensors = h.tensors(batch)
>>> len(tensors), tensors[0].numpy().tolist()
(2, [1, 3, 1, 1, 4, 5, 6, 2])
>>> back = h.unfold(tensors)
>>> back[0]["index"].numpy().tolist(), back[0]["batch_size"].shape, back[1].numpy().tolist()
([4, 5, 6], TensorShape([1]), [2])
>>> step = tf.function(lambda *t: h.unfold(t)[0]["index"] * 2,
...                    input_signature=h.signature).get_concrete_function()
>>> h.call(step, tensors).numpy().tolist()
[8, 10, 12]
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from refold import compat


class Handoff:
    """The flat tensors a batch of one layout (`structure`, `TensorSpec`s) enters a
    traced step as, and the way back to that structure inside the trace."""

    def __init__(self, structure):
        self.structure = structure
        self.specs = tf.nest.flatten(structure)
        folded = [i for i, s in enumerate(self.specs)
                  if s.dtype == tf.int32 and s.shape.rank == 1]
        self.folded = folded if len(folded) > 1 else []
        self.kept = [i for i in range(len(self.specs)) if i not in self.folded]
        buffer = [tf.TensorSpec([None], tf.int32)] if self.folded else []
        self.signature = buffer + [self.specs[i] for i in self.kept]

    def tensors(self, batch) -> list:
        """The batch (NumPy arrays in `structure`) as the tensors `signature` lists."""
        flat = tf.nest.flatten(batch)
        out = []
        if self.folded:
            parts = [flat[i] for i in self.folded]
            sizes = np.array([len(p) for p in parts], np.int32)
            out.append(tf.constant(np.concatenate([sizes, *parts]).astype(np.int32,
                                                                         copy=False)))
        for i in self.kept:
            out.append(tf.constant(flat[i], dtype=self.specs[i].dtype))
        return out

    @staticmethod
    def call(fn, tensors: list):
        """`fn(*tensors)` for a `ConcreteFunction` traced on `signature`, without the
        binding of the tensors to its signature: they come from `tensors`, which
        gives each its spec's dtype (the traced step is chosen by the batch's
        signature, so the shapes match it too)."""
        return compat.call_flat(fn, tensors)

    def unfold(self, tensors):
        """Inside the trace: the tensors back in `structure`, with the static shapes
        of its specs."""
        tensors = list(tensors)
        flat = [None] * len(self.specs)
        if self.folded:
            buffer, k = tensors.pop(0), len(self.folded)
            parts = tf.split(buffer[k:], buffer[:k], num=k)
            for i, part in zip(self.folded, parts):
                part.set_shape(self.specs[i].shape)
                flat[i] = part
        for i, t in zip(self.kept, tensors):
            flat[i] = t
        return tf.nest.pack_sequence_as(self.structure, flat)
