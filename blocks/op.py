"""`Op`: one batched TensorFlow computation with a fixed tensor signature.

Blocks do not compute anything themselves: evaluating a block on an input calls
ops (one per `Function` block, layer or `FromTensor`) on tensor handles. An op's
function always works on *batches*: each input is a tensor `[batch, *shape]`, and
so is each output. The reference evaluator calls it with batch size 1; the
batching engine calls it once for every group of nodes it schedules together.

>>> import tensorflow as tf
>>> from refold.blocks.types import TensorType
>>> neg = Op("neg", lambda x: [tf.negative(x)], [TensorType(())], [TensorType(())])
>>> neg
Op('neg', (TensorType((), 'float32'),) -> (TensorType((), 'float32'),))

Writing a new block: subclass `Block`, set its types (in `__init__`, or in `infer_types`
when they depend on its neighbours), return the ops it calls from `ops()` and the
weights they use from `weights()` (what `compiler.Model` trains and saves), and
compute in `evaluate(ctx, x)` by asking the context for op calls on the handles
it is given. A block never touches tensors itself, so the same code runs in
`block.eval` (the reference evaluator: eager, op by op, one input) and batched in
`compiler.Compiler` and `compiler.Model`, which collect every block's `ops()`
before they see an input; an op called without being declared is refused there
(`compiler.graphs.lowering.UnloweredOpError`). Instances whose ops share an `Op.key`
run in one launch.

An op that draws random numbers (dropout) says so, `Op(..., random=True)`: each
of its nodes then gets a key of its own, `(example, node)` (`NODE_KEY`), which the
evaluators append to its inputs, so that its draws are the same in `block.eval`
and batched, and differ from node to node (`blocks.noise`).

>>> import refold as td, keras
>>> class Scale(td.Block):
...     # multiplies a vector by a learned vector, element by element
...     def __init__(self, size, name=None):
...         self.factor = keras.Variable(tf.fill([size], 2.0), name="factor")
...         vec = td.TensorType((size,))
...         super().__init__(input_type=vec, output_type=vec, name=name)
...         self._op = Op("scale", lambda x: [x * self.factor], [vec], [vec])
...
...     def ops(self):
...         return [self._op]
...
...     def weights(self):
...         return [self.factor]
...
...     def evaluate(self, ctx, x):
...         return ctx.op(self._op, [x])[0]
>>> block = td.Map(td.Vector(2) >> Scale(2)) >> td.Sum()
>>> block.eval([[1.0, -2.0], [0.5, 0.0]])
array([ 3., -4.], dtype=float32)
>>> block.max_depth([[1.0, -2.0], [0.5, 0.0]])    # scale, then one add
2
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from refold.blocks.types import TensorType

NODE_KEY = TensorType((2,), "int32")
"""The type of a random op's last input: per node, its example's index in the batch
and its number among that example's random nodes, in evaluation order."""


class IdRange:
    """An `Op.check` for an op whose first input is a scalar id into a table of
    `num_rows` rows (an embedding's lookup): it refuses ids outside `[0, num_rows)`.
    The engine checks all of a graph's ids at once in compiled code
    (`checks_pass`, in the compiler's expansion).

    >>> import numpy as np
    >>> IdRange(5, hint="wrap them instead")(np.array([0, 4, 5]))
    Traceback (most recent call last):
    ...
    refold.blocks.errors.BadValueError: id 5 is not in [0, 5) (wrap them instead)
    """

    def __init__(self, num_rows: int, hint: str = ""):
        self.num_rows = int(num_rows)
        self.hint = hint

    def __call__(self, ids, *others) -> None:
        import numpy as np

        from refold.blocks.errors import BadValueError
        ids = np.asarray(ids)
        bad = ids[(ids < 0) | (ids >= self.num_rows)]
        if bad.size:
            hint = f" ({self.hint})" if self.hint else ""
            raise BadValueError(f"id {bad.flat[0]} is not in [0, {self.num_rows}){hint}")


