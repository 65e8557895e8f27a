"""Saving a block expression as a config and making it again: `serialize`, `deserialize`.

A block is saved as Keras saves a layer: its class and the arguments it was
constructed with (`IOBase.get_config`, recorded when it was made), each argument
encoded as JSON. Blocks, layers, Keras layers and variables are entries of one
table and arguments refer to them by index, so a layer used by two blocks is one
layer again after loading, and a `ForwardDeclaration`'s recursion is a reference
(its `resolve_to` runs once everything is made). A block made inside another
block's constructor or inside a factory (`@block_factory`: `td.Scalar`,
`models.encoders.tree_encoder`, ...) is not saved: remaking its maker remakes it,
and a use elsewhere refers to it by its attribute path from the maker. A
`Composition` wired with `reads` saves its children and wires. Types are saved
with every entry and set again at the end, so explicitly set types come back.

Classes and factories are saved by their registered names (`"refold>Map"`,
`blocks.serialization.registry`), so a file does not depend on which module holds them; other
Python functions and classes are saved by their importable name (`module:qualname`)
when they have one. Files of version 1, written before Refold's modules moved under
`refold`, name `blocks.sequences:Map` and the like; they load as `refold.blocks...`.

Lambdas and closures are saved as Keras saves a `Lambda` layer's
function: as Python bytecode (marshal, base64; with their defaults, closure
values and the modules they use by name), which only `safe_mode=False` loads,
since loading runs code stored in the file. With `safe_mode=True` the error
names the block path and the fix. Weights are not part of the config: a `Model`
saves them beside it (`keras.models.load_model` restores both).

>>> import refold as td, tensorflow as tf
>>> block = td.Map(td.Scalar() >> td.Function(tf.square)) >> td.Sum()
>>> again = deserialize(serialize(block))
>>> again.output_type, float(again.eval([1.0, 2.0]))
(TensorType((), 'float32'), 5.0)
>>> lam = td.Scalar() >> td.Function(lambda x: x + 1.0)
>>> deserialize(serialize(lam), safe_mode=True)
Traceback (most recent call last):
...
refold.blocks.serialization.config.UnsafeConfigError: Pipe[1] > Function (argument tf_fn): its \
function '<lambda>' \
is saved as Python bytecode, and safe mode does not run code from a file. If you \
trust the file, load it with safe_mode=False (keras.models.load_model(path, \
safe_mode=False)); to load it in safe mode, define the function at module level in \
an importable module (it is then saved by name), or build the model with \
Model.from_factory
>>> float(deserialize(serialize(lam), safe_mode=False).eval(1.0))
2.0
"""

from __future__ import annotations

import base64
import builtins
import collections
import functools
import importlib
import marshal
import sys
import types
from typing import Any

import numpy as np

from refold.blocks.block import FactoryCall, IOBase, provenance
from refold.blocks.serialization import registry
from refold.blocks.types import (
    BroadcastSequenceType,
    PyObjectType,
    ResultType,
    SequenceType,
    TensorType,
    TupleType,
    VoidType,
)

FORMAT = "refold.blocks"
VERSION = 2
READS = (1, 2)  # 1: classes by module path, the modules at the top level (before `refold`)
# The top-level packages of version-1 files, now under `refold.`.
_MOVED = frozenset({"blocks", "compiler", "scheduler", "models", "serving", "examples"})
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

# Names that safe mode will not import from a file: they run commands, read or
# write files, or evaluate strings (a function named in a config gets called).
_UNSAFE_MODULES = frozenset({
    "os", "posix", "nt", "subprocess", "shutil", "sys", "socket", "pty", "importlib",
    "runpy", "pickle", "marshal", "ctypes", "code", "codeop", "pathlib", "io"})
_UNSAFE_BUILTINS = frozenset({
    "eval", "exec", "compile", "open", "__import__", "breakpoint", "input", "getattr",
    "setattr", "delattr", "globals", "locals", "vars"})
