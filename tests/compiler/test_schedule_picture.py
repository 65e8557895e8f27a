"""`launches`, `describe_schedule` and `draw_schedule` show how a batch runs, launch by launch."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter

import numpy as np
import pytest

import refold as td
from refold.compiler import Compiler
from refold.compiler.schedule_picture import STAGES, describe_schedule, draw_schedule, launches

H = 4


def words_tree():
    """A tree whose leaves are words read letter by letter: words of different lengths
    end at different depths, which is where depth and agenda batching part."""
    tree = td.ForwardDeclaration(td.PyObjectType(), td.TensorType((H,)), name="tree")
    letter = td.Scalar() >> td.Function(lambda x: x[:, None]) >> td.FC(H)
    word = td.Map(letter) >> td.Fold(td.Concat() >> td.FC(H), td.Zeros(H))
    pair = td.Record((tree(), tree())) >> td.Concat() >> td.FC(H)
    tree.resolve_to(td.OneOf(lambda t: isinstance(t, tuple), {False: word, True: pair}))
    return tree() >> td.FC(2, activation=None)


INPUTS = [(([1.0, 2.0], [3.0, 4.0, 5.0]), [6.0] * 5), ([7.0], ([8.0, 9.0], [1.0] * 4)),
          [2.0] * 4]


@pytest.fixture(scope="module")
def block():
    return words_tree()


def node_counts(compiler, inputs):
    """Per input, its graph's nodes; per op, the batch's nodes."""
    plan = compiler.plan(inputs).plan
    per_op = Counter(plan.node_op.tolist())
    per_input = [compiler.plan([x]).plan.num_nodes for x in inputs]
    return per_op, per_input


@pytest.mark.parametrize("scheduler", ["depth", "agenda"])
def test_launches_account_for_every_node_of_every_input(block, scheduler):
    compiler = Compiler(block, scheduler=scheduler, cache=False)
    found = launches(compiler, INPUTS)
    per_op, per_input = node_counts(compiler, INPUTS)
    rows_per_op = Counter()
    for launch in found:
        rows_per_op[launch.op] += launch.rows
    assert rows_per_op == per_op
    assert [sum(col) for col in zip(*(launch.by_example for launch in found))] == per_input
    assert all(launch.rows == sum(launch.by_example) > 0 for launch in found)
    # before the loop, its iterations, after it: in that order
    stages = [STAGES.index(launch.stage) for launch in found]
    assert stages == sorted(stages) and set(stages) == {0, 1, 2}
    # as many loop launches as the planner gives the executor (none of them empty)
    _, _, _, n_loop = compiler.planner.launches(compiler.plan(INPUTS).schedule)
    assert sum(launch.stage == "loop" for launch in found) == n_loop


def test_agenda_finishes_the_words_before_the_tree_in_fewer_launches(block):
    depth, agenda = (launches(block, INPUTS, s) for s in ("depth", "agenda"))
    assert (len(depth), len(agenda)) == (19, 17)
    loop = [launch.label for launch in agenda if launch.stage == "loop"]
    fold = [i for i, name in enumerate(loop) if "Fold.combine" in name]
    tree = [i for i, name in enumerate(loop) if "OneOf[True]" in name]
    assert max(fold) < min(tree)  # every letter read before any two subtrees combine
    loop = [launch.label for launch in depth if launch.stage == "loop"]
    fold = [i for i, name in enumerate(loop) if "Fold.combine" in name]
    tree = [i for i, name in enumerate(loop) if "OneOf[True]" in name]
    assert max(fold) > min(tree)  # depth interleaves them


def test_ops_of_one_name_are_told_apart_by_where_they_are(block):
    labels = {launch.label for launch in launches(block, INPUTS)}
    assert {"concat (Fold.combine > Pipe[0])", "concat (OneOf[True] > Pipe[1])",
            "FC (Fold.combine > Pipe[1])", "FC (OneOf[True] > Pipe[2])"} <= labels


def test_describe_schedule_prints_a_line_per_launch(block):
    text = describe_schedule(block, INPUTS)
    lines = text.splitlines()
    assert lines[0] == ("depth: 19 launches (2 before the loop, 16 loop iterations, "
                        "1 after it), 95 rows")
    assert len(lines) == 2 + 19 + 2 + 17
    agenda = lines[21:]
    assert agenda[0].startswith("agenda: 17 launches")
    first = launches(block, INPUTS, "agenda")[0]
    assert agenda[2].split() == ["0", *first.stage.split(), str(first.rows),
                                 *map(str, first.by_example), first.label]


def test_draw_schedule_writes_an_svg_of_every_launch_with_its_rows(block, tmp_path):
    path = tmp_path / "schedule.svg"
    fig = draw_schedule(block, INPUTS, path, title="words")
    root = ET.parse(path).getroot()
    groups = {g.get("id"): g for g in root.iter("{http://www.w3.org/2000/svg}g")}
    texts = ["".join(g.itertext()).strip() for g in groups.values()]
    for s in ("depth", "agenda"):
        found = launches(block, INPUTS, s)
        for i, launch in enumerate(found):
            assert "".join(groups[f"{s}-{i}-rows"].itertext()).strip() == str(launch.rows)
            bands = {e for e, n in enumerate(launch.by_example) if n}
            assert {e for e in range(len(INPUTS)) if f"{s}-{i}-input-{e}" in groups} == bands
        assert f"{s}-{len(found)}-rows" not in groups
        assert any(t.startswith(f"{s}: {len(found)} launches") for t in texts)
    assert any("FC (Fold.combine > Pipe[1])" in t for t in texts)
    assert len(fig.axes) == 2
    png = tmp_path / "schedule.png"
    draw_schedule(block, INPUTS[:1], png, schedulers=["agenda"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_draw_schedule_names_the_extra_when_matplotlib_is_missing(block, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"refold\[examples\]"):
        draw_schedule(block, INPUTS)


def test_launches_of_a_batch_of_one_tree_match_its_schedule_statistics():
    block = td.Map(td.Scalar()) >> td.Fold(td.Function(lambda a, b: a + b),
                                           td.Zeros(td.TensorType(())))
    found = launches(block, [[1.0, 2.0, 3.0]], "depth")
    # the first addition reads only data (before the loop), then one a loop iteration
    assert [(launch.stage, launch.rows) for launch in found] == [
        ("before the loop", 1), ("loop", 1), ("loop", 1)]
    assert np.sum([launch.rows for launch in found]) == 3
