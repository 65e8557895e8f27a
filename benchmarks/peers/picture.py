"""Refold ÷ DyNet by batch size at a glance, drawn from `python -m benchmarks.peers --json`.

    python -m benchmarks.peers.picture benchmarks/results/peers.json peers.svg

One panel per mode (train, then infer; the parser's greedy parsing joins the infer panel
as its own line), one line per workload: the median ratio at each batch size, its
[min-max] over the rounds as a bar, on log axes (so 2x faster and 2x slower sit as far
from parity). A solid line marks parity (1.0), a dashed one the target (1.5). The docs
build redraws it from the committed `benchmarks/results/peers.json` (docs/hooks.py), and
`caption` says what the figures measured: the machine, the date, the commit and the load.

In an SVG, workload `w`'s line in panel `p` (`train`, `infer`) is the group `<p>-<w>`
(greedy parsing's `infer-parser-parse`; its points are the markers of that group, one per
batch size, in increasing batch size), its [min-max] bars `<p>-<w>-range`, and the parity
and target lines `<p>-parity` and `<p>-target`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

NAMES = {"treelstm": "TreeLSTM", "bilstm": "BiLSTM tagger", "chartagger": "char BiLSTM tagger",
         "parser": "parser", "explore": "parser, exploration training"}
"""Each workload's name on the picture, in the legend's order."""
PANELS = {"train": ("train", "Training (Model.fit)"),
          "infer": ("infer", "Inference (Model.predict)"),
          "parse": ("infer", "Inference (Model.predict)")}
"""Mode -> (the panel it is drawn in, that panel's title)."""
PARITY, TARGET = 1.0, 1.5


def load(path: str | os.PathLike) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def series(data: dict, side: str = "refold") -> dict[str, dict[str, tuple[str, list]]]:
    """{panel: {line: (its label, [(B, median, min, max), ...] by increasing B)}} of
    `side` ÷ DyNet; a line is a workload (`treelstm`), or the parser's greedy parsing
    (`parser-parse`). Workloads or modes without a ratio (`--peer none`) are left out."""
    out: dict[str, dict[str, tuple[str, list]]] = {}
    order = [w for w in NAMES if w in data["results"]] + sorted(
        set(data["results"]) - set(NAMES))
    for workload in order:
        for mode in ("train", "infer", "parse"):
            points = []
            for b, row in data["results"][workload].items():
                ratio = row.get(mode, {}).get("ratio", {}).get(side)
                if ratio:
                    points.append((int(b), ratio["median"], ratio["min"], ratio["max"]))
            if points:
                line, label = workload, NAMES.get(workload, workload)
                if mode == "parse":
                    line, label = f"{workload}-parse", f"{label}, greedy parsing"
                out.setdefault(PANELS[mode][0], {})[line] = (label, sorted(points))
    return out


def _load_range(meta: dict) -> tuple[float, float]:
    """The 1-minute load average's lowest and highest value, before and after the run."""
    if "load" in meta:
        return tuple(meta["load"])
    values = [meta["load_before"][0], meta["load_after"][0]]
    return min(values), max(values)


def caption(data: dict) -> str:
    """One sentence (Markdown) saying what the figures measured."""
    meta = data["meta"]
    low, high = _load_range(meta)
    text = (f"Measured on {meta['machine']}, {meta['date']}, commit {meta['commit']}, "
            f"load average {low:.1f}-{high:.1f}, {meta['rounds']} interleaved "
            f"round{'s' * (meta['rounds'] != 1)}: "
            f"`{meta['command']}`")
    if meta.get("source"):
        text += f" ({meta['source']})"
    return text + "."


def draw(data: dict, to_file: str | os.PathLike | None = None, side: str = "refold"):
    """The picture (a matplotlib Figure, closed), saved to `to_file` if given (an SVG
    keeps its text as text)."""
    import matplotlib
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # a file is the goal: no window, whatever the backend
    import matplotlib.pyplot as plt
    lines = series(data, side)
    if not lines:
        raise ValueError(f"the results hold no ratio of {side!r} to DyNet (a run with "
                         "--peer none?)")
    keys = list(dict.fromkeys(key for panel in lines.values() for key in panel))
    colours = {key: f"C{k % 10}" for k, key in enumerate(keys)}
    panels = [p for p in ("train", "infer") if p in lines]
    everything = [p for panel in lines.values() for _, ps in panel.values() for p in ps]
    sizes = sorted({p[0] for p in everything})
    values = [v for p in everything for v in p[1:]] + [PARITY, TARGET]
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "refold"}):
        fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 0.4, 4.2),
                                 sharey=True, squeeze=False)
        for ax, panel in zip(axes[0], panels):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.axhline(PARITY, color="#333", linewidth=1, gid=f"{panel}-parity")
            ax.axhline(TARGET, color="#333", linewidth=1, linestyle="--",
                       gid=f"{panel}-target")
            for key, (label, points) in lines[panel].items():
                b, median, low, high = zip(*points)
                ax.vlines(b, low, high, color=colours[key], alpha=0.35, linewidth=3,
                          gid=f"{panel}-{key}-range")
                ax.plot(b, median, marker="o", color=colours[key], label=label,
                        linestyle="--" if key.endswith("-parse") else "-",
                        gid=f"{panel}-{key}")
            ax.set_title(PANELS[panel][1], fontsize=10)
            ax.set_xticks(sizes, [str(b) for b in sizes])
            ax.minorticks_off()
            ax.set_xlim(sizes[0] / 1.5, sizes[-1] * 1.5)
            ax.set_xlabel("batch size")
            ax.grid(alpha=0.25)
        lo, hi = min(values) / 1.2, max(values) * 1.2
        ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10) if lo <= t <= hi]
        first = axes[0][0]
        first.set_ylim(lo, hi)
        first.set_yticks(ticks, [f"{t:g}" for t in ticks])
        first.set_ylabel("Refold ÷ DyNet, items/s (> 1: Refold faster)")
        first.text(sizes[0] / 1.4, PARITY * 1.03, "parity", fontsize=7, color="#333")
        first.text(sizes[0] / 1.4, TARGET * 1.03, "target", fontsize=7, color="#333")
        named = {}  # every line once, in the order drawn, above the panels
        for ax in axes[0]:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                named.setdefault(label, handle)
        fig.legend(named.values(), named.keys(), loc="upper center", frameon=False,
                   ncol=min(len(named), 3), fontsize=8)
        meta = data["meta"]
        low, high = _load_range(meta)
        fig.text(0.01, 0.01, f"{meta['machine']}; {meta['date']}, commit {meta['commit']}, "
                 f"load {low:.1f}-{high:.1f}; median and [min-max] of {meta['rounds']} "
                 f"interleaved round{'s' * (meta['rounds'] != 1)}", fontsize=7, color="#555")
        rows = -(-len(named) // 3)
        fig.tight_layout(rect=(0, 0.04, 1, 1 - 0.055 * rows))
        if to_file is not None:
            fig.savefig(os.fspath(to_file))
    plt.close(fig)
    return fig


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a JSON file of python -m benchmarks.peers --json")
    parser.add_argument("picture", help="where to draw it (.svg, .png, .pdf)")
    parser.add_argument("--side", default="refold",
                        help="the Refold side set against DyNet (refold, refold-1t, ...)")
    args = parser.parse_args(argv)
    data = load(args.results)
    draw(data, args.picture, args.side)
    print(f"{args.picture}: {caption(data)}")


if __name__ == "__main__":
    main()
