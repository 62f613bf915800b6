"""Exceptions raised by ckpt_tools.

Every error the library raises on purpose derives from :class:`CheckpointError`, so callers (and
the CLI) can catch one type. Each subclass carries an ``exit_code`` used by the ``ckpt`` command;
the codes are documented in the README ("Exit codes and errors").
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base class for every error ckpt_tools raises about a checkpoint or its use.

    Messages follow one pattern: what is wrong, where (file and byte offset when known), and
    what was expected.
    """

    exit_code = 1


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint exists at the given path (missing file, prefix, or state-file target)."""

    exit_code = 3


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is truncated, malformed, or fails a checksum."""

    exit_code = 4

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if offset is not None:
                where += f" at byte {offset}"
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.offset = offset


class UnsupportedFormatError(CheckpointError):
    """The file is a checkpoint (or looks like one) but uses a feature we cannot read."""

    exit_code = 5


class EmaError(CheckpointError):
    """EMA shadows are missing or do not match the variables they should replace."""

    exit_code = 6


class OutputError(CheckpointError):
    """An output path cannot be written (it is an input, exists, or is not writable)."""

    exit_code = 7


class TensorFlowRequiredError(CheckpointError):
    """The requested operation needs TensorFlow, which is not installed."""

    exit_code = 8
