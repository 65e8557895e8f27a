"""Errors that speak the user's language: they name the block path and the example.

A type error found while blocks are composed is a plain `TypeError` whose message
starts with the block path (`Pipe[2] > Map > Function 'cell': ...`). A bad input
found while an example is evaluated or expanded is an `InputError`, a `ValueError`
that carries the block path, where inside the example it failed (a data path such as
`['children'][1]['tok']`) and, in a batch, the example's index. A fault of a
block's implementation or of an evaluator is an `InternalError`, never blamed on
the input.
"""

from __future__ import annotations


class InputError(ValueError):
    """An input that the block expression cannot take.

    Attributes:
        block_path: where in the block expression the input failed, e.g.
            `"Pipe[0] > Record['left'] > Scalar"`.
        reason: what was wrong, e.g. `"expected a number, got 'abc'"`.
        example_index: the example's position in its batch, or None for one input.
        data_path: where inside the example the block failed, as item and attribute
            accesses from the example (`"['children'][1]['tok']"`; `""` for the
            example itself), or None if not known.
    """

    def __init__(self, block_path: str, reason: str, example_index: int | None = None,
                 data_path: str | None = None):
        self.block_path = block_path
        self.reason = reason
        self.example_index = example_index
        self.data_path = data_path
        self._inputs: list = []  # the failing block's input, then its callers' (unwinding)
        super().__init__(self._message())

    def _message(self) -> str:
        where = "" if self.example_index is None else f"example {self.example_index}"
        if self.data_path:
            where += f" at {self.data_path}" if where else f"at {self.data_path}"
        return f"{where + ': ' if where else ''}{self.block_path}: {self.reason}"

    def __str__(self) -> str:
        return self._message()

    def __reduce__(self):
        # pickled by its fields (a worker process sends it to the parent)
        return type(self), (self.block_path, self.reason, self.example_index, self.data_path)

    def with_example_index(self, index: int) -> InputError:
        """A copy of this error that names the example's index in its batch."""
        err = type(self)(self.block_path, self.reason, index, self.data_path)
        err.__cause__ = self.__cause__
        return err

    def note_input(self, x) -> None:
        """Records `x`, the input of a block the error is unwinding through (innermost
        first), for `locate_in`."""
        if not self._inputs or self._inputs[-1] is not x:
            self._inputs.append(x)

    def locate_in(self, example) -> InputError:
        """Sets `data_path` to where the failing block's input sits inside `example`
        (as far as the inputs noted on the way out can be found in it) and forgets
        those inputs. Returns self."""
        if self.data_path is None and self._inputs:
            from refold.blocks.evaluation.data_paths import locate
            self.data_path = locate(example, self._inputs[::-1])
        self._inputs = []
        return self


class BadValueError(ValueError):
    """Raised by an op's input check (`Op.check`); blocks turn it into an `InputError`
    that names their path."""


class InputKeyError(InputError, KeyError):
    """An `InputError` for a missing key or index; also a `KeyError`, as in Fold."""


class InternalError(RuntimeError):
    """A fault of a block's implementation or of an evaluator, not of the input.

    Blocks pass it through unwrapped (the innermost block being evaluated fills in
    `block_path`), so it is never reported as an `InputError` nor blamed on an example.
    Evaluators subclass it (e.g. `compiler.graphs.lowering.UnloweredOpError`).

    Attributes:
        reason: what went wrong and how to fix it.
        block_path: the block that was being evaluated, or None if not known yet.
    """

    def __init__(self, reason: str, block_path: str | None = None):
        self.reason = reason
        self.block_path = block_path
        super().__init__(reason, block_path)

    def __str__(self) -> str:
        return self.reason if self.block_path is None else f"{self.block_path}: {self.reason}"
