"""How a batch runs, step by step: which op ran in which launch, on how many rows.

`launches(block, inputs, scheduler)` lists the launches the executor runs for one batch,
in order: those before its loop (the prelude and the ops that read only input data),
one per loop iteration, and those after it (output layers, losses), each with its op,
its rows and how many of them came from each input. `describe_schedule` prints them as
text, one line a launch (as DyNet's `--dynet-autobatch-debug` does), and `draw_schedule`
draws them (as Fold's batching animation does), every scheduler side by side, so that
depth-based batching (TensorFlow Fold) can be set against agenda-based (DyNet):

>>> import refold as td
>>> def double(x):
...     return 2.0 * x
>>> def add(total, x):
...     return total + x
>>> total = td.Map(td.Scalar() >> td.Function(double)) >> td.Fold(
...     td.Function(add), td.Zeros(td.TensorType(())))
>>> for launch in launches(total, [[1.0, 2.0], [3.0]], "depth"):
...     print(launch.stage, launch.label, launch.rows, launch.by_example)
before the loop double 3 (2, 1)
loop add 2 (1, 1)
loop add 1 (1, 0)

The three doublings run in one launch before the loop (their inputs are all data); then
the loop adds, one launch an iteration: the first additions of both inputs together,
then the second one of the longer input. Launches of no rows (an op that has no node in
this batch) are left out.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

STAGES = ("before the loop", "loop", "after the loop")


class Launch(NamedTuple):
    """One batched call of an op, in the order the executor runs them.

    Attributes:
        stage: "before the loop", "loop" (one loop iteration) or "after the loop".
        op: the op's id in the compiled program.
        label: the op's name, with the place in the block expression that tells it apart
            from another op of the same name (`FC (OneOf[True])`).
        rows: how many nodes the launch computes (one row each).
        by_example: rows per input of the batch, in input order.
    """

    stage: str
    op: int
    label: str
    rows: int
    by_example: tuple


def op_labels(program) -> list[str]:
    """A readable, distinct label per op id: its name, and where it is declared when two
    ops share a name (the shortest tail of the block path that tells them apart)."""
    from refold.blocks.validation import iter_blocks
    paths: dict[int, list[str]] = {}
    for b in iter_blocks(program.root):
        for op in b.ops():
            o = program.op_id.get(op)
            if o is not None and o not in paths:
                paths[o] = b.path.split(" > ")[:-1]  # the block itself is the op's name
    names = [op.name for op in program.ops]
    labels = list(names)
    for o, name in enumerate(names):
        twins = [p for p, n in enumerate(names) if n == name and p != o]
        if not twins:
            continue
        mine = paths.get(o, [])
        for k in range(1, len(mine) + 1):  # a tail starting at a pipe's slot says little
            tail = mine[-k:]
            if all(paths.get(p, [])[-k:] != tail for p in twins) and (
                    not tail[0].startswith("Pipe[") or k == len(mine)):
                break
        labels[o] = f"{name} ({' > '.join(mine[-k:])})" if mine else f"{name} #{o}"
    return labels


def _compiler(block, scheduler: str | None):
    from refold.compiler.compiler import Compiler
    if isinstance(block, Compiler):
        return block
    return Compiler(block, scheduler=scheduler or "agenda", cache=False)


def launches(block, inputs: Sequence[Any], scheduler: str | None = None) -> list[Launch]:
    """The launches of a batch of `inputs`, in the order the executor runs them.

    Args:
        block: a block expression, or a `Compiler` (its batches are not disturbed:
            under `"auto"`, a batch looked at here is not one it measures).
        inputs: the batch.
        scheduler: "agenda", "depth", or one added with `scheduler.register_scheduler`;
            None: a compiler's own (under "auto", the one kept), agenda for a block.
    """
    compiler = _compiler(block, scheduler)
    plan = compiler.schedule(list(inputs), scheduler).plan
    schedule = plan.schedule
    launch_op, node_launch, n_outer, n_loop = compiler.planner.launches(schedule)
    # each node's example: its outputs' values are numbered example after example
    values = np.flatnonzero(plan.value_node >= 0)
    node_example = np.full(len(plan.node_op), -1, np.int64)
    node_example[plan.value_node[values]] = np.searchsorted(
        plan.value_offsets, values, side="right") - 1
    node_example = np.maximum.accumulate(np.maximum(node_example, 0))  # nodes of no output
    n_examples = len(plan.value_offsets) - 1
    counts = np.zeros((len(launch_op), max(n_examples, 1)), np.int64)
    np.add.at(counts, (node_launch, node_example), 1)
    labels = op_labels(compiler.program)
    out = []
    for i, o in enumerate(launch_op.tolist()):
        rows = int(counts[i].sum())
        if rows == 0:
            continue
        stage = STAGES[0] if i < n_outer else STAGES[1] if i < n_outer + n_loop else STAGES[2]
        out.append(Launch(stage, o, labels[o], rows, tuple(int(c) for c in counts[i])))
    return out


def describe_schedule(block, inputs: Sequence[Any],
                      schedulers: Sequence[str] = ("depth", "agenda")) -> str:
    """The launches of a batch as text, one line each, for every scheduler in turn.

    For a `Compiler` made with `scheduler="auto"`, a first line says which scheduler
    it kept and the times it measured (or how far the measuring is), and the kept
    one's heading is marked "(kept)".

    >>> import refold as td
    >>> def add(total, x):
    ...     return total + x
    >>> total = td.Map(td.Scalar()) >> td.Fold(td.Function(add), td.Zeros(td.TensorType(())))
    >>> print(describe_schedule(total, [[1.0, 2.0], [3.0]], ["agenda"]))
    agenda: 2 launches (1 before the loop, 1 loop iteration, 0 after it), 3 rows
       #  stage            rows  by input  op
       0  before the loop     2  1 1       add
       1  loop                1  1 0       add

    (The first additions read only input data, so they run before the loop.)
    """
    lines = []
    choice = getattr(block, "scheduler_choice", None)
    if choice is not None:
        lines.append(choice.describe())
    for s in schedulers:
        found = launches(block, inputs, s)
        per_stage = [sum(l_.stage == st for l_ in found) for st in STAGES]
        iterations = f"{per_stage[1]} loop iteration" + ("" if per_stage[1] == 1 else "s")
        kept = " (kept)" if choice is not None and choice.chosen == s else ""
        lines.append(f"{s}{kept}: {len(found)} launches ({per_stage[0]} before the loop, "
                     f"{iterations}, {per_stage[2]} after it), "
                     f"{sum(l_.rows for l_ in found)} rows")
        by = [" ".join(map(str, l_.by_example)) for l_ in found]
        width = max([len("by input")] + [len(b) for b in by])
        lines.append(f"  {'#':>2}  {'stage':<15} {'rows':>5}  {'by input':<{width}}  op")
        for i, (l_, b) in enumerate(zip(found, by)):
            lines.append(f"  {i:>2}  {l_.stage:<15} {l_.rows:>5}  {b:<{width}}  {l_.label}")
    return "\n".join(lines)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError("draw_schedule draws with matplotlib, which Refold does not need "
                          "otherwise: install it with the examples extra, "
                          "pip install 'refold[examples]'") from None
    if "matplotlib.pyplot" not in __import__("sys").modules:
        matplotlib.use("Agg")  # a file is the goal: no window, whatever the backend
    import matplotlib.pyplot as plt
    return matplotlib, plt


def _draw_panel(ax, scheduler: str, found: list, op_row: dict, colours) -> None:
    """One scheduler's launches: a column each, a row per op, a band per input."""
    from matplotlib.patches import Rectangle
    n_ops = len(op_row)
    for st, shade in zip(STAGES, ("#eef3fb", "#fdf6e3", "#eef3fb")):
        idx = [i for i, l_ in enumerate(found) if l_.stage == st]
        if idx:
            ax.axvspan(idx[0] - 0.5, idx[-1] + 0.5, color=shade, zorder=0)
            short = st if len(idx) > 2 else st.split()[0]  # "before", "after"
            ax.text((idx[0] + idx[-1]) / 2, n_ops - 0.45, short, ha="center", va="bottom",
                    fontsize=7, color="#555")
    for i, l_ in enumerate(found):
        row = n_ops - 1 - op_row[l_.op][0]
        x = i - 0.45
        for e, share in enumerate(l_.by_example):
            if share:
                w = 0.9 * share / l_.rows
                ax.add_patch(Rectangle((x, row - 0.4), w, 0.8, color=colours(e % 10),
                                       alpha=0.75, lw=0, gid=f"{scheduler}-{i}-input-{e}"))
                x += w
        ax.text(i, row, str(l_.rows), ha="center", va="center", fontsize=8,
                gid=f"{scheduler}-{i}-rows")
    loop = sum(l_.stage == "loop" for l_ in found)
    rows = sum(l_.rows for l_ in found)
    ax.set_title(f"{scheduler}: {len(found)} launches, {loop} loop iterations, "
                 f"{rows / max(len(found), 1):.1f} rows a launch", fontsize=9, loc="left")
    ax.set_ylim(-0.6, n_ops + 0.1)
    ax.set_yticks(range(n_ops))
    ax.set_yticklabels([label for _, label in sorted(op_row.values(), reverse=True)],
                       fontsize=8)
    ax.tick_params(axis="x", labelsize=7)


