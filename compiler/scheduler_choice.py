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
overhead, divided by the batch's nodes (batches of one model differ in size).
After `warmup` batches (which trace the steps) under the fallback, agenda, the
candidates take turns in runs of `block` batches, in the order A B B A over
`rounds` (a drift, such as caches warming, then favours neither); the first
`settle` batches of each run are not counted (a scheduler's kernel loads on its
first use, and a batch planned ahead of the step shows up in the next interval).
Then the scheduler with the lower median time per node is kept for good, the
compiler's planner switches to it, and one line is logged on the `refold` logger
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
('agenda', {'depth': 0.25, 'agenda': 0.25})
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


def faster(medians: dict[str, float], fallback: str = FALLBACK) -> str:
    """The scheduler of the lowest median time per node; on a tie, `fallback`.

    >>> faster({"depth": 1.0, "agenda": 2.0}), faster({"depth": 2.0, "agenda": 2.0})
    ('depth', 'agenda')
    """
    best = min(medians.values())
    return fallback if medians.get(fallback) == best else min(medians, key=medians.get)


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
        decide: `decide(medians) -> name` from `{name: median seconds per node}`
            (`faster`); a test may force the choice here.
        chosen: the scheduler kept, None while measuring.
        samples: `{name: [seconds per node of each counted batch]}`.
        medians: `{name: median seconds per node}` once chosen.
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
            self.samples[name].append((now - start) / nodes)

    def _choose(self) -> None:
        measured = {n: s for n, s in self.samples.items() if s}
        self.medians = {n: statistics.median(s) for n, s in measured.items()}
        self.chosen = self.decide(self.medians) if len(measured) > 1 else self.fallback
        logging.getLogger("refold").info("scheduler='auto' kept %r: %s", self.chosen,
                                         self.summary())
        if self.on_choice is not None:
            self.on_choice(self.chosen)

    def summary(self) -> str:
        """The measured times as a phrase (medians per node, batches counted)."""
        if not self.medians:
            return (f"no batch measured, the fallback {self.fallback!r} kept" if self.chosen
                    else f"measuring, {self.batches} of {len(self.order)} batches planned")
        return ", ".join(f"{n} {1e6 * m:.3g} us per node (median of {len(self.samples[n])} "
                         "batches)" for n, m in self.medians.items())

    def describe(self) -> str:
        """One line: the scheduler kept and why, or how far the measuring is.

        >>> SchedulerChoice().describe()
        "auto: measuring, 0 of 18 batches planned (until then 'agenda')"
        """
        if self.chosen is None:
            return f"auto: {self.summary()} (until then {self.fallback!r})"
        return f"auto: kept {self.chosen!r}; {self.summary()}"
