"""`Unfold`: a computation that runs step by step, each step chosen from the values
of the steps before it (greedy decoding, transition systems).

Every other block's structure follows from its input alone. An `Unfold` runs its
`step` block again and again on a *state* (tensors, carried on the device) and a
*configuration* (any Python object: the tokens emitted so far, a parser's stack
and buffer). After each step, Python reads the values of the step's output and
`decide(config, values)` returns the next configuration; the loop ends when
`done(config)` holds or after `max_steps` steps. `Unfold` is `Fold` run the other
way: it builds a sequence from a seed instead of consuming one.

A step's tensor work is ordinary ops, so the engine batches it across the examples
of a batch (and across the nodes of each); only the decision is Python. Batched,
the examples advance in *rounds*, one step each per round, and each round is one
engine call for the whole batch (`compiler.rounds.context`). Gradients flow through every
step taken: once the decisions are known, the steps taken are an ordinary op graph.

Where the device can decide (an argmax, a table lookup as a `Function`), feed the
decision back in the state instead of the configuration and set `lookahead=k`: the
step then gets no configuration, and the engine runs k steps per round, dropping
those after `done`. Where `decide` needs no values at all (teacher forcing),
`reads_values=False` makes the block expand without rounds. Why rounds and not a
decision inside the engine's loop: the loop runs a graph planned in Python before
it starts, one traced program for every batch; structure decided inside it would
need another engine, while rounds reuse this one unchanged.

>>> import tensorflow as tf
>>> import refold as td
>>> step = td.GetItem(0) >> td.Function(lambda s: 2.0 * s) >> td.AllOf(
...     td.Identity(), td.Identity())             # (state, config) -> (state', output)
>>> doubling = td.Unfold(step, decide=lambda config, out: float(out),
...                      done=lambda config: config > 10.0, max_steps=8)
>>> block = td.AllOf(td.Scalar(), td.Identity()) >> doubling
>>> outputs, state, config = block.eval(3.0)       # 3 -> 6 -> 12, then done
>>> [float(o) for o in outputs], float(state), config
([6.0, 12.0], 12.0, 12.0)
>>> block.output_type
TupleType(SequenceType(TensorType((), 'float32')), TensorType((), 'float32'), PyObjectType())
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from refold.blocks.block import PY, Block, bad_input
from refold.blocks.composition import convert_to_block
from refold.blocks.evaluation.dataflow import DataFlow
from refold.blocks.types import PyObjectType, SequenceType, TupleType


class Unfold(Block):
    """Runs `step` until `done(config)` or `max_steps`; Python decides between steps.

    Per example, with input `(state, config)`:

        outputs = []
        while len(outputs) < max_steps and not done(config):
            state, out = step((state, config))
            outputs.append(out)
            config = decide(config, values of out)
        return (outputs, state, config)

    Types: input `(S, PyObject)`; `step` takes `(S, PyObject)` and returns
    `(S, O)`; the output is `(Sequence(O), S, PyObject)`. `S` and `O` are any
    types; `decide` gets `O`'s value with numpy arrays in place of tensors.

    Args:
        step: the block run at each step (block-like values allowed).
        decide: `decide(config, out_values) -> next config`, a Python function.
        max_steps: the most steps an example takes (a positive int); an example
            whose `done` never holds stops there.
        done: `done(config) -> bool`, checked before every step (None: never done,
            so every example takes `max_steps` steps).
        reads_values: False when `decide` ignores the values (teacher forcing: it
            is given None). The structure then follows from the input, so the
            compiler expands the block as any other, without rounds, and caches it.
        lookahead: with k > 1 the step is not given the configuration (it gets
            None), so its structure cannot depend on the decisions: what it feeds
            back travels in the state, on the device (a token as a tensor, an
            argmax in a `Function`). Batched, an example then takes k steps per
            round before Python reads their values, and the steps after the one
            where it is done are dropped: ceil(T / k) rounds for T steps, for up to
            k - 1 steps computed in vain per example. `lookahead=max_steps`
            decodes in one round, every decision made on the device.
    """

    _expected_input_types = (TupleType,)
    _expected_output_types = (TupleType,)

    def __init__(self, step: Any, decide: Callable[[Any, Any], Any], max_steps: int,
                 done: Callable[[Any], bool] | None = None, reads_values: bool = True,
                 lookahead: int = 1, name: str | None = None):
        if not callable(decide):
            raise TypeError(f"decide is not callable: {decide!r}")
        if done is not None and not callable(done):
            raise TypeError(f"done is not callable: {done!r}")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        if isinstance(lookahead, bool) or not isinstance(lookahead, int) or lookahead < 1:
            raise ValueError(f"lookahead must be a positive int, got {lookahead!r}")
        self.lookahead = lookahead
        if not isinstance(reads_values, bool):
            raise TypeError(f"reads_values must be True or False, got {reads_values!r}")
        self.reads_values = reads_values  # if so, the compiler expands in rounds
        self._decide = decide
        self._done = done
        self.max_steps = max_steps
        super().__init__([convert_to_block(step)], name=name)

    @property
    def step_block(self) -> Block:
        return self._children[0]

    def _child_key(self, child):
        return ".step"

    def _repr_args(self):
        return {"max_steps": self.max_steps, "reads_values": self.reads_values,
                "lookahead": self.lookahead}

    def infer_types(self):
        step = self._children[0]
        state = config = out = None
        t = self.input_type
        if t is not None:
            self._check_pair(t, "input")
            state, config = t[0], t[1]
        if self.output_type is not None:
            o = self.output_type
            if len(o) != 3 or not isinstance(o[0], SequenceType) \
                    or not isinstance(o[2], PyObjectType):
                raise TypeError(f"{self.path}: bad output type {o}: expected "
                                "(SequenceType, state type, PyObjectType())")
            out, state = o[0].element_type, _known(state, o[1])
        if step.input_type is not None:
            self._check_pair(step.input_type, "step input")
            state = _known(state, step.input_type[0])
        if step.output_type is not None:
            so = step.output_type
            if not isinstance(so, TupleType) or len(so) != 2:
                raise TypeError(f"{step.path}: the step must output (state, output), "
                                f"got {so}")
            state, out = _known(state, so[0]), _known(out, so[1])
        config = PY
        if state is not None:
            pair = TupleType(state, config)
            self.set_input_type(pair)
            step.set_input_type(pair)
            if out is not None:
                step.set_output_type(TupleType(state, out))
                self.set_output_type(TupleType(SequenceType(out), state, config))

    def _check_pair(self, t, what: str) -> None:
        if not isinstance(t, TupleType) or len(t) != 2 or not isinstance(t[1], PyObjectType):
            raise TypeError(f"{self.path}: bad {what} type {t}: expected "
                            "(state type, PyObjectType()) with the configuration second")

    def evaluate(self, ctx, x):
        if self.reads_values and hasattr(ctx, "walk") and self._walkable():
            # the batching context drives the walk across its rounds
            return ctx.walk(self._walk(ctx, x))
        walk = self._walk(ctx, x)
        try:
            request = next(walk)
            while True:
                request = walk.send(ctx.read(*request))
        except StopIteration as finished:
            return finished.value

    def dataflow(self) -> DataFlow:
        """Anything inside may feed anything: the state goes round."""
        return DataFlow.opaque(self)

    def _walk(self, ctx, x):
        """The loop, as a generator: it yields each `(value type, value)` whose values
        `decide` needs and is sent them back (one read per step, or per `lookahead`
        steps), and returns `(outputs, state, config)`. Whoever drives it reads the
        values: `evaluate` through `ctx.read`, a batching context through its rounds
        (`ctx.walk`). Steps after the one where the walk ends are rewound
        (`ctx.mark`, `ctx.rewind`)."""
        state, config = x
        step = self._children[0]
        out_type = step.output_type[1]
        ahead = self.lookahead if self.reads_values and hasattr(ctx, "rewind") else 1
        outputs = []
        finished = len(outputs) >= self.max_steps or self._is_done(config)
        while not finished:
            if ahead == 1:
                step_config = None if self.lookahead > 1 else config
                state, out = step.eval_in(ctx, (state, step_config))
                outputs.append(out)
                values = (yield out_type, out) if self.reads_values else None
                config = self._decide(config, values)
                finished = len(outputs) >= self.max_steps or self._is_done(config)
                continue
            k = min(ahead, self.max_steps - len(outputs))
            steps = []  # (state, out, the context's mark after the step)
            s = state
            for _ in range(k):
                s, out = step.eval_in(ctx, (s, None))
                steps.append((s, out, ctx.mark()))
            values = yield TupleType(*[out_type] * k), tuple(o for _, o, _ in steps)
            for (s, out, mark), v in zip(steps, values):
                state = s
                outputs.append(out)
                config = self._decide(config, v)
                finished = len(outputs) >= self.max_steps or self._is_done(config)
                if finished:
                    ctx.rewind(mark)
                    break
        return outputs, state, config

    def _walkable(self) -> bool:
        """Whether a batching context may drive this walk from outside the example's
        evaluation: not if its step holds another block that reads values (that one
        needs the example's own evaluation to wait for its rounds)."""
        known = self.__dict__.get("_walkable_cache")
        if known is None:
            known = self._walkable_cache = not _reads_values_inside(self._children[0])
        return known

    def _is_done(self, config) -> bool:
        if self._done is None:
            return False
        verdict = self._done(config)
        try:
            return bool(verdict)
        except Exception:
            raise bad_input(self, f"done(config) returned {verdict!r:.60}, which is "
                                  "not a truth value") from None


def _reads_values_inside(block: Block) -> bool:
    """Whether `block` or a block inside it (through forward declarations too) is a
    value-reading `Unfold`."""
    seen: set[int] = set()
    todo = [block]
    while todo:
        b = todo.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        if isinstance(b, Unfold) and b.reads_values:
            return True
        todo.extend(b.children)
        if b.is_forward_declaration_ref() and b.declaration.target is not None:
            todo.append(b.declaration.target)
    return False


def _known(a, b):
    """`a` if it is known (not None), else `b`."""
    return b if a is None else a


__all__ = ["Unfold"]