# Attributes not followed when looking for a block inside the block that made it.
_NOT_FOLLOWED = frozenset({"_parent", "_owner", "_made_inside", "_factory_call",
                           "_init_args", "_input_classes", "_output_classes"})


class UnsafeConfigError(ValueError):
    """A saved block holds code (a lambda or closure), or names a function that
    could run commands, and safe mode is on."""


def serialize(root: IOBase) -> dict:
    """A JSON-compatible config of the block expression `root` (see the module doc)."""
    writer = _Writer()
    top = writer.ref(root, root.path if hasattr(root, "path") else repr(root))
    return {"format": FORMAT, "version": VERSION, "python": PYTHON, "root": top,
            "objects": writer.objects}


def deserialize(config: dict, safe_mode: bool | None = None) -> IOBase:
    """The block expression saved by `serialize` (new blocks, new layers).

    Args:
        safe_mode: refuse to run code stored in the config (lambdas, closures);
            None (default) follows Keras (`keras.models.load_model(safe_mode=...)`,
            `keras.config.enable_unsafe_deserialization()`), which is safe unless
            told otherwise.
    """
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise ValueError(f"not a saved Refold block expression (no format {FORMAT!r}): "
                         f"{str(config)[:80]}")
    if config.get("version") not in READS:
        raise ValueError(f"a Refold block config of version {config.get('version')}; this "
                         f"Refold reads versions {', '.join(map(str, READS))}")
    if safe_mode is None:
        safe_mode = _keras_safe_mode()
    return _Reader(config, safe_mode).load()


def _keras_safe_mode() -> bool:
    if sys.modules.get("keras") is None:
        return True
    from refold import compat
    mode = compat.keras_safe_mode()
    return True if mode is None else bool(mode)


# --- writing ---------------------------------------------------------------------------

