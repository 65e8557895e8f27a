"""The engine's own error: a fault of the engine or of the op graph handed to it.

The scheduler knows nothing of blocks, so it cannot raise `refold.blocks.InternalError`;
an `EngineError` means the same kind of thing (a bug to report, never a bad input).
"""


class EngineError(RuntimeError):
    """An op graph the engine cannot run because its own description is inconsistent
    (e.g. an op reads a value that its layout says is computed after it)."""
