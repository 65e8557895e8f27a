"""`scheduler="auto"`: run a model's first batches under each built-in scheduler, keep the faster.

Depth batching (TensorFlow Fold's) beats agenda batching (DyNet's) on some models,
the TreeLSTM among them, and loses on others; which wins depends on the model, the
batch size and the machine, so it is measured rather than guessed, on the batches
the user runs anyway: no batch is run twice, and both schedules compute the same
values (the invariant tests check it), so the results do not depend on which
scheduler planned a batch. The executor's trace does not depend on it either: a
schedule changes the contents of the packed arrays, never their kinds.

What is measured is what the user pays per batch: the time from the moment one
batch is handed to the scheduler to the moment the next one is, so planning,
packing, the step Keras (or `Compiler.run`) runs on the batch and the loop's own
overhead. Batches differ in size, and a batch's time is not proportional to its
nodes (a step has a fixed cost), so each time is compared with the trend of all
the batches measured, a fixed cost plus a cost per node fitted robustly
(`relative_times`), and each scheduler's median of time over trend decides.
After `warmup` batches (which trace the steps) under the fallback, agenda, the
candidates take turns in runs of `block` batches, in the order A B B A over
`rounds` (a drift, such as caches warming, then favours neither); the first
`settle` batches of each run are not counted (a scheduler's kernel loads on its
first use, and a batch planned ahead of the step shows up in the next interval).
Then the scheduler with the lower median is kept for good (agenda unless the
other is at least `MARGIN`, 5%, lower), the compiler's
planner switches to it, and one line is logged on the `refold` logger
at INFO. With the defaults that is 18 batches, 6 and 7 of them counted.

Only the process that made the compiler measures: a worker process forked before
the choice plans with the fallback (and one forked after it with the choice).

>>> choice = SchedulerChoice(warmup=1, block=2, rounds=2, settle=0)
>>> ticks = iter(range(100))
>>> choice.clock = lambda: float(next(ticks))   # every batch takes 1 s: forced
>>> names = []
>>> for _ in range(10):
...     names.append(choice.next())
...     choice.planned(nodes=4)
>>> names[:9]    # warm-up, then A B B A in runs of 2
['agenda', 'depth', 'depth', 'agenda', 'agenda', 'agenda', 'agenda', 'depth', 'depth']
>>> choice.chosen, choice.medians   # a tie keeps the fallback
('agenda', {'depth': 1.0, 'agenda': 1.0})
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence

# The built-in schedulers "auto" measures, and the one it plans with until it has chosen.
CANDIDATES = ("depth", "agenda")
FALLBACK = "agenda"
AUTO = "auto"


def relative_times(batches: Sequence[tuple[str, int, float]]) -> dict[str, list[float]]:
    """Per scheduler, each batch's time over the trend of all: `batches` holds
    `(scheduler, nodes, seconds)`; the trend is `a + b * nodes`, `b` the median of
    the slopes between pairs of batches of different sizes (Theil-Sen: a batch that
    traced a step moves it little) and `a` the median of `seconds - b * nodes`.
    Where the trend is not positive at every batch, time per node is compared.

    >>> relative_times([("depth", 10, 2.0), ("agenda", 10, 3.0), ("depth", 30, 4.0),
    ...                 ("agenda", 30, 6.0)])   # the trend: 1.25 + 0.125 a node
    {'depth': [0.8, 0.8], 'agenda': [1.2, 1.2]}
    """
    nodes = [n for _, n, _ in batches]
    secs = [t for _, _, t in batches]
    slopes = [(secs[j] - secs[i]) / (nodes[j] - nodes[i]) for i in range(len(batches))
              for j in range(i + 1, len(batches)) if nodes[j] != nodes[i]]
    b = statistics.median(slopes) if slopes else 0.0
    a = statistics.median(t - b * n for n, t in zip(nodes, secs))
    if min(a + b * n for n in nodes) <= 0:
        a, b = 0.0, statistics.median(t / n for n, t in zip(nodes, secs))
    out: dict[str, list[float]] = {}
    for (name, n, t) in batches:
        out.setdefault(name, []).append(round(t / (a + b * n), 12))
    return out


# How much faster than the fallback another scheduler must measure to be kept: two
# schedulers within a few percent are as fast as the measuring can tell apart.
MARGIN = 0.05


def faster(medians: dict[str, float], fallback: str = FALLBACK, margin: float = MARGIN) -> str:
    """The scheduler of the lowest median (time over trend), unless it beats
    `fallback` by less than `margin` (a fraction of the fallback's): then the fallback.

    >>> faster({"depth": 1.0, "agenda": 2.0}), faster({"depth": 0.97, "agenda": 1.0})
    ('depth', 'agenda')
    """
    best = min(medians, key=medians.get)
    if fallback in medians and medians[best] >= medians[fallback] * (1 - margin):
        return fallback
    return best


class SchedulerChoice:
    """Measures the candidate schedulers on a compiler's first batches and keeps the
    faster (module docstring).

    The compiler calls `next()` as it hands a batch to the scheduler, for the
    scheduler to use, then `planned(nodes)` with the batch's node count.

    Args:
        candidates: the registered schedulers to compare.
        warmup: batches planned with `fallback` before measuring (they trace the steps).
        block: batches in a row under one candidate.
        rounds: turns each candidate takes (A B, then B A, ...).
        settle: batches at the start of each run not counted.
        on_choice: called with the name kept, once.
        fallback: the scheduler before the choice, and on a tie.

    Attributes:
        clock: seconds, monotonic (`time.perf_counter`); a test forces timings here.
        decide: `decide(medians) -> name` from `{name: median time over trend}`
            (`faster`); a test may force the choice here.
        chosen: the scheduler kept, None while measuring.
        samples: `{name: [(nodes, seconds) of each counted batch]}`.
        medians: `{name: median of its batches' times over the trend}` once chosen
            (`relative_times`: below 1 is faster than the batches' average).
    """

    def __init__(self, candidates: Sequence[str] = CANDIDATES, warmup: int = 2, block: int = 4,
                 rounds: int = 2, settle: int = 1, on_choice: Callable[[str], None] | None = None,
                 fallback: str = FALLBACK):
        if min(warmup, settle) < 0 or block <= settle or rounds < 1 or len(candidates) < 2:
            raise ValueError("SchedulerChoice needs two candidates or more, warmup >= 0, "
                             "block > settle >= 0 and rounds >= 1")
        self.candidates, self.fallback = tuple(candidates), fallback
        order = [fallback] * warmup
        for r in range(rounds):
            for name in (self.candidates if r % 2 == 0 else self.candidates[::-1]):
                order += [name] * block
        self.order = order
        # counted[i]: whether batch i's time is a sample (not warm-up, not settling)
        self.counted = [i >= warmup and all(
            order[j] == order[i] and j > warmup - 1 for j in range(i - settle, i))
            for i in range(len(order))]
        self.clock: Callable[[], float] = time.perf_counter
        self.decide: Callable[[dict], str] = lambda medians: faster(medians, fallback)
        self.on_choice = on_choice
        self.chosen: str | None = None
        self.samples: dict[str, list[float]] = {name: [] for name in self.candidates}
        self.medians: dict[str, float] = {}
        self.batches = 0  # batches handed out while measuring
        self._open: tuple | None = None  # the batch under way: (name or None, start, nodes)
        self._pid = os.getpid()

    def next(self) -> str:
        """The scheduler for the batch about to be planned; ends the previous batch's
        interval (and, after the last batch of the trial, chooses)."""
        if self.chosen is not None:
            return self.chosen
        if os.getpid() != self._pid:  # a forked worker: the parent measures
            return self.fallback
        now = self.clock()
        self._close(now)
        i = self.batches
        if i >= len(self.order):
            self._choose()
            return self.chosen  # type: ignore[return-value]
        self.batches += 1
        name = self.order[i]
        self._open = (name if self.counted[i] else None, now, 0)
        return name

    def planned(self, nodes: int) -> None:
        """The batch just handed out by `next()` has `nodes` nodes."""
        if self._open is not None and os.getpid() == self._pid:
            self._open = (self._open[0], self._open[1], int(nodes))

    def _close(self, now: float) -> None:
        if self._open is None:
            return
        name, start, nodes = self._open
        self._open = None
        if name is not None and nodes > 0:
            self.samples[name].append((nodes, now - start))

    def _choose(self) -> None:
        relative = relative_times([(name, n, t) for name, got in self.samples.items()
                                   for n, t in got])
        self.medians = {n: statistics.median(r) for n, r in relative.items()}
        self.chosen = self.decide(self.medians) if len(relative) > 1 else self.fallback
        logging.getLogger("refold").info("scheduler='auto' kept %r: %s", self.chosen,
                                         self.summary())
        if self.on_choice is not None:
            self.on_choice(self.chosen)

    def summary(self) -> str:
        """The measured times as a phrase: per scheduler its median time over the
        trend of all batches (`relative_times`) and per batch, batches counted."""
        if not self.medians:
            return (f"no batch measured, the fallback {self.fallback!r} kept" if self.chosen
                    else f"measuring, {self.batches} of {len(self.order)} batches planned")
        def per_batch(name):
            return 1e3 * statistics.median(t for _, t in self.samples[name])
        return ", ".join(f"{n} {m:.3f} of the trend ({per_batch(n):.3g} ms a batch, median of "
                         f"{len(self.samples[n])})" for n, m in self.medians.items())

    def describe(self) -> str:
        """One line: the scheduler kept and why, or how far the measuring is.

        >>> SchedulerChoice().describe()
        "auto: measuring, 0 of 18 batches planned (until then 'agenda')"
        """
        if self.chosen is None:
            return f"auto: {self.summary()} (until then {self.fallback!r})"
        return f"auto: kept {self.chosen!r}; {self.summary()}"