class _Writer:
    def __init__(self):
        self.objects: list = []
        self._index: dict[int, int] = {}
        self._alive: list = []   # keeps ids unique while writing

    def ref(self, obj: Any, where: str) -> dict:
        i = self._index.get(id(obj))
        if i is None:
            i = self._index[id(obj)] = len(self.objects)
            self._alive.append(obj)
            self.objects.append(None)
            self.objects[i] = self._entry(obj, where)
        return {"__ref__": i}

    def _entry(self, obj: Any, where: str) -> dict:
        import keras
        if isinstance(obj, keras.layers.Layer):
            return {"keras": keras.saving.serialize_keras_object(obj)}
        if isinstance(obj, keras.Variable):
            return {"variable": {"shape": list(obj.shape), "dtype": str(obj.dtype),
                                 "trainable": bool(obj.trainable), "name": obj.name}}
        path = getattr(obj, "path", None) or obj.label
        maker = _maker(obj)
        if maker is not None:
            steps = _find(maker, obj)
            if steps is None:
                raise TypeError(f"{path}: cannot save this block: it was made inside "
                                f"{maker!r} but is used elsewhere")
            return {"inside": self.ref(maker, where), "steps": steps, "path": path}
        entry: dict[str, Any] = {"path": path}
        call = provenance(obj)[1]
        if call is not None:
            entry["factory"] = self.value(call.fn, f"{path} (its factory)")
            entry["args"] = [self.value(a, f"{path} (argument {k} of its factory)")
                             for k, a in enumerate(call.args)]
            entry["kwargs"] = {k: self.value(v, f"{path} (argument {k} of its factory)")
                               for k, v in call.kwargs.items()}
        else:
            entry["class"] = _saved_name(type(obj))
            if ">" in (entry["class"] or ""):
                entry["module"] = type(obj).__module__  # where to look, if not registered yet
            if entry["class"] is None:
                raise TypeError(f"{path}: cannot save a {type(obj).__qualname__}: its class "
                                "is not importable by name (define it at module level)")
            entry["config"] = {k: self.value(v, f"{path} (argument {k})")
                               for k, v in obj.get_config().items()}
        entry["input_type"] = _type_config(obj.input_type)
        entry["output_type"] = _type_config(obj.output_type)
        target = getattr(obj, "_target", None) if _is_declaration(obj) else None
        if target is not None:
            entry["resolves_to"] = self.ref(target, target.path)
        return entry

    def value(self, v: Any, where: str, depth: int = 0) -> Any:
        """`v` as JSON: plain values as they are, everything else tagged."""
        if depth > 50:
            raise TypeError(f"{where}: cannot save a value nested this deeply")
        import keras
        rec = functools.partial(self.value, where=where, depth=depth + 1)
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [rec(x) for x in v]
        if isinstance(v, tuple) and not hasattr(v, "_fields"):
            return {"__tuple__": [rec(x) for x in v]}
        if isinstance(v, dict):
            tag = "__odict__" if isinstance(v, collections.OrderedDict) else "__dict__"
            return {tag: [[rec(k), rec(x)] for k, x in v.items()]}
        if isinstance(v, slice):
            return {"__slice__": [rec(v.start), rec(v.stop), rec(v.step)]}
        if isinstance(v, types.ModuleType):  # e.g. `tf` in a closure
            return {"__module__": v.__name__}
        if isinstance(v, ResultType):
            return {"__type__": _type_config(v)}
        if isinstance(v, (IOBase, keras.layers.Layer, keras.Variable)):
            return self.ref(v, where)
        if isinstance(v, np.dtype) or isinstance(v, type) and issubclass(v, np.generic):
            return {"__dtype__": np.dtype(v).name}
        if type(v).__name__ == "DType" and hasattr(v, "as_numpy_dtype"):  # tf.DType
            return {"__dtype__": v.name}
        if isinstance(v, (np.ndarray, np.generic)) or _is_eager_tensor(v):
            a = np.asarray(v)
            return {"__array__": a.tolist(), "dtype": a.dtype.name, "shape": list(a.shape)}
        if isinstance(v, functools.partial):
            return {"__partial__": [rec(v.func), rec(list(v.args)), rec(dict(v.keywords))]}
        if callable(v) and not hasattr(v, "get_config"):
            return self.function(v, where, depth)
        if hasattr(v, "get_config") and type(v).__module__.startswith("keras"):
            return {"__keras__": keras.saving.serialize_keras_object(v)}
        raise TypeError(f"{where}: cannot save a {type(v).__name__} ({v!r:.60}); a block "
                        "saves its arguments, which may be blocks, layers, Keras objects, "
                        "functions, types, arrays and plain Python values")

    def function(self, fn: Any, where: str, depth: int) -> dict:
        name = _saved_name(fn)
        if name is not None and ">" in name:
            return {"__function__": name, "module": fn.__module__}
        if name is not None and not name.startswith("__main__:"):
            return {"__function__": name}
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"{where}: cannot save {fn!r}: it is neither a function "
                            "importable by name nor a Python function")
        code = fn.__code__
        rec = functools.partial(self.value, where=where, depth=depth + 1)
        saved = {
            "code": base64.b64encode(marshal.dumps(code)).decode("ascii"),
            "python": PYTHON, "name": fn.__name__, "module": fn.__module__,
            "where": where,
            "defaults": rec(fn.__defaults__),
            "kwdefaults": rec(fn.__kwdefaults__),
            "closure": [rec(c.cell_contents) for c in fn.__closure__ or ()],
            "globals": self._globals(fn, where, depth),
        }
        if name is not None:  # a function of a script: by name where it is defined
            saved["name_in_main"] = name
        return {"__code__": saved}

    def _globals(self, fn: types.FunctionType, where: str, depth: int) -> dict:
        """The global names the code uses that can be saved: modules (by name) and
        values; other names are looked up in the function's module when loaded."""
        out = {}
        for name in sorted(_code_names(fn.__code__)):
            if name not in fn.__globals__:
                continue
            v = fn.__globals__[name]
            if isinstance(v, types.ModuleType):
                out[name] = {"__module__": v.__name__}
                continue
            try:
                out[name] = self.value(v, where, depth + 1)
            except TypeError:
                continue
        return out


