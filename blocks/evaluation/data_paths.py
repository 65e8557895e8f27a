"""Where inside an example a block failed, as a data path (`['children'][1]['tok']`).

An `InputError` unwinding out of an evaluation notes the input of each block it
leaves (the failing block's first, then its callers'). `locate` walks that chain from
the example inward, finding each input inside the last one found (an item of a dict,
list or tuple, or an attribute of an object; breadth first for containers, among
the direct items for a number or string, which may share its identity with equal
ones elsewhere), and writes the accesses. An input that is not part of the data (a
dict made by an `InputTransform`, say) is passed over. Nothing of this runs unless
an error does.

>>> tree = {"tok": "a", "children": [{"tok": "b", "children": []}, {"tok": 7}]}
>>> bad = tree["children"][1]
>>> locate(tree, [tree, tree["children"], bad, bad["tok"]])
"['children'][1]['tok']"
>>> locate(tree, [tree])
''
"""

from __future__ import annotations

from collections import deque
from typing import Any

# How many objects one step's search may visit (an input found deep inside another).
SEARCH_LIMIT = 100_000


def locate(example: Any, chain: list) -> str:
    """The accesses from `example` to the innermost of `chain` (outermost first) that
    can be found, each inside the last one found."""
    steps: list[str] = []
    here = example
    for target in chain:
        if target is here:
            continue
        found = _path_to(here, target, deep=_may_hold(target))
        if found is not None:
            steps += found
            here = target
    return "".join(steps)


def _path_to(container: Any, target: Any, deep: bool) -> list[str] | None:
    """The accesses from `container` to the object `target` (by identity), breadth
    first (or among its direct items only, unless `deep`), or None."""
    queue = deque([(container, [])])
    seen = {id(container)}
    visited = 0
    while queue and visited < SEARCH_LIMIT:
        x, steps = queue.popleft()
        for step, v in _items(x):
            visited += 1
            if v is target:
                return steps + [step]
            if deep and id(v) not in seen and _may_hold(v):
                seen.add(id(v))
                queue.append((v, steps + [step]))
    return None


def _items(x: Any) -> list[tuple[str, Any]]:
    if isinstance(x, dict):
        return [(f"[{k!r}]", v) for k, v in x.items()]
    if isinstance(x, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(x)]
    if hasattr(x, "__dict__") and not isinstance(x, type):
        return [(f".{k}", v) for k, v in vars(x).items()]
    return []


def _may_hold(v: Any) -> bool:
    return isinstance(v, (dict, list, tuple)) or (
        hasattr(v, "__dict__") and not isinstance(v, type) and not callable(v))
