"""The `Block` base class: typed input and output, a parent, a path, and evaluation.

Type inference is eager and incremental. Each block (and each `Layer` and
`ForwardDeclaration`) holds an input type and an output type, each unknown
(`None`) until something determines it; once set, a type never changes, and
setting a different one raises a `TypeError` that names the block path and
shows the expected and the actual type. Whenever one of a block's types is
learned, the block's `infer_types()` runs, and so does its parent's; `infer_types`
holds the whole type logic of a block in one place and pushes whatever the known types
imply to the block itself and to its children. Because types only ever go from
unknown to known, propagation terminates.

>>> from refold.blocks import InputTransform, Scalar, Map, Length
>>> m = InputTransform(sorted) >> Map(Scalar()) >> Length()
>>> m.children[1].input_type
SequenceType(TensorType((), 'float32'))
"""

from __future__ import annotations

import functools
import itertools
import threading
import warnings
from collections.abc import Iterable
from typing import Any

from refold.blocks.errors import InputError, InputKeyError, InternalError
from refold.blocks.op import Op
from refold.blocks.serialization import registry
from refold.blocks.types import (
    PyObjectType,
    ResultType,
    TupleType,
    canonicalize_type,
    convert_to_type,
    first_difference,
)


def _class_names(classes: Iterable[type]) -> str:
    return " or ".join(c.__name__ for c in classes)


# --- provenance: how each block was made, for saving (`blocks.serialization.config`) ---------

_made = threading.local()        # .stack: the blocks (and factory calls) being built
_serial = itertools.count()      # creation order of blocks and factory calls


def _making() -> list:
    return _made.__dict__.setdefault("stack", [])


def provenance(obj: IOBase) -> tuple[Any, FactoryCall | None]:
    """How `obj` was made, for saving it (`blocks.serialization`): what was being
    built when it was (a block, a `FactoryCall`, or None) and the factory call that
    returned it (or None)."""
    return obj._made_inside, obj._factory_call


class FactoryCall:
    """One call of a function that builds a block (`@block_factory`): the blocks it
    made are rebuilt by calling it again, and `result` is what it returned."""

    def __init__(self, fn, args: tuple, kwargs: dict):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.serial = next(_serial)
        stack = _making()
        self.made_inside = stack[-1] if stack else None
        self.result = None