def _maker(obj: IOBase) -> IOBase | None:
    """The block whose construction (or factory call) made `obj`, if any."""
    c = provenance(obj)[0]
    while isinstance(c, FactoryCall):
        if c.result is not None and c.result is not obj:
            return c.result
        c = c.made_inside
    return c


def _find(owner: Any, target: Any) -> list | None:
    """The attribute path from `owner` to `target` (breadth first), or None."""
    import keras
    queue = collections.deque([(owner, [])])
    seen = {id(owner)}
    while queue and len(seen) < 20000:
        x, steps = queue.popleft()
        if isinstance(x, (list, tuple)):
            items = [(["i", i], v) for i, v in enumerate(x)]
        elif isinstance(x, dict):
            items = [(["k", k], v) for k, v in x.items() if isinstance(k, (str, int))]
        elif isinstance(x, IOBase):
            items = [(["a", k], v) for k, v in vars(x).items() if k not in _NOT_FOLLOWED]
        else:
            continue
        for step, v in items:
            if v is target:
                return steps + [step]
            if id(v) in seen or isinstance(v, keras.layers.Layer) or len(steps) > 12:
                continue
            if isinstance(v, (list, tuple, dict, IOBase)):
                seen.add(id(v))
                queue.append((v, steps + [step]))
    return None


def _saved_name(obj: Any) -> str | None:
    """Its registered name ("package>name") if it has one, else `_importable_name`."""
    return registry.registered_name(obj) or _importable_name(obj)


def _importable_name(obj: Any) -> str | None:
    """`"module:qualname"` if importing it gives back `obj` itself."""
    module = getattr(obj, "__module__", None)
    if module is None and isinstance(obj, np.ufunc):
        module = "numpy"
    objclass = getattr(obj, "__objclass__", None)
    if module is None and objclass is not None:  # e.g. str.split
        module = objclass.__module__
    for qualname in (getattr(obj, "__qualname__", None), getattr(obj, "__name__", None)):
        if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
            continue
        try:
            found = _resolve(module, qualname)
        except (ImportError, AttributeError):
            continue
        if found is obj:
            return f"{module}:{qualname}"
    return None


def _resolve(module: str, qualname: str) -> Any:
    x = importlib.import_module(module)
    for part in qualname.split("."):
        x = getattr(x, part)
    return x


