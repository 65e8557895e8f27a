"""Seeds bugs into the Python standard library's expressions: the bug-detector dataset.

    python -m refold.examples.bugs.extract [--stdlib DIR] [--out FILE]

walks the standard library (by default the running Python's; the shipped file was made
from CPython 3.11.7's, tests left out as in the function-names example), parses every
`.py` file with `ast` and finds three kinds of *sites*, each an expression in the
header of its statement (the whole of a simple statement such as an assignment or a
`return`; the test of an `if` or `while`; the target and iterable of a `for`; the items
of a `with`):

* `swap`: a call with two or more positional arguments (none starred) whose first two
  read differently in the tree (not two strings); the bug swaps them
  (`isinstance(x, int)` -> `isinstance(int, x)`);
* `operator`: a binary operation, or a comparison with one operator; the bug is another
  operator of the same family (arithmetic `+ - * / // % **`, bitwise `& | ^ << >>`,
  order and equality `< <= > >= == !=`, `is`/`is not`, `in`/`not in`);
* `operand`: a binary operation or one-operator comparison with a plain name as an
  operand; the bug replaces that name by another name the same function uses (the
  module, at module level), not one it only calls: `i < n` -> `i < j`.

A record is one site of one kind: the statement's tree, the seeded change, and where it
is. The correct code is a positive example, the seeded one its negative. Which
operator, operand or name is chosen is drawn from a generator seeded by the site's
file, line, column and kind, so the same library gives the same bytes.

The tree is the function-names format: a node is `[type, child, ...]`, a leaf a string
(an identifier, a constant's kind such as `<str>` or a small integer, an operator such
as `Add`); the judged expression's type is marked with `@` (`@Call`), so a statement
with several sites says which one is meant. `at` is the path (list indices) from the
root to the changed node: for `swap` the call, whose list items 2 and 3 are its first
two arguments (item 1 is the function); otherwise the leaf replaced by `to`.

Each file's sites go to one split (the function-names example's hash of the path, 80%
train, 10% dev, 10% test); a site whose tree and change repeat an earlier one's is
dropped, and statements of more than `--max-nodes` nodes are left out. Every other site
is kept (the example samples its training set from them at run time), so the detector
can be run over the whole of the test modules.

>>> import ast
>>> src = "def f(items, n):\\n    if len(items) > n:\\n        return max(n, 0)\\n"
>>> [(s["kind"], s["tree"], s["at"], s["to"]) for s in sites_in(src, "m.py")][:2]
[('operator', ['If', ['@Compare', ['Call', 'len', 'items'], 'Gt', 'n']], [1, 2], 'GtE'), \
('operand', ['If', ['@Compare', ['Call', 'len', 'items'], 'Gt', 'n']], [1, 3], 'items')]
>>> site = sites_in(src, "m.py")[-1]
>>> site["kind"], site["tree"], seeded(site)
('swap', ['Return', ['@Call', 'max', 'n', '0']], ['Return', ['@Call', 'max', '0', 'n']])
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import os
import random
import sys
import sysconfig
from collections.abc import Iterator, Sequence

from refold.examples.function_names.extract import (
    split_of,
    stdlib_files,
    tree_size,
    write_json_lines,
)

__all__ = ["KINDS", "FAMILIES", "sites_in", "seeded", "extract", "DEFAULT_PATH"]

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                            "bugs.jsonl.gz")
KINDS = ("swap", "operator", "operand")
FAMILIES = (("Add", "Sub", "Mult", "Div", "FloorDiv", "Mod", "Pow"),
            ("BitAnd", "BitOr", "BitXor", "LShift", "RShift"),
            ("Lt", "LtE", "Gt", "GtE", "Eq", "NotEq"),
            ("Is", "IsNot"), ("In", "NotIn"))
_FAMILY = {op: family for family in FAMILIES for op in family}
_CONTEXTS = (ast.Load, ast.Store, ast.Del)
_SKIPPED_FIELDS = {"ctx", "type_comment", "kind", "conversion", "type_ignores"}
# The statement fields that hold expressions judged with it (not nested statements).
_HEADERS = {ast.If: ("test",), ast.While: ("test",), ast.For: ("target", "iter"),
            ast.AsyncFor: ("target", "iter"), ast.With: ("items",),
            ast.AsyncWith: ("items",)}
_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr, ast.Assert,
           ast.Raise, ast.Delete)


def _constant(value) -> str:
    if value is None or isinstance(value, bool) or value is Ellipsis:
        return repr(value)
    if isinstance(value, int):
        return str(value) if -1 <= value <= 9 else "<int>"
    return {str: "<str>", bytes: "<bytes>", float: "<float>",
            complex: "<complex>"}.get(type(value), "<const>")


def _serialize(node, target, path: list, found: dict):
    """`node` as a tree; the path of `target` (its type marked `@`) goes to `found`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant):
        return _constant(node.value)
    children = []
    for field, value in ast.iter_fields(node):
        if field in _SKIPPED_FIELDS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST) and not isinstance(item, _CONTEXTS):
                children.append(_serialize(item, target, path + [len(children) + 1], found))
            elif isinstance(item, str):
                children.append(item)
    name = type(node).__name__
    if node is target:
        found["path"] = path
        name = "@" + name
    return [name, *children] if children else name


