"""Extracts the function-name dataset from the Python standard library's source.

    python -m refold.examples.function_names.extract [--stdlib DIR] [--out FILE]

walks the standard library (by default the running Python's, `sysconfig`'s "stdlib"
path; the shipped file was made from CPython 3.11.7's), parses every `.py` file with
`ast`, and writes one JSON line per function (gzip) with its file, line, name, label
and syntax tree. Left out: the test suites (`test`, `tests`, `idle_test` folders,
where `test_*` names would be half of all functions), `site-packages`, files `ast`
cannot parse (counted), and trees of more than `--max-nodes` nodes.

The label is the first word of the name: leading underscores stripped, split at `_`
and at lower-to-upper case changes, lower-cased (`__init__` -> `init`,
`getElementById` -> `get`, `_is_dir` -> `is`).

The tree (`function_tree`) is the function's arguments and body, without its name,
decorators, return annotation or docstring. A node is `[type, child, ...]` and a leaf
a string: an identifier (variable, attribute, argument, imported name), a constant
abstracted to its kind (`<str>`, `<bytes>`, `<int>`, `<float>`; small integers,
`True`, `False`, `None` as themselves) or an AST node with no children (`Pass`,
operators such as `Add`). `Name`, `Constant`, unannotated `arg` and `alias` nodes are
their leaf; load/store contexts are dropped. The function's own name is hidden: any
identifier equal to it, up to leading and trailing underscores, becomes `<name>`.

Each file goes to one split, by a hash of its path (80% train, 10% dev, 10% test), and
a function whose tree (name hidden) is already in the data, from any file, is
dropped, so no tree is in two splits or twice in one.

>>> import ast
>>> src = 'def get_size(self, key):\\n    "Doc."\\n    return self._get_size(key) + 1\\n'
>>> function_tree(ast.parse(src).body[0])
['FunctionDef', ['arguments', 'self', 'key'], ['Return', ['BinOp', ['Call', \
['Attribute', 'self', '<name>'], 'key'], 'Add', '1']]]
>>> [first_word(n) for n in ("__init__", "getElementById", "_is_dir", "HTTPError", "f")]
['init', 'get', 'is', 'httperror', 'f']
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import os
import re
import sys
import sysconfig
from collections.abc import Iterator, Sequence

__all__ = ["first_word", "function_tree", "tree_size", "split_of", "functions_in",
           "stdlib_files", "extract", "DEFAULT_PATH", "SKIPPED_DIRS"]

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                            "functions.jsonl.gz")
SKIPPED_DIRS = ("test", "tests", "idle_test", "site-packages", "__pycache__")
_CONTEXTS = (ast.Load, ast.Store, ast.Del)
_SKIPPED_FIELDS = {"ctx", "type_comment", "kind", "level", "simple", "conversion",
                   "type_ignores"}


def first_word(name: str) -> str:
    """The first word of a function name, lower-cased (see the module docstring)."""
    stripped = name.strip("_")
    if not stripped:
        return name
    return re.split(r"_|(?<=[a-z0-9])(?=[A-Z])", stripped)[0].lower()


def _constant(value) -> str:
    if value is None or isinstance(value, bool) or value is Ellipsis:
        return repr(value)
    if isinstance(value, int):
        return str(value) if -1 <= value <= 9 else "<int>"
    return {str: "<str>", bytes: "<bytes>", float: "<float>",
            complex: "<complex>"}.get(type(value), "<const>")


class _Serializer:
    def __init__(self, hidden: str):
        self.hidden = hidden.strip("_")

    def ident(self, name: str) -> str:
        return "<name>" if name.strip("_") == self.hidden and self.hidden else name

    def node(self, node: ast.AST):
        if isinstance(node, ast.Name):
            return self.ident(node.id)
        if isinstance(node, ast.Constant):
            return _constant(node.value)
        if isinstance(node, ast.arg) and node.annotation is None:
            return self.ident(node.arg)
        if isinstance(node, ast.alias):
            return self.ident(node.asname or node.name)
        children = []
        for field, value in ast.iter_fields(node):
            if field in _SKIPPED_FIELDS:
                continue
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, ast.AST) and not isinstance(item, _CONTEXTS):
                    children.append(self.node(item))
                elif isinstance(item, str):
                    children.append(self.ident(item))
        name = type(node).__name__
        return [name, *children] if children else name


def _body_without_docstring(fn: ast.AST) -> list:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body


def function_tree(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list:
    """The tree of `fn`: `[type, arguments, *body]`, name hidden (module docstring)."""
    s = _Serializer(fn.name)
    body = [s.node(stmt) for stmt in _body_without_docstring(fn)]
    return [type(fn).__name__, s.node(fn.args), *(body or ["<empty>"])]


def tree_size(tree) -> int:
    """The number of nodes and leaves."""
    return 1 if isinstance(tree, str) else 1 + sum(tree_size(c) for c in tree[1:])


def split_of(path: str) -> str:
    """`"train"`, `"dev"` or `"test"`, from a hash of a file's relative path."""
    bucket = hashlib.sha1(path.encode()).digest()[0] % 10
    return "test" if bucket == 0 else "dev" if bucket == 1 else "train"