def _code_names(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _is_eager_tensor(v: Any) -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and tf.is_tensor(v) and hasattr(v, "numpy")


def _is_declaration(obj: Any) -> bool:
    from refold.blocks.control import ForwardDeclaration
    return isinstance(obj, ForwardDeclaration)


def _type_config(t: ResultType | None) -> Any:
    if t is None:
        return None
    if isinstance(t, TensorType):
        return {"tensor": [list(t.shape), t.dtype]}
    if isinstance(t, BroadcastSequenceType):
        return {"broadcast": _type_config(t.element_type)}
    if isinstance(t, SequenceType):
        return {"sequence": _type_config(t.element_type)}
    if isinstance(t, TupleType):
        return {"tuple": [_type_config(x) for x in t]}
    if isinstance(t, PyObjectType):
        return "pyobject"
    if isinstance(t, VoidType):
        return "void"
    raise TypeError(f"cannot save the type {t!r}")


def _type_from(c: Any) -> ResultType | None:
    if c is None:
        return None
    if c == "pyobject":
        return PyObjectType()
    if c == "void":
        return VoidType()
    (kind, v), = c.items()
    if kind == "tensor":
        return TensorType(v[0], v[1])
    if kind == "broadcast":
        return BroadcastSequenceType(_type_from(v))
    if kind == "sequence":
        return SequenceType(_type_from(v))
    if kind == "tuple":
        return TupleType(*(_type_from(x) for x in v))
    raise ValueError(f"not a saved type: {c!r}")


# --- reading ---------------------------------------------------------------------------

class _Reader:
    def __init__(self, config: dict, safe_mode: bool):
        self.entries = config["objects"]
        self.version = config["version"]
        self.root = config["root"]
        self.safe_mode = safe_mode
        self.made: dict[int, Any] = {}
        self._busy: set[int] = set()
        self._declarations: list[tuple[Any, dict]] = []
        self._where = "?"   # the path of the block being made, for errors

    def load(self) -> IOBase:
        root = self.value(self.root)
        while self._declarations:  # resolving may make blocks with more of them
            decl, target = self._declarations.pop(0)
            decl.resolve_to(self.value(target))
        for i, entry in enumerate(self.entries):  # types set explicitly come back
            obj = self.made.get(i)
            if isinstance(obj, IOBase) and "inside" not in entry:
                obj.set_input_type(_type_from(entry.get("input_type")))
                obj.set_output_type(_type_from(entry.get("output_type")))
        return root

    def obj(self, i: int) -> Any:
        if i in self.made:
            return self.made[i]
        if i in self._busy:
            raise ValueError(f"the saved block config is cyclic at object {i}")
        self._busy.add(i)
        try:
            made = self.made[i] = self._make(self.entries[i])
        finally:
            self._busy.discard(i)
        return made

    def _make(self, e: dict) -> Any:
        import keras
        if "keras" in e:
            return keras.saving.deserialize_keras_object(e["keras"])
        if "variable" in e:
            v = e["variable"]
            return keras.Variable(np.zeros(v["shape"], v["dtype"]), dtype=v["dtype"],
                                  trainable=v["trainable"], name=v["name"])
        if "inside" in e:
            x = self.value(e["inside"])
            for kind, key in e["steps"]:
                x = getattr(x, key) if kind == "a" else x[key]
            return x
        path = e.get("path", "?")
        outer, self._where = self._where, path
        try:
            if "factory" in e:
                fn = self.value(e["factory"])
                kwargs = {k: self.value(v) for k, v in e["kwargs"].items()}
                obj = fn(*self.value(e["args"]), **kwargs)
            else:
                cls = self._class(e["class"], path, e.get("module"))
                config = {k: self.value(v) for k, v in e["config"].items()}
                obj = cls.from_config(config)
        except UnsafeConfigError:
            raise
        except Exception as err:
            if getattr(err, "_refold_block_path", None) or not _rewrappable(err):
                raise
            wrapped = type(err)(f"{path}: remaking this block from its saved config "
                                f"failed: {err}")
            wrapped._refold_block_path = path
            raise wrapped from err
        finally:
            self._where = outer
        if "resolves_to" in e:
            self._declarations.append((obj, e["resolves_to"]))
        return obj

    def _class(self, name: str, path: str, module: str | None) -> type:
        cls = self._named(name, path, module)
        if not (isinstance(cls, type) and issubclass(cls, IOBase)):
            raise ValueError(f"{path}: {name} is not a block or layer class")
        return cls

    def _named(self, name: str, where: str, module: str | None = None) -> Any:
        if ">" in name:
            found = registry.find(name, module)
            if found is None:
                raise ValueError(f"{where}: the saved config names {name!r}, which nothing "
                                 "registers here: import the module that defines it first")
            return found
        module, _, qualname = name.partition(":")
        module = self.module_name(module)
        if self.safe_mode and (module.split(".")[0] in _UNSAFE_MODULES or (
                module == "builtins" and qualname in _UNSAFE_BUILTINS)):
            raise UnsafeConfigError(
                f"{where}: the saved config names {name}, which safe mode does not "
                "import (it could run commands or read files); if you trust the file, "
                "load it with safe_mode=False")
        try:
            return _resolve(module, qualname)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"{where}: the saved config names {name}, which cannot be "
                             f"imported here: {e}") from e

    def module_name(self, module: str) -> str:
        """`module` as this Refold names it: a version-1 file's `blocks.sequences` is
        `refold.blocks.sequences` (a user's own module of that name is tried second)."""
        if self.version == 1 and module.split(".")[0] in _MOVED:
            moved = f"refold.{module}"
            try:
                importlib.import_module(moved)
                return moved
            except ImportError:
                pass
        return module

    def value(self, v: Any) -> Any:
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if not isinstance(v, dict):
            return v
        if "__ref__" in v:
            return self.obj(v["__ref__"])
        tag = next(iter(v), None)
        x = v.get(tag)
        if tag == "__tuple__":
            return tuple(self.value(i) for i in x)
        if tag == "__dict__":
            return {_hashable(self.value(k)): self.value(i) for k, i in x}
        if tag == "__odict__":
            return collections.OrderedDict((_hashable(self.value(k)), self.value(i))
                                           for k, i in x)
        if tag == "__slice__":
            return slice(*self.value(x))
        if tag == "__type__":
            return _type_from(x)
        if tag == "__dtype__":
            return x
        if tag == "__array__":
            return np.asarray(v["__array__"], dtype=v["dtype"]).reshape(v["shape"])
        if tag == "__partial__":
            fn, args, kwargs = self.value(x)
            return functools.partial(fn, *args, **kwargs)
        if tag == "__keras__":
            import keras
            return keras.saving.deserialize_keras_object(x)
        if tag == "__function__":
            return self._named(x, self._where, v.get("module"))
        if tag == "__module__":
            return importlib.import_module(self.module_name(x))
        if tag == "__code__":
            return self._code(x)
        raise ValueError(f"not a saved value: {str(v)[:80]}")

    def _code(self, saved: dict) -> Any:
        where = saved.get("where", "?")
        named = saved.get("name_in_main")
        if named is not None:  # defined in a script: the running script's, if it has it
            module, qualname = named.split(":", 1)
            try:
                return _resolve(self.module_name(module), qualname)
            except (ImportError, AttributeError):
                pass
        if self.safe_mode:
            raise UnsafeConfigError(
                f"{where}: its function {saved['name']!r} is saved as Python bytecode, "
                "and safe mode does not run code from a file. If you trust the file, "
                "load it with safe_mode=False (keras.models.load_model(path, "
                "safe_mode=False)); to load it in safe mode, define the function at "
                "module level in an importable module (it is then saved by name), or "
                "build the model with Model.from_factory")
        if saved["python"] != PYTHON:
            raise ValueError(f"{where}: its function {saved['name']!r} was saved as the "
                             f"bytecode of Python {saved['python']}, which Python {PYTHON} "
                             "cannot load; save it by name (a module-level function)")
        code = marshal.loads(base64.b64decode(saved["code"]))
        scope: dict = {"__builtins__": builtins}
        name = saved["module"] and self.module_name(saved["module"])  # None: run by exec()
        module = sys.modules.get(name) if name else None
        if module is None and name and name != "__main__":
            try:
                module = importlib.import_module(name)
            except ImportError:
                module = None
        if module is not None:
            scope.update(vars(module))
        scope.update({k: self.value(g) for k, g in saved["globals"].items()})
        cells = tuple(types.CellType(self.value(c)) for c in saved["closure"])
        fn = types.FunctionType(code, scope, saved["name"], self.value(saved["defaults"]),
                                cells or None)
        fn.__kwdefaults__ = self.value(saved["kwdefaults"])
        fn.__module__ = saved["module"]
        return fn


def _hashable(k: Any) -> Any:
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k


def _rewrappable(err: Exception) -> bool:
    try:
        type(err)("probe")
    except Exception:
        return False
    return isinstance(err, (TypeError, ValueError, KeyError, AttributeError))


__all__ = ["serialize", "deserialize", "UnsafeConfigError"]