class Op:
    """A batched function from a flat list of tensors to a flat list of tensors.

    Args:
        name: a readable name, used in errors and statistics.
        fn: `fn(*inputs) -> list of outputs`, each a tensor `[batch, *type.shape]`.
            An op with no inputs is called as `fn(batch_size)` (a scalar int32 tensor)
            and must return tensors with that leading dimension.
        input_types: the `TensorType` of each input.
        output_types: the `TensorType` of each output.
        key: ops with equal keys compute the same function (e.g. one layer used by
            two blocks with the same signature) and may be batched together.
            Defaults to the op itself.
        cost: a hint for schedulers: cheap ops may run before heavy ones.
        check: optional `check(*input_rows)` on the numpy values of one call's
            inputs (for prelude-only ops, which read input data only); it raises
            `blocks.errors.BadValueError` for a value the op cannot take (say, an id
            beyond an embedding's rows, `IdRange`), so that the error names the block
            path before anything runs. It may be given the rows of many calls at
            once (the engine checks a graph's nodes of one op together), and must
            refuse them if it would refuse any of them alone.
        prelude_only: the op reads a variable sparsely (an embedding lookup), so it
            must run before the batching loop, on inputs that are all constants;
            inside the loop TensorFlow would keep a dense gradient per iteration.
        handles_empty: `fn` works on a batch of zero rows (and returns zero rows).
            The engine then runs its launches outside the loop unconditionally;
            otherwise each runs under a `tf.cond` that skips it when it has no
            nodes (BENCHMARKS.md, "The conds around the launches outside the loop").
        random: each node draws random numbers of its own (`blocks.noise`): `fn`
            gets one more input after the declared ones, the nodes' keys
            `[batch, 2]` int32 (`NODE_KEY`), which every evaluator appends to
            the arguments a block passes (`input_types` ends with `NODE_KEY`).
        traceable: `fn` is a layer's call, which runs nothing per call but
            TensorFlow ops; the reference evaluator may then call it traced
            (`blocks.evaluation.traced_ops`).
        pure: `fn` runs TensorFlow ops only, nothing in Python that must happen once
            per node (a layer, a TensorFlow function); on a large input the reference
            evaluator may then compute many nodes' rows in one call
            (`blocks.evaluation.deferred`). Defaults to `traceable`.
        weight_grads: optional `weight_grads(args, arg_grads)`: the gradients of the
            weights `fn` reads over a batch, `{variable.ref(): gradient}`, from its
            arguments and their gradients (None where it cannot tell), where those
            determine them (a recurrent cell's `h U`, whose input part `z` has the
            gradient of the product: `models.rnn_cells.ProjectedCell`). The engine
            then takes a loop op's weight gradients once per step without running
            the op again (`scheduler.executor`).
        side_by_side: `fn`'s output is its arguments, all of one type, laid one after
            another (`td.Concat` along their first axis, `td.Stack`). Outside the
            loop the engine then gathers their rows side by side into the output,
            one gather, instead of gathering each and calling `fn`.
    """

    def __init__(self, name: str, fn: Callable, input_types: Sequence[TensorType],
                 output_types: Sequence[TensorType], key: Hashable | None = None,
                 cost: float = 1.0, prelude_only: bool = False, check: Callable | None = None,
                 handles_empty: bool = False, random: bool = False, traceable: bool = False,
                 pure: bool | None = None, weight_grads: Callable | None = None,
                 side_by_side: bool = False):
        self.name = name
        self.fn = fn
        self.input_types = tuple(input_types) + ((NODE_KEY,) if random else ())
        self.output_types = tuple(output_types)
        for t in self.input_types + self.output_types:
            if not isinstance(t, TensorType):
                raise TypeError(f"op {name!r}: signature types must be TensorTypes, got {t}")
        if random and len(self.input_types) < 2:
            raise ValueError(f"op {name!r}: a random op needs an input (an op of none "
                             "runs once per example, so its nodes could not differ)")
        if random and prelude_only:
            raise ValueError(f"op {name!r}: a lookup (prelude_only) cannot be random")
        self.key = self if key is None else key
        self.random = random
        self.cost = cost
        self.prelude_only = prelude_only
        self.check = check
        self.handles_empty = handles_empty
        self.traceable = traceable
        self.pure = traceable if pure is None else pure
        self.weight_grads = weight_grads
        self.side_by_side = side_by_side

    def prelude_error(self) -> ValueError:
        """The error for a prelude-only op called on the output of another op (every
        evaluator raises the same one, so that `eval` refuses what training would)."""
        return ValueError(f"{self.name} looks up rows of a variable, so its input must come "
                          "from the input data (e.g. a Scalar), not from another op")

    def __repr__(self) -> str:
        return f"Op({self.name!r}, {self.input_types} -> {self.output_types})"
