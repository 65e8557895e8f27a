"""The arc-hybrid dynamic oracle (Goldberg and Nivre 2013): what each transition costs
in any configuration, on or off the gold path.

The static oracle (`transitions.oracle`) knows one gold sequence and says nothing once
the parser leaves it. The dynamic oracle answers for every configuration: a
transition's *cost* is the number of gold arcs it makes unreachable (arcs not made
yet that some continuation could still make, and none can after it). Arc-hybrid is
arc-decomposable for projective trees, so an arc's reachability can be judged on its
own and the cost is exact: the best attachment score reachable drops by exactly the
cost. For a non-projective gold tree the same count is the usual approximation
(some arcs are reachable one at a time but not all together).

An unmade gold arc `h -> d` is reachable in this module's variant (the root at the
end of the buffer, one word attached to it, `transitions`) when

* `d` is still in the buffer: always (any head can still be arranged);
* `d` is on the stack: when `h` is a word still in the buffer (a LEFT once `h` is
  b0), or `h` is the item just below `d` (a RIGHT), or `h` is the root and `d` is the
  bottom of the stack (the last LEFT, once the buffer is only the root).

Hence, with stack `... s1 s0` and buffer `b0 ...`:

* SHIFT loses b0's head if it is on the stack below s0 (or the root, with a
  non-empty stack) and b0's dependents on the stack;
* LEFT loses s0's head unless it is b0 (if it was still reachable), and s0's
  dependents in the buffer;
* RIGHT the same, with s1 in place of b0.

>>> from refold.examples.parser.transitions import Configuration, SHIFT, LEFT
>>> gold = [2, 0, 2]                    # 1 <- 2 -> 3, word 2 the root's
>>> c = Configuration(3)
>>> c.apply(SHIFT)                      # stack [1], buffer [2, 3, root]
>>> costs(c, gold)      # SHIFT loses 2 -> 1 and root -> 2; RIGHT is illegal
(2, 0, None)
>>> c.apply(SHIFT)      # the mistake: 1 and 2 can no longer get their heads
>>> costs(c, gold)      # LEFT or RIGHT would pop 2 before its dependent 3 arrives
(0, 1, 1)
"""

from __future__ import annotations

from collections.abc import Sequence

from refold.examples.parser.transitions import Configuration

__all__ = ["costs", "best_transitions"]


def costs(config: Configuration, gold: Sequence[int]) -> tuple[int | None, int | None,
                                                                int | None]:
    """The cost of SHIFT, LEFT and RIGHT in `config` (None where illegal) against
    the gold tree `gold` (`gold[i]` the head of word `i + 1`, 0 the root)."""
    shift, left, right = config.legal()
    stack, b0 = config.stack, config.buffer[0]

    def in_buffer(w: int) -> bool:  # a word still to read (the buffer is b0..n, root)
        return b0 != 0 and w >= b0

    def dependents_in_buffer(w: int) -> int:
        return 0 if b0 == 0 else sum(1 for h in gold[b0 - 1:] if h == w)

    out: list[int | None] = [None, None, None]
    if shift:
        h = gold[b0 - 1]
        lost_head = h in stack[:-1] or (h == 0 and bool(stack))
        out[0] = int(lost_head) + sum(1 for d in stack if gold[d - 1] == b0)
    if left or right:
        s0 = stack[-1]
        h = gold[s0 - 1]
        dependents = dependents_in_buffer(s0)
        s1 = stack[-2] if len(stack) >= 2 else None
        if left:
            reachable = in_buffer(h) or (h == 0 and s1 is None) or (s1 is not None and h == s1)
            out[1] = int(h != b0 and reachable) + dependents
        if right:
            out[2] = int(h != s1 and in_buffer(h)) + dependents
    return out[0], out[1], out[2]


def best_transitions(cost: Sequence[int | None]) -> list[bool]:
    """Which transitions are legal and of the least cost among the legal ones (the
    zero-cost ones for a projective gold tree in a configuration that can still reach
    it)."""
    least = min(c for c in cost if c is not None)
    return [c is not None and c == least for c in cost]