def block_factory(fn):
    """Marks a function that returns a new block (`td.Scalar`, `models.encoders.*`):
    the block remembers the call, so saving it stores the call (the function by its
    importable name and the arguments) instead of the blocks inside, which a
    factory may make with functions defined in its body."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        record = FactoryCall(call, args, kwargs)
        stack = _making()
        stack.append(record)
        try:
            result = fn(*args, **kwargs)
        finally:
            stack.pop()
        if isinstance(result, IOBase) and result._serial >= record.serial:
            record.result = result
            result._factory_call = record
        return result

    registry.register_own(call)
    return call


def _record_construction(init):
    """Wraps a subclass's `__init__` so that blocks made while it runs know they were
    made inside this one (a constructor remakes them when the block is loaded)."""

    @functools.wraps(init)
    def wrapped(self, *args, **kwargs):
        stack = _making()
        outer = not stack or stack[-1] is not self
        if outer:
            stack.append(self)
        try:
            init(self, *args, **kwargs)
        finally:
            if outer:
                stack.pop()

    return wrapped


# (old name, new name): the hooks' names until 0.2, which subclasses may still override
_OLD_HOOKS = (("_evaluate", "evaluate"), ("_infer", "infer_types"), ("_eval", "eval_in"))


def _adopt_old_hooks(cls: type) -> None:
    """Lets a class written for the names until 0.2 (`_evaluate`, `_infer`) work.

    A class that overrides an old name gets it under the new one too and a
    `DeprecationWarning` naming the class, once, when it is defined; if it
    evaluates by the old name and declares no data flow, the compiler assumes
    anything inside it may feed anything (`DataFlow.opaque`), as it used to. A class
    that overrides a new name gets it under the old one too, so that old callers
    (`super()._infer()`) reach it. Nothing of this runs per call.
    """
    own = cls.__dict__
    for old, new in _OLD_HOOKS:
        if old in own and new not in own:
            setattr(cls, new, own[old])
            extra = ""
            if old == "_evaluate" and "dataflow" not in own:
                from refold.blocks.evaluation.dataflow import opaque_rule
                cls.dataflow = opaque_rule
                extra = ("; until it declares dataflow(), the compiler assumes anything "
                         "inside it may feed anything")
            warnings.warn(
                f"{cls.__module__}.{cls.__qualname__} overrides {old}, which was renamed "
                f"{new} in refold 0.2 and will stop working in 0.3: rename it{extra} "
                "(docs/guide/extending.md)", DeprecationWarning, stacklevel=3)
        elif new in own and old not in own:
            setattr(cls, old, own[new])


class IOBase:
    """Anything with an input type and an output type that inference can set.

    Every instance remembers the arguments it was constructed with and what was
    being built when it was made: `blocks.serialization.config` saves a block expression
    as those constructor calls (`get_config`), as Keras saves a layer.
    """

    _expected_input_types: tuple[type, ...] = (ResultType,)
    _expected_output_types: tuple[type, ...] = (ResultType,)

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._init_args = (args, kwargs)
        self._serial = next(_serial)
        stack = _making()
        self._made_inside = stack[-1] if stack else None
        self._factory_call = None
        return self

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        registry.register_own(cls)
        if "__init__" in cls.__dict__:
            cls.__init__ = _record_construction(cls.__dict__["__init__"])
        _adopt_old_hooks(cls)

    def get_config(self) -> dict:
        """The arguments this object was constructed with, by parameter name (blocks,
        layers, functions and types among them are encoded by
        `blocks.serialization.config`). A class whose state is not its constructor's
        arguments overrides it and `from_config`."""
        import inspect
        args, kwargs = self._init_args
        bound = inspect.signature(type(self).__init__).bind(self, *args, **kwargs)
        bound.apply_defaults()
        config = dict(bound.arguments)
        config.pop(next(iter(config)))  # self
        return config

    @classmethod
    def from_config(cls, config: dict):
        """An instance made from `get_config()`'s arguments (decoded)."""
        import inspect
        args, kwargs = [], {}
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        star = any(p.kind is p.VAR_POSITIONAL for p in params)
        for p in params:  # positional up to *args (if any), keywords after
            if p.name not in config:
                continue
            value = config[p.name]
            if p.kind is p.VAR_POSITIONAL:
                args.extend(value)
                star = False
            elif p.kind is p.VAR_KEYWORD:
                kwargs.update(value)
            elif p.kind is p.POSITIONAL_ONLY or star:
                args.append(value)
            else:
                kwargs[p.name] = value
        return cls(*args, **kwargs)

    def __init__(self, input_type: Any = None, output_type: Any = None, name: str | None = None):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string, got {name!r}")
        self._name = name
        self._input_type: ResultType | None = None
        self._output_type: ResultType | None = None
        self._input_classes = type(self)._expected_input_types
        self._output_classes = type(self)._expected_output_types
        self.set_input_type(input_type)
        self.set_output_type(output_type)

    # --- naming --------------------------------------------------------------------------

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def label(self) -> str:
        """How this block is named in a block path: `Function 'cell'`.

        >>> from refold.blocks import Function
        >>> Function(abs, name="cell").label
        "Function 'cell'"
        """
        return self._label()

    def _label(self) -> str:
        """`label`; overridden where a class names itself otherwise."""
        label = getattr(self, "_constructor_name", type(self).__name__)
        return label if self._name is None else f"{label} {self._name!r}"

    def _path_parent(self) -> tuple[IOBase, str | None] | None:
        """The container this block sits in and the key under which it sits there
        (None: the container is not shown, the block's own name says where it is)."""
        return None

    def _named(self) -> bool:
        """Whether this block's label carries a name the user gave (`Function 'cell'`,
        `GetItem('upos')`): then a pipe it sits in need not show its position."""
        return self._name is not None

    @property
    def path(self) -> str:
        """Where this block sits in the expression: `Pipe[2] > Map > Function 'cell'`."""
        parts = [self._label()]
        node, seen = self, {id(self)}
        while (up := node._path_parent()) is not None:
            node, key = up
            if id(node) in seen:  # a recursive definition: stop at the cycle
                break
            seen.add(id(node))
            if key is not None:
                parts.append(node._label() + key)
        return " > ".join(p for p in reversed(parts) if p)  # placeholders have no label

    # --- types ---------------------------------------------------------------------------

    @property
    def input_type(self) -> ResultType | None:
        """The type this block reads; None until inference or its neighbours fix it."""
        return self._input_type

    @property
    def output_type(self) -> ResultType | None:
        """The type this block gives; None until inference or its neighbours fix it."""
        return self._output_type

    def set_input_type(self, input_type: Any) -> IOBase:
        """Sets the input type (shorthand allowed); `None` does nothing. Returns self."""
        return self._set_type("input", input_type)

    def set_output_type(self, output_type: Any) -> IOBase:
        """Sets the output type (shorthand allowed); `None` does nothing. Returns self."""
        return self._set_type("output", output_type)

    def set_io_types(self, other: IOBase) -> IOBase:
        """Gives this block the input and output types of `other`."""
        self.set_input_type(other.input_type)
        self.set_output_type(other.output_type)
        return self

    def _set_type(self, which: str, t: Any) -> IOBase:
        if t is None:
            return self
        t = canonicalize_type(convert_to_type(t))
        old = getattr(self, f"_{which}_type")
        if old is not None:
            if old != t:
                raise TypeError(f"{self.path}: {which} type mismatch: "
                                f"{first_difference(old, t)}; the whole types: expected "
                                f"{old}, got {t}")
            return self
        allowed = getattr(self, f"_{which}_classes")
        if not isinstance(t, allowed):
            raise TypeError(
                f"{self.path}: bad {which} type {t}: expected {_class_names(allowed)}")
        setattr(self, f"_{which}_type", t)
        setattr(self, f"_{which}_classes", (type(t),))
        self._types_changed()
        return self

    @property
    def input_type_classes(self) -> tuple[type, ...]:
        """The classes the input type may have: its own class once it is known."""
        return self._input_classes

    @property
    def output_type_classes(self) -> tuple[type, ...]:
        """The classes the output type may have: its own class once it is known."""
        return self._output_classes

    def set_input_type_classes(self, *classes: type) -> IOBase:
        """Restricts the classes the input type may have (e.g. `TupleType`)."""
        return self._restrict("input", classes)

    def set_output_type_classes(self, *classes: type) -> IOBase:
        """Restricts the classes the output type may have."""
        return self._restrict("output", classes)

    def _restrict(self, which: str, classes: tuple[type, ...]) -> IOBase:
        old = getattr(self, f"_{which}_classes")
        new = [c for c in classes if issubclass(c, old)]
        new += [c for c in old if issubclass(c, classes)]
        if not new:
            raise TypeError(
                f"{self.path}: bad {which} type {_class_names(classes)}: "
                f"expected {_class_names(old)}")
        setattr(self, f"_{which}_classes", tuple(dict.fromkeys(new)))
        return self

    def _types_changed(self) -> None:
        """Runs inference here and in whatever contains this block."""
        self.infer_types()
        self._notify_container()

    def _notify_container(self) -> None:
        for container in self._containers():
            container.infer_types()

    def _containers(self) -> tuple[IOBase, ...]:
        """Whatever holds this block and must re-run inference when its types change."""
        return ()

    def infer_types(self) -> None:
        """Pushes what the known types imply: the hook that holds a block's type logic.

        Contract: it runs whenever one of this block's types, or a child's, becomes
        known, so it may run many times and with any subset of the types known. It
        reads the types known so far (`input_type`, `output_type`, the children's)
        and sets what they imply with `set_input_type` / `set_output_type` on this
        block and its children; it never unsets a type, and raises `TypeError`
        (naming `self.path`) when two types disagree. Setting a type runs inference
        again where it changed, so one step at a time is enough. Does nothing by
        default (a block whose types are fixed sets them in `__init__`).

        >>> import refold as td
        >>> class Pair(td.Block):  # x -> (x, x), for any type x
        ...     def infer_types(self):
        ...         t = self.input_type
        ...         if t is not None:
        ...             self.set_output_type(td.TupleType(t, t))
        >>> (td.Scalar() >> Pair()).output_type
        TupleType(TensorType((), 'float32'), TensorType((), 'float32'))
        """

    _infer = infer_types  # its name until 0.2, deprecated (see `_adopt_old_hooks`)


