"""Errors that speak the user's language: they name the block path and the example.

A type error found while blocks are composed is a plain `TypeError` whose message
starts with the block path (`Pipe[2] > Map > Function 'cell': ...`). A bad input
found while an example is evaluated or expanded is an `InputError`, a `ValueError`
that carries the block path and, in a batch, the example's index.
"""

from __future__ import annotations


class InputError(ValueError):
    """An input that the block expression cannot take.

    Attributes:
        block_path: where in the block expression the input failed, e.g.
            `"Pipe[0] > Record['left'] > Scalar"`.
        reason: what was wrong, e.g. `"expected a number, got 'abc'"`.
        example_index: the example's position in its batch, or None for one input.
    """

    def __init__(self, block_path: str, reason: str, example_index: int | None = None):
        self.block_path = block_path
        self.reason = reason
        self.example_index = example_index
        super().__init__(self._message())

    def _message(self) -> str:
        where = "" if self.example_index is None else f"example {self.example_index}: "
        return f"{where}{self.block_path}: {self.reason}"

    def __str__(self) -> str:
        return self._message()

    def with_example_index(self, index: int) -> InputError:
        """A copy of this error that names the example's index in its batch."""
        err = type(self)(self.block_path, self.reason, index)
        err.__cause__ = self.__cause__
        return err


class BadValueError(ValueError):
    """Raised by an op's input check (`Op.check`); blocks turn it into an `InputError`
    that names their path."""


class InputKeyError(InputError, KeyError):
    """An `InputError` for a missing key or index; also a `KeyError`, as in Fold."""
