"""The DyNet paper's Table 1 on this machine: training sentences/s at batch 64.

    python -m benchmarks.peers.table1 [--rounds 3] [--items 256]

Every task runs on five sides, interleaved round by round as `benchmarks.peers.run`
does: DyNet 2.1.2 with agenda autobatching, by depth, and with no batching (one
worker process each, one CPU thread), and Refold's `Model.fit` with the agenda and
the depth scheduler (Refold's default threads). The table gives each side's
median sentences/s (trees/s for the TreeLSTM), Refold agenda ÷ DyNet agenda per
round (median [min-max]), and the paper's own CPU figures (Neubig et al. 2017,
Table 1) for reference; those come from other data, sizes and hardware, so only the
ratios within a row here compare like with like. The paper's transition parser
trains with exploration (`explore`: its own predictions, the dynamic oracle's loss);
static-oracle training (`parser`) is shown below it, without a paper figure. A task
left out of `--tasks` shows "-".
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile

from benchmarks.peers import protocol, run

TASKS = {"bilstm": "BiLSTM tagger", "chartagger": "BiLSTM w/ char",
         "treelstm": "TreeLSTM", "explore": "transition parser",
         "parser": "transition parser, static oracle"}
PAPER_CPU = {  # sentences/s, Neubig, Goldberg and Dyer (2017), Table 1, CPU
    "bilstm": {"none": 16.8, "depth": 139, "agenda": 156},
    "chartagger": {"none": 15.7, "depth": 93.8, "agenda": 132},
    "treelstm": {"none": 50.2, "depth": 348, "agenda": 357},
    # the paper's parser trains with exploration (its own predictions, the dynamic
    # oracle), as the "explore" workload does; static-oracle training has no paper row
    "explore": {"none": 16.8, "depth": 61.0, "agenda": 61.2},
    "parser": None,
}
MEASURED = ("bilstm", "chartagger", "treelstm", "explore", "parser")
"""The tasks this runner has workloads for (`benchmarks.peers.run.WORKLOADS`)."""

DYNET_SIDES = {"dynet": 1, "dynet-depth": 2, "dynet-none": 0}  # name: --autobatch
COLUMNS = {"refold": "Refold agenda", "refold-depth": "Refold depth",
           "dynet": "DyNet agenda", "dynet-depth": "DyNet depth",
           "dynet-none": "DyNet no batching"}


def format_table(results: dict, names: list) -> str:
    """The markdown table: one row per task of `TASKS` ("-" where not run)."""
    header = ["task", *(COLUMNS[n] for n in names)]
    if "dynet" in names and "refold" in names:
        header.append("Refold agenda ÷ DyNet agenda")
    header.append("paper, DyNet CPU: none / depth / agenda")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task, title in TASKS.items():
        paper = PAPER_CPU[task]
        quoted = "-" if paper is None else \
            f"{paper['none']:g} / {paper['depth']:g} / {paper['agenda']:g}"
        row = results.get(task)
        if row is None:  # not asked for in this run
            cells = ["-"] * (len(header) - 2)
        else:
            cells = [f"{row['median'][n]:.0f}" for n in names]
            if "dynet" in names and "refold" in names:
                r = row["ratio"]["refold"]
                cells.append(f"{r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}]")
        lines.append("| " + " | ".join([title, *cells, quoted]) + " |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(MEASURED))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--items", type=int, default=256, help="sentences per timed pass")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peer", choices=["dynet", "none"], default="dynet")
    parser.add_argument("--lr", type=float, default=0.1, help="plain SGD, every side")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    tasks = args.tasks.split(",")
    unknown = sorted(set(tasks) - set(MEASURED))
    if unknown:
        parser.error(f"no workload for {unknown}; measured tasks: {', '.join(MEASURED)}")
    if args.peer == "dynet" and not os.path.exists(run.DYNET_PYTHON):
        print(f"DyNet's interpreter {run.DYNET_PYTHON} is missing: build it once with\n"
              f"    {run.DYNET_SETUP}\nor run Refold alone with --peer none.", file=sys.stderr)
        raise SystemExit(2)
    n = max(args.items, args.batch)
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    sides: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        data_path = os.path.join(tmp, "data.json")
        protocol.save_data(data_path, run.make_data(tasks, n, args.seed))
        try:
            if args.peer == "dynet":
                for name, autobatch in DYNET_SIDES.items():
                    sides[name] = protocol.Worker(name, [
                        run.DYNET_PYTHON, os.path.join(run.HERE, "dynet_worker.py"),
                        "--data", data_path, "--lr", str(args.lr),
                        "--autobatch", str(autobatch)])
            from benchmarks.peers.refold_side import RefoldSide
            data = protocol.load_data(data_path, tuples=True)
            for name, scheduler in (("refold", "agenda"), ("refold-depth", "depth")):
                sides[name] = RefoldSide(data, tasks, args.lr, scheduler)
            results = {t: run.measure(sides, t, "train", args.batch, n, args.rounds)
                       for t in tasks}
        finally:
            for side in sides.values():
                side.close()
    names = list(sides)
    meta = {"date": started.strftime("%Y-%m-%d %H:%M UTC"), "load_before": load_before,
            "load_after": os.getloadavg(), "sides": names, "batch": args.batch, "items": n,
            "command": "python -m benchmarks.peers.table1 " + " ".join(argv),
            "commit": run._commit(), "machine": run.machine()}
    print(f"{meta['command']}\n{meta['date']}, commit {meta['commit']}; load average "
          f"{' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in meta['load_after'])} after")
    print(f"machine: {meta['machine']}")
    print(f"training sentences/s (trees/s for the TreeLSTM) at batch {args.batch}, "
          f"{n} items a pass, median of {args.rounds} interleaved rounds")
    print(format_table(results, names))
    return {"meta": meta, "results": results}


if __name__ == "__main__":
    main()