def draw_schedule(block, inputs: Sequence[Any], to_file: str | os.PathLike | None = None,
                  schedulers: Sequence[str] = ("depth", "agenda"), title: str | None = None):
    """Draws the launches of one batch under each scheduler, one panel above the other.

    The panels share their launch axis, so that the schedulers' lengths compare at a
    glance. Each panel has a column per launch, in the order the executor runs them (shaded:
    before the loop, the loop's iterations, after it), and a row per op; a launch is a
    cell split into one coloured band per input of the batch (its share of the rows),
    with the number of rows written on it (in an SVG, the group of launch `i`'s row count
    has the id `<scheduler>-<i>-rows`, its band of input `e` `<scheduler>-<i>-input-<e>`).
    So the picture shows what dynamic batching
    does: the same op over many inputs and many nodes of one input in one call, and how
    the depth and agenda schedules differ in the loop.

    Args:
        block: the block expression.
        inputs: the batch (a few small inputs make the clearest picture).
        to_file: where to save it (`.svg`, `.png`, `.pdf`: matplotlib's formats), if
            anywhere. An SVG keeps its text as text.
        schedulers: the schedulers to draw, one panel each.
        title: a title above the panels.

    Returns:
        The matplotlib `Figure` (matplotlib comes with `pip install 'refold[examples]'`).
    """
    matplotlib, plt = _pyplot()
    from matplotlib.patches import Rectangle
    panels = [(s, launches(block, inputs, s)) for s in schedulers]
    ops = sorted({(min(i for i, l_ in enumerate(found) if l_.op == o), o, label)
                  for _, found in panels for o, label in
                  {(l_.op, l_.label) for l_ in found}})
    op_row = {}
    for _, o, label in ops:  # first use in the first panel that has it, top to bottom
        op_row.setdefault(o, (len(op_row), label))
    n_ops, most = len(op_row), max(len(found) for _, found in panels)
    n_inputs = len(inputs)
    colours = matplotlib.colormaps["tab10"].resampled(10)
    label_w = max(len(label) for _, label in op_row.values()) * 0.075 + 0.4
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, sharex=True, figsize=(
        label_w + 0.4 * most + 0.6, len(panels) * (0.36 * n_ops + 0.8) + 0.9))
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # an SVG keeps its text
        for ax, (s, found) in zip(axes[:, 0], panels):
            _draw_panel(ax, s, found, op_row, colours)
        axes[-1][0].set_xlim(-0.6, most - 0.4)
        axes[-1][0].set_xticks(range(most))
        axes[-1][0].set_xlabel("launch, in the order they run", fontsize=8)
        handles = [Rectangle((0, 0), 1, 1, color=colours(e % 10), alpha=0.75)
                   for e in range(min(n_inputs, 10))]
        fig.legend(handles, [f"input {e}" for e in range(min(n_inputs, 10))],
                   loc="lower center", ncol=min(n_inputs, 10), fontsize=7, frameon=False)
        if title:
            fig.suptitle(title, fontsize=10)
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        if to_file is not None:
            fig.savefig(os.fspath(to_file))
    return fig
