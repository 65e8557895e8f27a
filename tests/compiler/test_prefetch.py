"""`compiler.feeding.prefetch.Prefetch`: items made on a thread, in order, a bounded number
ahead; errors raised at their item; the thread stopped and joined on close."""

from __future__ import annotations

import threading

import pytest

from refold.compiler.feeding.prefetch import Prefetch


class Made:
    """An endless generator that counts the items it made and whether it was closed."""

    def __init__(self):
        self.made, self.closed_in = 0, None

    def __iter__(self):
        try:
            while True:
                self.made += 1
                yield self.made
        finally:
            self.closed_in = threading.current_thread().name


def wait_until(predicate, what: str) -> None:
    done = threading.Event()
    for _ in range(3000):  # up to 30 s on a loaded machine; the check is not on time
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError(f"never: {what}")


def test_the_items_come_in_order_then_none():
    ahead = Prefetch(iter(range(50)), size=3)
    assert [ahead.next() for _ in range(52)] == [*range(50), None, None]
    wait_until(ahead.ended, "the thread ends after the last item")


def test_at_most_size_items_wait_ahead_of_the_reader():
    items = Made()
    ahead = Prefetch(iter(items), size=4, name="refold-test-bounded")
    assert ahead.next() == 1
    wait_until(ahead._queue.full, "the queue fills")
    assert items.made <= 1 + 4 + 1  # read, waiting, and at most one being put
    ahead.close()
    assert ahead.ended()
    assert items.closed_in == "refold-test-bounded"  # the generator's cleanup, in the thread


def test_an_error_is_raised_at_the_item_where_it_happened():
    def items():
        yield 1
        yield 2
        raise KeyError("the third")

    ahead = Prefetch(items(), size=8)
    assert [ahead.next(), ahead.next()] == [1, 2]
    with pytest.raises(KeyError, match="the third"):
        ahead.next()
    assert ahead.next() is None


def test_leaving_a_loop_over_it_stops_and_joins_the_thread():
    items = Made()
    ahead = Prefetch(iter(items), size=2, name="refold-test-loop")
    for item in ahead:
        if item == 5:
            break
    assert ahead.ended() and items.closed_in == "refold-test-loop"
    assert not [t for t in threading.enumerate() if t.name == "refold-test-loop"]


def test_a_loop_over_it_ends_with_the_items_or_raises_their_error():
    assert list(Prefetch(iter("abc"), size=1)) == ["a", "b", "c"]

    def failing():
        yield "a"
        raise ValueError("bad item")

    seen = []
    with pytest.raises(ValueError, match="bad item"):
        for item in Prefetch(failing()):
            seen.append(item)
    assert seen == ["a"]


def test_a_shared_stop_event_stops_the_thread():
    stop = threading.Event()
    ahead = Prefetch(iter(Made()), size=1, stop=stop)
    stop.set()
    wait_until(ahead.ended, "the thread sees the stop")
