"""Helpers shared by the block tests."""

from __future__ import annotations

import contextlib

import pytest
import tensorflow as tf

import refold as td


@contextlib.contextmanager
def raises(exc_type, *fragments):
    """Like `pytest.raises`, and every fragment must appear in the message."""
    with pytest.raises(exc_type) as info:
        yield info
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def neg():
    return td.Function(tf.negative)


def fails_on_eval():
    """A Python-side block that raises when it runs (ZeroDivisionError)."""
    return td.InputTransform(lambda x: 1 / 0)
