"""Which items of a stream each worker reads (`compiler.feeding.shards`), checked without a
strategy: a worker's parts of every step, the files it opens, the lines it parses,
the steps a resumed run reads past; `Lines` of several files and its `LineError`."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

import refold as td
from refold.compiler import Model
from refold.compiler.distribute.sharded_streams import decode_layout, encode_layout
from refold.compiler.feeding.shards import Shard, read_steps, steps_in_order
from refold.compiler.feeding.streams import LineError, StreamFeeder
from tests.compiler import factories


def shards(batch_size: int, workers: int, per_worker: int = 1) -> list[Shard]:
    replicas = workers * per_worker
    return [Shard.of(batch_size, replicas, range(w * per_worker, (w + 1) * per_worker))
            for w in range(workers)]


@pytest.mark.parametrize("n, batch_size, workers, per_worker",
                         [(23, 8, 2, 1), (23, 7, 3, 1), (10, 5, 2, 2), (9, 3, 4, 1),
                          (4, 1, 2, 1)])
def test_by_position_the_workers_parts_of_a_step_are_one_devices_batch(
        n, batch_size, workers, per_worker):
    steps = list(zip(*[read_steps(range(n), s) for s in
                       shards(batch_size, workers, per_worker)]))
    assert len(steps) == -(-n // batch_size)  # as many steps on every worker
    for s, step in enumerate(steps):
        items = [x for worker in step for part in worker for x in part.records]
        assert items == list(range(s * batch_size, min(n, (s + 1) * batch_size)))
        for worker in step:
            assert len(worker) == per_worker
            for part in worker:
                assert part.records == part.positions  # positions count the stream


def test_a_replicas_part_is_cut_as_a_lists_batch_is():
    from refold.compiler.distribute.strategy import replica_parts
    (w0, w1) = shards(10, 2, per_worker=2)
    step0 = [p.records for p in next(read_steps(range(10), w0))] + \
        [p.records for p in next(read_steps(range(10), w1))]
    assert step0 == [p.tolist() for p in replica_parts(10, 10, 4)[0]]


def lines_file(tmp_path, name: str, ids, bad=()) -> str:
    path = tmp_path / name
    path.write_text("".join("{oops\n" if i in bad else json.dumps({"id": i}) + "\n"
                            for i in ids))
    return str(path)


class Opened(td.Lines):
    """`Lines` recording the files it opens."""

    opened: list = []

    def lines(self, paths=None):
        for path in self.paths if paths is None else paths:
            Opened.opened.append(path)
            yield from super().lines([path])


def test_by_file_a_worker_opens_only_its_files(tmp_path):
    paths = [lines_file(tmp_path, f"f{k}.jsonl", range(10 * k, 10 * k + 3 + k))
             for k in range(5)]
    source = Opened(paths, json.loads)
    got = []
    for shard in shards(4, 2):
        Opened.opened = []
        got.append([[json.loads(r.text)["id"] for p in step for r in p.records]
                    for step in read_steps(source, shard)])
        assert Opened.opened == paths[shard.worker::2]
    # worker 0: files 0, 2, 4 (3 + 5 + 7 lines), worker 1: files 1, 3 (4 + 6), 2 a step
    assert got[0][:3] == [[0, 1], [2, 20], [21, 22]] and len(got[0]) == 8
    assert got[1][:3] == [[10, 11], [12, 13], [30, 31]] and len(got[1]) == 5
    # fewer files than workers: by position
    assert not shards(4, 8)[0].by_file(source) and shards(4, 5)[0].by_file(source)
    assert not Shard.single(4).by_file(source)


class CountedBatches(keras.utils.PyDataset):
    def __init__(self, n):
        super().__init__()
        self.n, self.fetched = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, b):
        self.fetched.append(b)
        return [float(b)] * 3


def test_a_pydataset_worker_fetches_only_its_batches():
    ds = CountedBatches(5)
    w1 = shards(6, 2, per_worker=2)[1]
    steps = list(read_steps(ds, w1, skip=1))
    assert ds.fetched == [3]  # batches 1, 3: the first read past, not fetched
    assert steps[0] is None
    assert [[p.records for p in s] for s in steps[1:]] == [[[3.0, 3.0], [3.0]]]


def tree_lines(tmp_path, n: int, bad=()):
    from tests.compiler.test_model import sign_data
    trees, y = sign_data(n, seed=31)
    path = tmp_path / "trees.jsonl"
    path.write_text("".join("{oops\n" if i in bad else json.dumps([t, int(v)]) + "\n"
                            for i, (t, v) in enumerate(zip(trees, y))))
    return str(path), trees, y


def test_a_worker_parses_only_its_lines_and_a_resumed_run_none_it_reads_past(tmp_path):
    path, _, _ = tree_lines(tmp_path, 20)
    parsed = []

    def parse(line):
        parsed.append(line)
        tree, label = json.loads(line)
        return tuplify(tree), label

    model = Model(factories.tree_sign())
    shard = shards(4, 2)[1]  # worker 1 of 2, one replica: lines 2, 3 of every 4
    feeder = StreamFeeder(model.pipeline, td.Lines(path, parse), 4, labelled=True,
                          shard=shard, endless=True, resume=lambda: 2)
    raws = list(zip(range(4), feeder.batches()))
    assert [r.positions.tolist() for _, r in raws] == [[10, 11], [14, 15], [18, 19],
                                                       [2, 3]]
    # steps 0, 1 read past; then every step of the pass and on into the next
    assert len(parsed) == 8


def tuplify(t):
    return tuple(tuplify(s) for s in t) if isinstance(t, list) else t


def test_lines_of_several_files_and_a_line_that_does_not_parse(tmp_path):
    a = lines_file(tmp_path, "a.jsonl", [0, 1])
    b = lines_file(tmp_path, "b.jsonl", [2, 3, 4], bad={3})
    lines = td.Lines([a, b], json.loads)
    assert lines.paths == [a, b] and repr(lines).startswith("Lines([")
    with pytest.raises(LineError, match=r"b.jsonl:2: cannot parse the line") as err:
        list(lines)
    assert isinstance(err.value, td.InputError) and isinstance(err.value, ValueError)
    with pytest.raises(ValueError, match="at least one file"):
        td.Lines([])
    with pytest.raises(FileNotFoundError):
        td.Lines([a, str(tmp_path / "missing")])


def test_a_line_that_does_not_parse_is_named_or_skipped_by_fit(tmp_path):
    from tests.compiler.test_model import compiled
    path, trees, y = tree_lines(tmp_path, 12, bad={7})

    def parse(line):
        tree, label = json.loads(line)
        return tuplify(tree), label
    model = compiled(Model(factories.tree_sign()))
    with pytest.raises(LineError, match=r"example 7: .*trees.jsonl:8: cannot parse"):
        model.fit(td.Lines(path, parse), batch_size=4, verbose=0)
    skipping = compiled(Model(factories.tree_sign(), on_bad_example="skip"))
    with pytest.warns(UserWarning, match="skipping the inputs of x.*trees.jsonl:8"):
        skipping.fit(td.Lines(path, parse), batch_size=4, verbose=0)
    assert skipping.skipped_examples == [7]
    # an input that parses but does not fit the block: its position, file and line
    with open(path, "w") as f:
        f.write("".join(json.dumps([t, int(v)]) + "\n" for t, v in zip(trees, y)))
        f.write(json.dumps(["not a tree", 1]) + "\n")
    with pytest.raises(td.InputError, match=r"example 12: .*Scalar.*\(at .*trees.jsonl:13\)"):
        model.fit(td.Lines(path, parse), batch_size=4, verbose=0)


def test_steps_in_order_of_several_replicas_per_worker():
    batches = list(steps_in_order(range(11), batch_size=6, workers=2, replicas_per_worker=2))
    assert batches == [list(range(6)), list(range(6, 11))]


def test_a_labels_layout_survives_the_census_encoding():
    for layout in [("int64", (), False), ("float32", (3, 2), True), ("int32", (1,), False)]:
        assert decode_layout(encode_layout(layout)) == layout
    assert (encode_layout(None) == -1).all()


def test_a_stream_started_at_a_later_epoch_reads_on_where_a_whole_run_would_be(tmp_path):
    from tests.compiler.test_model import compiled
    path, _, _ = tree_lines(tmp_path, 20)

    def parse(line):
        tree, label = json.loads(line)
        return tuplify(tree), label

    def run(*calls):
        model = compiled(Model(factories.tree_sign()))
        for first, last in calls:
            model.fit(td.Lines(path, parse), batch_size=4, steps_per_epoch=3,
                      initial_epoch=first, epochs=last, verbose=0, shuffle=False)
        return model.get_weights()
    whole, resumed = run((0, 3)), run((0, 1), (1, 3))
    for a, b in zip(whole, resumed, strict=True):
        np.testing.assert_array_equal(a, b)
