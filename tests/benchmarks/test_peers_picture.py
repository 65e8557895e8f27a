"""The picture of Refold ÷ DyNet by batch size: drawn from the runner's own results (made
here by `run.measure` with sides of known speed), a line per workload and panel, a point
per batch size, each where its ratio puts it against the parity and target lines."""

from __future__ import annotations

import json
import math
import os
import re
import xml.etree.ElementTree as ET

import pytest

from benchmarks.peers import picture, run

SVG = "{http://www.w3.org/2000/svg}"
SIZES = (1, 4, 16, 64)
# Refold's items/s over DyNet's: workload -> mode -> B -> ratio (DyNet takes 1 s a pass)
RATIOS = {"treelstm": {"train": {1: 0.5, 4: 1.0, 16: 2.0, 64: 3.0},
                       "infer": {1: 0.4, 4: 1.5, 16: 2.5, 64: 4.0}},
          "bilstm": {"train": {1: 0.25, 4: 0.8, 16: 1.2, 64: 2.0},
                     "infer": {1: 0.3, 4: 1.1, 16: 1.9, 64: 3.5}},
          "parser": {"train": {1: 0.6, 4: 0.9, 16: 1.3, 64: 1.7},
                     "infer": {1: 0.7, 4: 1.2, 16: 2.2, 64: 2.9},
                     "parse": {1: 0.9, 4: 1.4, 16: 2.4, 64: 3.1}}}


class Side:
    """A side whose pass takes `seconds(request)`, so that its rate is known."""

    def __init__(self, seconds):
        self.seconds = seconds

    def run(self, request):
        return {"seconds": self.seconds(request)}


def results(tmp_path) -> dict:
    """The runner's results of RATIOS (three rounds; the middle one the stated ratio, the
    others 10% either side), written to JSON and read back as `--json` leaves them."""
    rounds = iter([])

    def refold(request):
        return 1.0 / (RATIOS[request["workload"]][request["op"]][request["batch"]]
                      * next(rounds))

    sides = {"dynet": Side(lambda request: 1.0), "refold": Side(refold)}
    out = {}
    for workload, modes in RATIOS.items():
        out[workload] = {}
        for b in SIZES:
            out[workload][b] = {}
            for mode in modes:
                rounds = iter([1.0, 0.9, 1.0, 1.1])  # the untimed pass, then the rounds
                out[workload][b][mode] = run.measure(sides, workload, mode, b, 8, 3)
    data = {"meta": {"date": "2026-12-01 10:00 UTC", "load_before": (0.5, 0.6, 0.7),
                     "load_after": (1.25, 0.9, 0.8), "commit": "abc1234",
                     "machine": "Some CPU, 2 cores; TensorFlow 2.21.0, oneDNN off",
                     "command": "python -m benchmarks.peers --rounds 3", "rounds": 3,
                     "sides": ["dynet", "refold"]},
            "results": out}
    path = tmp_path / "peers.json"
    path.write_text(json.dumps(data))
    return picture.load(path)


def test_the_series_hold_every_workload_mode_and_batch_size(tmp_path):
    lines = picture.series(results(tmp_path))
    assert list(lines) == ["train", "infer"]
    assert list(lines["train"]) == ["treelstm", "bilstm", "parser"]
    assert list(lines["infer"]) == ["treelstm", "bilstm", "parser", "parser-parse"]
    assert lines["infer"]["parser-parse"][0] == "parser, greedy parsing"
    label, points = lines["train"]["bilstm"]
    assert label == "BiLSTM tagger"
    for (b, median, low, high), ratio in zip(points, RATIOS["bilstm"]["train"].values()):
        assert b in SIZES and median == pytest.approx(ratio)
        assert (low, high) == (pytest.approx(0.9 * ratio), pytest.approx(1.1 * ratio))
    assert [p[0] for p in points] == list(SIZES)


def _points(group) -> list[tuple[float, float]]:
    """The marker positions of a line's group: (x, y) in the SVG's coordinates."""
    return [(float(u.get("x")), float(u.get("y"))) for u in group.iter(f"{SVG}use")]


def _level(group) -> float:
    """The height of a horizontal line's group."""
    d = next(group.iter(f"{SVG}path")).get("d")
    ys = {round(float(y), 3) for y in re.findall(r"[ML] [-\d.]+ ([-\d.]+)", d)}
    assert len(ys) == 1, d
    return ys.pop()


def test_each_point_sits_where_its_ratio_puts_it_on_log_axes(tmp_path):
    path = tmp_path / "peers.svg"
    picture.draw(results(tmp_path), path)
    groups = {g.get("id"): g for g in ET.parse(path).getroot().iter(f"{SVG}g")}
    for panel, modes in (("train", ("train",)), ("infer", ("infer", "parse"))):
        parity, target = _level(groups[f"{panel}-parity"]), _level(groups[f"{panel}-target"])
        assert target < parity  # higher up the page
        lines = [(w, m) for w, by_mode in RATIOS.items() for m in by_mode if m in modes]
        assert len(lines) == (3 if panel == "train" else 4)
        xs = None
        for workload, mode in lines:
            key = f"{workload}-parse" if mode == "parse" else workload
            points = _points(groups[f"{panel}-{key}"])
            assert len(points) == len(SIZES)
            # log axes: a ratio's height above parity is its log over the target's log
            for (_, y), ratio in zip(points, RATIOS[workload][mode].values()):
                assert (parity - y) / (parity - target) == pytest.approx(
                    math.log(ratio) / math.log(1.5), abs=1e-3)
            # batch sizes on a log axis, the same in every line of a panel
            x = [p[0] for p in points]
            assert [(a - x[0]) / (x[-1] - x[0]) for a in x] == pytest.approx(
                [math.log(b) / math.log(SIZES[-1]) for b in SIZES], abs=1e-3)
            assert xs is None or x == pytest.approx(xs)
            xs = x
            assert f"{panel}-{key}-range" in groups
    texts = " ".join(t.text or "" for t in ET.parse(path).getroot().iter(f"{SVG}text"))
    for name in ("TreeLSTM", "BiLSTM tagger", "parser, greedy parsing", "commit abc1234",
                 "Some CPU", "load 0.5-1.2"):
        assert name in texts, name


def test_the_caption_says_machine_date_commit_load_and_command(tmp_path):
    text = picture.caption(results(tmp_path))
    assert text == ("Measured on Some CPU, 2 cores; TensorFlow 2.21.0, oneDNN off, "
                    "2026-12-01 10:00 UTC, commit abc1234, load average 0.5-1.2, 3 "
                    "interleaved rounds: `python -m benchmarks.peers --rounds 3`.")


def test_a_run_without_dynet_has_nothing_to_draw(tmp_path):
    data = results(tmp_path)
    for by_b in data["results"].values():
        for row in by_b.values():
            for mode in row.values():
                del mode["ratio"]
    with pytest.raises(ValueError, match="--peer none"):
        picture.draw(data, tmp_path / "none.svg")


def test_the_committed_results_draw_and_say_what_they_measured(tmp_path, capsys):
    path = os.path.join(run.ROOT, "benchmarks", "results", "peers.json")
    data = picture.load(path)
    meta = data["meta"]
    assert all(meta[k] for k in ("machine", "date", "commit", "command", "rounds", "load"))
    lines = picture.series(data)
    assert {"treelstm", "bilstm"} <= set(lines["train"]) and set(lines) == {"train", "infer"}
    picture.main([path, str(tmp_path / "peers.svg")])
    assert meta["commit"] in capsys.readouterr().out
    assert ET.parse(tmp_path / "peers.svg").getroot().tag == f"{SVG}svg"