def stdlib_files(root: str) -> list[str]:
    """The `.py` files under `root`, sorted, relative, outside `SKIPPED_DIRS`."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        out.extend(os.path.relpath(os.path.join(folder, f), root)
                   for f in sorted(files) if f.endswith(".py"))
    return sorted(out)


def functions_in(source: bytes | str) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method in a module's source, nested ones too, in order."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def extract(root: str, max_nodes: int = 500) -> tuple[list[dict], dict]:
    """The records of every function under `root`, and counts of what was left out."""
    records, seen = [], set()
    stats = {"files": 0, "unparsable_files": 0, "functions": 0, "too_big": 0,
             "duplicates": 0}
    for path in stdlib_files(root):
        with open(os.path.join(root, path), "rb") as f:
            source = f.read()
        stats["files"] += 1
        try:
            functions = list(functions_in(source))
        except (SyntaxError, ValueError):
            stats["unparsable_files"] += 1
            continue
        for fn in functions:
            stats["functions"] += 1
            tree = function_tree(fn)
            if tree_size(tree) > max_nodes:
                stats["too_big"] += 1
                continue
            key = json.dumps(tree)
            if key in seen:
                stats["duplicates"] += 1
                continue
            seen.add(key)
            records.append({"file": path, "line": fn.lineno, "name": fn.name,
                            "label": first_word(fn.name), "split": split_of(path),
                            "tree": tree})
    return records, stats


def write_json_lines(path: str, records: list[dict]) -> None:
    """Writes `records` to `path`, gzipped JSON, one record a line, with no name nor time
    in the gzip header: the same records give the same bytes."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename="",
                                                mtime=0) as f:
        for r in records:
            f.write((json.dumps(r, separators=(",", ":")) + "\n").encode())


def main(argv: Sequence[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m refold.examples.function_names.extract",
                                description=__doc__.split("\n>>>")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"])
    p.add_argument("--out", default=DEFAULT_PATH)
    p.add_argument("--max-nodes", type=int, default=500)
    args = p.parse_args(argv)
    records, stats = extract(args.stdlib, args.max_nodes)
    write_json_lines(args.out, records)
    version = ".".join(map(str, sys.version_info[:3]))
    print(f"Python {version}, {args.stdlib}: {stats['files']} files "
          f"({stats['unparsable_files']} unparsable), {stats['functions']} functions; "
          f"left out {stats['too_big']} of more than {args.max_nodes} nodes and "
          f"{stats['duplicates']} duplicates; wrote {len(records)} to {args.out}")
    return {"stats": stats, "records": len(records), "python": version}


if __name__ == "__main__":
    main()