class Block(IOBase):
    """Base class of all blocks.

    A block maps one input (a Python object, a tensor, a tuple, a sequence) to one
    output. Blocks compose with `>>` (`a >> b` feeds `a`'s output to `b`), with
    `Record`, `AllOf`, `Map`, `Fold`, ..., and inside a `Composition` with `.reads()`.
    Each block instance has at most one parent: weights are shared through layers,
    not by reusing blocks. `block.eval(x)` runs the reference evaluator. To write a
    new block, override `infer_types` (or set the types once), `ops`, `evaluate`
    and, if it has children, `dataflow`; `blocks.op` has a worked example.
    """

    # Makes numpy defer `array >> block` to `Block.__rrshift__` instead of shifting
    # element by element.
    __array_ufunc__ = None

    def __init__(self, children: Iterable[Block] = (), input_type: Any = None,
                 output_type: Any = None, name: str | None = None):
        self._parent: Block | None = None
        self._owner: IOBase | None = None  # the ForwardDeclaration this block resolves
        self._children: list[Block] = []
        super().__init__(None, None, name)
        for child in children:
            self._add_child(child)
        if self._children:  # children made earlier may already know their types
            self.infer_types()
        self.set_input_type(input_type)
        self.set_output_type(output_type)

    # --- structure -------------------------------------------------------------------

    @property
    def parent(self) -> Block | None:
        return self._parent

    @property
    def children(self) -> list[Block]:
        return list(self._children)

    def _add_child(self, child: Block) -> Block:
        if not isinstance(child, Block):
            raise TypeError(f"{self.path}: child is not a block: {child!r}")
        if child._parent is not None:  # elsewhere, or twice in this block
            raise TypeError(
                f"block {child!r} is already a child of {child._parent!r} "
                f"(at {child.path}); a block can be used in one place only. "
                "To share weights, use the same layer in two blocks.")
        child._parent = self
        self._children.append(child)
        return child

    def _containers(self):
        return tuple(c for c in (self._parent, self._owner) if c is not None)

    def _path_parent(self):
        if self._parent is not None:
            return self._parent._locate_child(self)
        if self._owner is not None:
            return self._owner, ""
        return None

    def _locate_child(self, child: Block) -> tuple[IOBase, str | None]:
        """The container shown in `child`'s path and the key that tells it apart there."""
        return self, self._child_key(child)

    def child_key(self, child: Block) -> str:
        """How `child` is told apart from its siblings in a block path (`[2]`,
        `['left']`, `.combine`; empty where one child needs no key)."""
        return self._child_key(child)

    def _child_key(self, child: Block) -> str:
        """`child_key`; overridden by blocks with several children."""
        return ""

    def is_forward_declaration_ref(self) -> bool:
        return False

    # --- repr ---------------------------------------------------------------------------

    def _repr_args(self) -> dict[str, Any]:
        """Constructor arguments shown by `repr` (sorted by name)."""
        return {}

    def __repr__(self) -> str:
        label = getattr(self, "_constructor_name", type(self).__name__)
        parts = [f"<td.{label}"]
        if self._name is not None:
            parts.append(repr(self._name))
        for k, v in sorted(self._repr_args().items()):
            parts.append(f"{k}={v!r}")
        return " ".join(parts) + ">"

    # --- composition ------------------------------------------------------------------

    def __rshift__(self, rhs: Any) -> Block:
        from refold.blocks.composition import Pipe
        return Pipe(self, rhs, _from_rshift=True)

    def __rrshift__(self, lhs: Any) -> Block:
        from refold.blocks.composition import Pipe
        return Pipe(lhs, self, _from_rshift=True)

    def reads(self, *others: Any) -> Block:
        """Inside `Composition.scope()`: this block reads the outputs of `others`."""
        from refold.blocks.composition import current_composition
        comp = current_composition()
        if comp is None:
            raise ValueError(f"{self.path}: reads() was called outside of a Composition scope")
        comp.connect(others[0] if len(others) == 1 else others, self)
        return self

    def __getitem__(self, key: Any):
        """`block[i]` is a wire to the i-th item of the output (for `reads`/`connect`);
        `block[a:b]` is a `GetItem` block reading this block (inside a scope)."""
        from refold.blocks.composition import Wire, current_composition
        if isinstance(key, slice):
            comp = current_composition()
            if comp is None:
                raise ValueError(
                    f"{self.path}: slicing a block's output needs a Composition scope")
            from refold.blocks.inputs import GetItem
            return GetItem(key).reads(self)
        return Wire(self, key)

    # --- evaluation ---------------------------------------------------------------------

    def ops(self) -> list[Op]:
        """The ops this block's `evaluate` may call through `ctx.op`; none by default.

        Every op must be declared here: the batching engine lowers a block expression
        to its ops before it sees any input, by asking each block, and refuses an op
        that was not declared (`compiler.graphs.lowering.UnloweredOpError`). It is called
        once the block's types are known (after `validate`). See `blocks.op` for how
        to write a new block.
        """
        return []

    def weights(self) -> list:
        """The Keras layers and variables this block's ops compute with; none by default.

        `compiler.Model` trains, checkpoints and saves what the blocks of its
        expression return here (a `keras.layers.Layer` or a `keras.Variable`), so a
        block that owns weights returns them (see `blocks.op`).
        """
        return []

    def evaluate(self, ctx, x):
        """Evaluates this block on one input: the hook every block overrides.

        Contract: `x` is one input of `input_type`, in the context's handles (a tensor
        is a handle; tuples, lists and Python objects hold handles). The block
        returns its output the same way, computing only through the context:
        `ctx.op(op, args)` for an op it declares in `ops()` (it returns the op's
        outputs as a list of handles), `ctx.constant` / `ctx.number` for constants,
        `ctx.metric` for metrics, `child.eval_in(ctx, value)` for a child. It never
        looks inside a handle (`ctx.read` is for blocks whose structure depends on
        computed values, `td.Unfold`), so the same code runs in `block.eval` (handles
        are eager tensors), in `max_depth` and in the batching engine (handles are
        node ids). A bad input raises `bad_input(self, reason)`; any other error is
        named by the block path where it happened (`eval_in`).

        >>> import refold as td
        >>> import tensorflow as tf
        >>> class Negate(td.Block):
        ...     def __init__(self):
        ...         super().__init__(input_type=td.TensorType(()),
        ...                          output_type=td.TensorType(()))
        ...         self.op = td.Op("negate", lambda x: [-x], [self.input_type],
        ...                         [self.output_type])
        ...     def ops(self):
        ...         return [self.op]
        ...     def evaluate(self, ctx, x):
        ...         return ctx.op(self.op, [x])[0]
        >>> float((td.Scalar() >> Negate()).eval(2))
        -2.0
        """
        raise NotImplementedError(f"{self.path}: {type(self).__name__} does not define "
                                  "evaluate(ctx, x)")

    def eval_in(self, ctx, x):
        """Evaluates this block on `x` in a parent's (or an engine's) context `ctx`:
        how a block evaluates a child, and an engine the root.

        It is `evaluate(ctx, x)`, with any error that escapes it named by this
        block's path: an `InputError` passes as it is (it names the innermost block
        already), any other error (a user function's, a TF op's) becomes an
        `InputError` naming this block (`raise_named`). Not meant to be overridden.

        Blocks that evaluate children on every node (`Pipe`, `Record`, `OneOf`, a
        forward declaration) inline it: `try: child.evaluate(ctx, x)` and
        `except Exception as e: raise_named(child, e, x)` is the same, one Python
        frame fewer per block and node.

        >>> import refold as td
        >>> from refold.blocks.evaluation.contexts import ReferenceContext
        >>> td.Length().eval_in(ReferenceContext(), [1, 2, 3])
        <tf.Tensor: shape=(), dtype=float32, numpy=3.0>
        >>> td.Length().eval_in(ReferenceContext(), 7)
        Traceback (most recent call last):
        ...
        refold.blocks.errors.InputError: Length: expected something with a length, got 7
        """
        try:
            return self.evaluate(ctx, x)
        except Exception as e:
            raise_named(self, e, x)

    # The names until 0.2, deprecated: a subclass overriding `_evaluate` warns once,
    # when it is defined (`_adopt_old_hooks`); they are the very function objects, so
    # old callers cost nothing more.
    _evaluate = evaluate
    _eval = eval_in

    def dataflow(self):
        """Which parts of this block may read which: how the compiler learns where
        values flow inside it (a `blocks.evaluation.dataflow.DataFlow`).

        The compiler runs an op before its loop when no op inside the loop can feed
        it (`compiler.graphs.op_feeds`); each block says what its `evaluate` may
        pass where: its input, its children (what `eval_in` returned), its ops'
        outputs and its output are the parts. Contract: every value `evaluate` can
        pass to a child, to an op or to its output comes only from the parts the
        declaration lists for that reader (a declaration that lists more is still
        correct; one that lists less is caught by the engine as an `EngineError`).

        The default: a block without children gets `DataFlow.leaf` (its ops read its
        input; its output is its input and its ops' outputs). A block with children
        must declare its own, and so must a subclass that overrides `evaluate` below
        the class that declared the rule it would inherit: the compiler refuses it
        with a `TypeError` naming the block path, never guessing.
        `DataFlow.opaque(self)` (anything inside may feed anything) is always correct.

        >>> import refold as td
        >>> class Twice(td.Block):  # x -> child(child(x))
        ...     def __init__(self, child):
        ...         super().__init__([child])
        ...     def infer_types(self):
        ...         (child,) = self.children
        ...         child.set_input_type(self.input_type)
        ...         self.set_input_type(child.input_type)
        ...         child.set_output_type(child.input_type)
        ...         self.set_output_type(child.output_type)
        ...     def evaluate(self, ctx, x):
        ...         (child,) = self.children
        ...         return child.eval_in(ctx, child.eval_in(ctx, x))
        ...     def dataflow(self):
        ...         (child,) = self.children
        ...         return td.DataFlow({child: [td.DataFlow.INPUT, child],
        ...                             td.DataFlow.OUTPUT: [child]})
        >>> float((td.Scalar() >> Twice(td.Function(lambda x: x + 1))).eval(1))
        3.0
        """
        from refold.blocks.evaluation.dataflow import DataFlow
        if self._children:
            raise TypeError(
                f"{self.path}: {type(self).__name__} has children but does not declare its "
                "data flow: override dataflow() to say which parts of it read which "
                "(return td.DataFlow.opaque(self) if unsure: it is always correct, though it "
                "may keep ops in the loop that could run before it); see "
                "docs/guide/extending.md")
        return DataFlow.leaf(self)

    def eval(self, inp: Any = None, tolist: bool = False, training: bool = False,
             seed: Any = None, example: int = 0):
        """Evaluates the block on one input with the reference evaluator
        (`blocks.evaluation.contexts.reference_eval`): op by op, eagerly, with no batching.
        On a large input (more than `blocks.evaluation.deferred.EAGER_OPS` op calls), the
        calls after those are deferred and run level by level, each op's ready nodes in
        one call, so that its time grows with the input's size and not with its calls
        into TensorFlow; the values are the same.

        In inference by default. `training=True` computes as a training step does
        (`blocks.evaluation.training_mode`): dropout drops, with masks drawn from `seed` (an int
        or a tuple of ints; a random one if None) and each random node's key,
        `(example, node)`, where `example` is the input's index in a batch
        (`blocks.noise`). A `Model`'s training step uses the seed `(model.seed,
        optimizer.iterations, replica)`; with those, the input at index `example`
        of a batch computes here what it does there.

        It is the oracle the batching engine (`compiler.Compiler`) is tested against
        and needs nothing of it; to run inputs as training does, batched, use
        `Compiler(block).run(inputs)` or `compiler.Model(block).predict`.

        Returns numpy arrays for tensors, tuples for tuples, lists for sequences, an
        `itertools.repeat` for a broadcast sequence, `None` for void, the object itself
        for a Python object output, and `(result, {metric_name: array})` when the
        expression emits metrics. `tolist=True` turns arrays into Python values.

        >>> from refold.blocks import Scalar, Function
        >>> import tensorflow as tf
        >>> float((Scalar() >> Function(tf.negative)).eval(3))
        -3.0
        """
        from refold.blocks.evaluation.contexts import reference_eval
        return reference_eval(self, inp, tolist=tolist, training=training, seed=seed,
                              example=example)

    def max_depth(self, inp: Any = None) -> int:
        """The number of dependent op layers this input needs (Fold's count).

        >>> from refold.blocks import Scalar
        >>> Scalar().max_depth(42)
        0
        """
        from refold.blocks.evaluation.contexts import max_depth
        return max_depth(self, inp)