def _statement_tree(stmt: ast.stmt):
    """The statement as judged: a simple statement whole, a compound one's header."""
    if isinstance(stmt, _SIMPLE):
        return stmt, [stmt]
    fields = _HEADERS.get(type(stmt))
    if fields is None:
        return None, []
    parts = []
    for f in fields:
        value = getattr(stmt, f)
        parts.extend(value if isinstance(value, list) else [value])
    return type(stmt).__name__, parts


def _tree(stmt: ast.stmt, target: ast.AST):
    head, parts = _statement_tree(stmt)
    found: dict = {}
    if isinstance(head, ast.AST):
        return _serialize(head, target, [], found), found["path"]
    children = [_serialize(p, target, [k + 1], found) for k, p in enumerate(parts)]
    return [head, *children], found["path"]


def _statements(body: list, names: frozenset) -> Iterator[tuple[ast.stmt, frozenset]]:
    """Every statement in `body`, nested ones too, with the names its scope uses."""
    for stmt in body:
        yield stmt, names
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _statements(stmt.body, _variables(stmt))
            continue
        for field in ("body", "orelse", "finalbody"):
            value = getattr(stmt, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield from _statements(value, names)
        for handler in getattr(stmt, "handlers", []):
            yield from _statements(handler.body, names)
        for case in getattr(stmt, "cases", []):
            yield from _statements(case.body, names)


def _variables(scope: ast.AST) -> frozenset:
    """The names `scope` uses, less those it calls (functions, classes, builtins)."""
    names = {n.id for n in ast.walk(scope) if isinstance(n, ast.Name)}
    called = {n.func.id for n in ast.walk(scope)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return frozenset(names - called)


def _rng(*key) -> random.Random:
    digest = hashlib.sha1(":".join(map(str, key)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _op_name(node) -> str:
    return type(node.op if isinstance(node, ast.BinOp) else node.ops[0]).__name__


def _operands(node) -> tuple:
    if isinstance(node, ast.BinOp):
        return node.left, node.right
    return node.left, node.comparators[0]


def _code(lines: list[bytes], node: ast.AST) -> str:
    """The node's source on one line (`ast.get_source_segment` re-splits the whole
    module on every call, too slow for every site of the library)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        chunk = lines[first][node.col_offset:node.end_col_offset]
    else:
        chunk = b"".join([lines[first][node.col_offset:], *lines[first + 1:last],
                          lines[last][:node.end_col_offset]])
    text = " ".join(chunk.decode("utf-8", errors="replace").split())
    return text if len(text) <= 120 else text[:117] + "..."


def sites_in(source: bytes | str, path: str, max_nodes: int = 60) -> list[dict]:
    """Every site of every kind in a module's source, in order (module docstring)."""
    if isinstance(source, bytes):
        source = source.decode("utf-8", errors="replace")
    module = ast.parse(source)
    lines = source.encode().split(b"\n")  # ast counts lines at "\n" (not form feeds)
    out = []
    for stmt, names in _statements(module.body, _variables(module)):
        head, parts = _statement_tree(stmt)
        if head is None:
            continue
        for part in parts:
            for node in ast.walk(part):
                out.extend(_node_sites(node, stmt, names, path, lines, max_nodes))
    return out


def _node_sites(node, stmt, names, path, lines, max_nodes) -> list[dict]:
    kinds = []
    if isinstance(node, ast.Call) and len(node.args) >= 2 \
            and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
        kinds.append("swap")
    binary = (isinstance(node, ast.BinOp) or (isinstance(node, ast.Compare)
                                              and len(node.ops) == 1)) \
        and _op_name(node) in _FAMILY  # not `@`, the one operator without a family
    if binary:
        kinds.append("operator")
        if any(isinstance(o, ast.Name) for o in _operands(node)):
            kinds.append("operand")
    if not kinds:
        return []
    tree, at = _tree(stmt, node)
    if tree_size(tree) > max_nodes:
        return []
    if "swap" in kinds:
        call = _at(tree, at)
        if call[2] == call[3]:  # `f("a", "b")`: two constants of one kind read alike
            kinds.remove("swap")
    where = {"file": path, "line": node.lineno, "col": node.col_offset,
             "split": split_of(path), "code": _code(lines, node)}
    out = []
    for kind in kinds:
        rng = _rng(path, node.lineno, node.col_offset, kind)
        if kind == "swap":
            out.append({**where, "kind": kind, "tree": tree, "at": at, "to": None})
        elif kind == "operator":
            op = _op_name(node)
            choices = [o for o in _FAMILY[op] if o != op]
            out.append({**where, "kind": kind, "tree": tree, "at": at + [2],
                        "to": rng.choice(choices)})
        else:
            sides = [k for k, o in enumerate(_operands(node)) if isinstance(o, ast.Name)]
            side = rng.choice(sides)
            was = _operands(node)[side].id
            others = sorted(names - {was})
            if others:
                out.append({**where, "kind": kind, "tree": tree, "at": at + [1 + 2 * side],
                            "to": rng.choice(others)})
    return out


def _at(tree, path: list):
    for k in path:
        tree = tree[k]
    return tree


def seeded(site: dict):
    """The site's tree with its bug seeded (the tree itself is left as it is)."""
    tree = copy.deepcopy(site["tree"])
    *path, last = site["at"] if site["to"] is not None else site["at"] + [None]
    node = _at(tree, path)
    if site["to"] is None:
        node[2], node[3] = node[3], node[2]
    else:
        node[last] = site["to"]
    return tree


def extract(root: str, max_nodes: int = 60) -> tuple[list[dict], dict]:
    """The sites under `root`, and what was counted."""
    sites, seen = [], set()
    stats = {"files": 0, "unparsable_files": 0, "duplicates": 0,
             **{f"{k}_sites": 0 for k in KINDS}}
    for path in stdlib_files(root):
        with open(os.path.join(root, path), "rb") as f:
            source = f.read()
        stats["files"] += 1
        try:
            found = sites_in(source, path, max_nodes)
        except (SyntaxError, ValueError):
            stats["unparsable_files"] += 1
            continue
        for s in found:
            key = json.dumps([s["kind"], s["tree"], s["at"], s["to"]])
            if key in seen:
                stats["duplicates"] += 1
                continue
            seen.add(key)
            stats[f"{s['kind']}_sites"] += 1
            sites.append(s)
    return sites, stats


def main(argv: Sequence[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m refold.examples.bugs.extract",
                                description=__doc__.split("\n>>>")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"])
    p.add_argument("--out", default=DEFAULT_PATH)
    p.add_argument("--max-nodes", type=int, default=60)
    args = p.parse_args(argv)
    sites, stats = extract(args.stdlib, args.max_nodes)
    write_json_lines(args.out, sites)
    version = ".".join(map(str, sys.version_info[:3]))
    found = ", ".join(f"{stats[f'{k}_sites']} {k}" for k in KINDS)
    print(f"Python {version}, {args.stdlib}: {stats['files']} files "
          f"({stats['unparsable_files']} unparsable); sites of at most {args.max_nodes} "
          f"nodes: {found} ({stats['duplicates']} duplicates left out); wrote {len(sites)} "
          f"to {args.out}")
    return {"stats": stats, "sites": len(sites), "python": version}


if __name__ == "__main__":
    main()
