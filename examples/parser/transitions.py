"""The arc-hybrid transition system (Kuhlmann et al. 2011) and its static oracle.

A configuration is a stack, a buffer and the arcs made so far. Words are numbered
1..n and the root is 0; the root starts at the *end* of the buffer (Ballesteros and
Nivre 2013), so the buffer is never empty until the parse is done. Three transitions:

* `SHIFT`: move the first buffer item b0 onto the stack (not the root);
* `LEFT`: pop s0 and make it a dependent of b0 (onto the root only when s0 is the
  last word on the stack, so a parse has one root word);
* `RIGHT`: pop s0 and make it a dependent of s1.

Every parse of n words takes exactly 2n transitions (n shifts, n arcs) and any
sequence of legal transitions ends in a tree. The static oracle gives the one gold
sequence for a projective tree: LEFT when b0 is s0's head, RIGHT when s1 is and s0
has all its dependents, SHIFT otherwise. A non-projective tree has no such sequence:
`oracle` refuses it with `NonProjectiveError`.

Labels ride on the arcs: `apply(LEFT, "det")` also gives the new dependent its relation
(`Configuration.relations`), and `labelled_oracle` pairs each gold arc transition with
its dependent's relation. The three transitions stay the same; a parser chooses the
label after the transition, so the oracles, legality and costs of the unlabelled
system hold unchanged for the labelled one.

>>> heads = [2, 3, 0]                        # the -> dog -> sleeps -> root
>>> [TRANSITIONS[t] for _, t in oracle(heads)]
['shift', 'left-arc', 'shift', 'left-arc', 'shift', 'left-arc']
>>> c = Configuration(3)
>>> for t in (SHIFT, LEFT, SHIFT, LEFT, SHIFT, LEFT):
...     c.apply(t)
>>> c.is_terminal(), c.heads
(True, [2, 3, 0])
>>> [label for _, _, label in labelled_oracle(heads, ["det", "nsubj", "root"])]
[None, 'det', None, 'nsubj', None, 'root']
"""

from __future__ import annotations

from collections.abc import Sequence

from refold.examples.parser.treebank import check_tree, is_projective

__all__ = ["SHIFT", "LEFT", "RIGHT", "TRANSITIONS", "STACK_FEATURES", "Configuration",
           "NonProjectiveError", "oracle", "labelled_oracle"]

SHIFT, LEFT, RIGHT = 0, 1, 2
TRANSITIONS = ("shift", "left-arc", "right-arc")

STACK_FEATURES = 3
"""How many stack items a configuration's features name (s2, s1, s0; Kiperwasser and
Goldberg 2016 use these three and b0)."""


class NonProjectiveError(ValueError):
    """The tree has crossing arcs: no sequence of arc-hybrid transitions builds it."""


class Configuration:
    """A parser state over a sentence of `n` words.

    Attributes:
        stack: word positions, the top last.
        buffer: positions still to read, b0 first; the root (0) is last.
        heads: `heads[i]` is the head given to word `i + 1` so far (None if none yet).
        relations: `relations[i]` is the label of word `i + 1`'s arc (None if it has
            no head yet or its arc was made without a label).
    """

    def __init__(self, n: int):
        self.stack: list[int] = []
        self.buffer: list[int] = [*range(1, n + 1), 0]
        self.heads: list[int | None] = [None] * n
        self.relations: list[str | None] = [None] * n

    def is_terminal(self) -> bool:
        return not self.stack and self.buffer == [0]

    def legal(self) -> tuple[bool, bool, bool]:
        """Whether SHIFT, LEFT and RIGHT may be applied now."""
        b0 = self.buffer[0]
        return (b0 != 0, bool(self.stack) and (b0 != 0 or len(self.stack) == 1),
                len(self.stack) >= 2)

    def apply(self, transition: int, label: str | None = None) -> None:
        """Applies a transition; an illegal one is a `ValueError`. An arc's `label`
        becomes its dependent's relation (a shift takes none)."""
        if not 0 <= transition < 3 or not self.legal()[transition]:
            name = TRANSITIONS[transition] if 0 <= transition < 3 else repr(transition)
            raise ValueError(f"{name} is not legal with stack {self.stack} and buffer "
                             f"{self.buffer}")
        if transition == SHIFT:
            if label is not None:
                raise ValueError(f"a shift makes no arc to label, got {label!r}")
            self.stack.append(self.buffer.pop(0))
            return
        s0 = self.stack.pop()
        self.heads[s0 - 1] = self.buffer[0] if transition == LEFT else self.stack[-1]
        self.relations[s0 - 1] = label

    def features(self) -> tuple[int | None, ...]:
        """`(s2, s1, s0, b0)`: the positions the model reads (None for an empty slot)."""
        top = self.stack[-STACK_FEATURES:]
        return (None,) * (STACK_FEATURES - len(top)) + tuple(top) + (self.buffer[0],)


def oracle(heads: Sequence[int]) -> list[tuple[tuple[int | None, ...], int]]:
    """The gold `(features, transition)` of every configuration on the way to the tree
    `heads` (`heads[i]` is the head of word `i + 1`, 0 the root).

    Raises `NonProjectiveError` for a tree with crossing arcs and `ValueError` for
    heads that are not a tree.
    """
    return [(features, t) for features, t, _ in labelled_oracle(heads, [None] * len(heads))]


def labelled_oracle(heads: Sequence[int], relations: Sequence[str | None]
                    ) -> list[tuple[tuple[int | None, ...], int, str | None]]:
    """`oracle`'s steps with each arc's label: `(features, transition, label)`, where
    an arc's label is the relation of the word it attaches and a shift's is None.
    Applying the steps (`Configuration.apply(transition, label)`) rebuilds both
    `heads` and `relations`.
    """
    if len(relations) != len(heads):
        raise ValueError(f"one relation per word: {len(heads)} heads, {len(relations)} "
                         "relations")
    check_tree(heads)
    if not is_projective(heads):
        raise NonProjectiveError(f"the tree {list(heads)} is not projective")
    missing = [0] * (len(heads) + 1)  # dependents not yet attached, per word
    for h in heads:
        missing[h] += 1
    c = Configuration(len(heads))
    steps = []
    while not c.is_terminal():
        shift, left, right = c.legal()
        s0 = c.stack[-1] if c.stack else None
        if left and heads[s0 - 1] == c.buffer[0]:
            t = LEFT
        elif right and heads[s0 - 1] == c.stack[-2] and missing[s0] == 0:
            t = RIGHT
        else:
            t = SHIFT
        label = None if t == SHIFT else relations[s0 - 1]
        steps.append((c.features(), t, label))
        if t != SHIFT:
            missing[heads[s0 - 1]] -= 1
        c.apply(t, label)
    return steps