def raise_named(block: Block, e: Exception, x: Any):
    """Raises what `block.eval_in` raises when its `evaluate(ctx, x)` raised `e` (call
    it in the `except` clause that caught `e`): an `InputError` as it is, an
    `InternalError` naming the innermost block, and any other error (a user
    function's, a TF op's) as an `InputError` naming `block`. An `InputError` notes
    `x`, so that it can say where in the example it happened (`InputError.locate_in`)."""
    if isinstance(e, InputError):
        e.note_input(x)
        raise  # the exception the caller is handling
    if isinstance(e, InternalError):
        if e.block_path is None:  # the innermost block: the one whose code failed
            e.block_path = block.path
        raise
    if isinstance(e, RecursionError):
        raise
    err = InputKeyError(block.path, f"missing key or index {e}") if isinstance(e, KeyError) \
        else InputError(block.path, f"{type(e).__name__}: {e}")
    err.note_input(x)
    raise err from e


def bad_input(block: IOBase, reason: str) -> InputError:
    """An `InputError` at `block` (for `evaluate` implementations to raise)."""
    return InputError(block.path, reason)


def tuple_or_none(types: list[ResultType | None]) -> TupleType | None:
    """A `TupleType` of `types`, or None while any is unknown."""
    return None if any(t is None for t in types) else TupleType(*types)


PY = PyObjectType()
