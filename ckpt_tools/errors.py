"""Exceptions raised by ckpt_tools.

Every error the library raises on purpose derives from :class:`CheckpointError`, so callers (and
the CLI) can catch one type. Each subclass carries an ``exit_code`` used by the ``ckpt`` command;
the codes are documented in the README ("Exit codes and errors").
"""

from __future__ import annotations

import re
from enum import IntEnum

from .lazy_re import LazyPattern


class ExitCode(IntEnum):
    """Exit codes of the ``ckpt`` command (the README's "Exit codes and errors" table)."""

    OK = 0
    ERROR = 1  # any other CheckpointError, and OS errors naming their path
    USAGE = 2  # bad option or argument
    NOT_FOUND = 3  # no checkpoint at the path, or no such variable
    CORRUPT = 4  # malformed, truncated or failing a checksum
    UNSUPPORTED = 5  # a checkpoint feature or output format we cannot handle
    EMA = 6  # EMA shadows missing, mismatched, a pairing (or latest file) not proven
    OUTPUT = 7  # an output path cannot be written (is an input, exists, not writable)
    NEEDS_TENSORFLOW = 8  # the operation needs TensorFlow, which is not installed
    INTERNAL = 70  # a bug: please report it
    INTERRUPTED = 130  # Ctrl-C or SIGTERM (128 + SIGINT); temporary outputs are removed


#: How to get TensorFlow, for the operations that need it: the README's set-up installs
#: ckpt-tools from its checkout (``pip install -e .``), so its ``tf`` extra comes the same way.
INSTALL_TENSORFLOW = ("pip install tensorflow-cpu (or, in the ckpt-tools checkout, "
                      "pip install -e '.[tf]')")


# A URL's userinfo (``user:password@``) and its query string (presigned URLs carry signatures
# and tokens there). The userinfo is everything between "://" and the last "@" before the
# first "/": matched on the raw text, never parsed, since a password may hold a raw "@", "?"
# or "#" that a URL parser takes for the end of the authority (putting the secret in the
# query or fragment, where the query rule would leave it in clear).
_USERINFO = LazyPattern(r"://([^/\s\"<>]*)@")
_QUERY = LazyPattern(r"(://[^\s\"<>?#]*\?)([^\s\"<>#]*)")
_QUERY_VALUE = LazyPattern(r"=[^&;\s\"'<>]*")


def _userinfo(m: re.Match) -> str:
    user, colon, _ = m.group(1).partition(":")
    return f"://{user}:***@" if colon else "://***@"


def _query(m: re.Match) -> str:
    query = m.group(2)
    tail = ":" if query.endswith(":") else ""  # "URL: message": the colon is the message's
    query = query[: len(query) - len(tail)]
    return m.group(1) + _QUERY_VALUE.sub("=***", query) + tail


def redact(text: str) -> str:
    """Returns ``text`` with the secrets of every URL in it hidden: a password in its userinfo
    (``http://user:***@host/``; a user name alone, which may be a token, as ``***@``) and
    the values of its query string (``?X-Amz-Signature=***``). Everything else, the host and
    the path included, stays as it is, so a message still names the object.

    Example:
        >>> redact("error: http://ann:s3cr3t@h/run/: not found")
        'error: http://ann:***@h/run/: not found'
    """
    if "://" not in text or ("@" not in text and "?" not in text):
        return text  # the common case (no URL, or one without secrets): no regex scan
    if "@" in text:
        text = _USERINFO.sub(_userinfo, text)
    if "?" in text:
        text = _QUERY.sub(_query, text)
    return text


class CheckpointError(Exception):
    """Base class for every error ckpt_tools raises about a checkpoint or its use.

    Messages follow one pattern: what is wrong, where (file and byte offset when known), and
    what was expected. A URL's credentials never show in one (see :func:`redact`).
    """

    exit_code = ExitCode.ERROR

    def __str__(self) -> str:
        return redact(super().__str__())


def add_left_behind(exc: BaseException, text: str) -> None:
    """Appends ``text`` (what an interrupted or failed write left behind, ``"; ..."``) to the
    message of ``exc``: a CheckpointError's own message, or the ``error: interrupted`` line of
    a KeyboardInterrupt (Ctrl-C, SIGTERM), which carries it as ``left_behind``."""
    if isinstance(exc, CheckpointError):
        exc.args = (str(exc) + text,)
    elif isinstance(exc, KeyboardInterrupt):
        exc.left_behind = getattr(exc, "left_behind", "") + text


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint exists at the given path (missing file, prefix, or state-file target)."""

    exit_code = ExitCode.NOT_FOUND


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is truncated, malformed, or fails a checksum."""

    exit_code = ExitCode.CORRUPT

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

    exit_code = ExitCode.UNSUPPORTED


class EmaError(CheckpointError):
    """EMA shadows are missing or do not match the variables they should replace."""

    exit_code = ExitCode.EMA


class UnprovenPairingError(EmaError):
    """The file does not prove which average goes with which variable (exit 6).

    Attributes:
        option: the command-line option that decides (``--ema-name``, ``--apply-order``,
            ``--no-meta``, ``--use-ema/--no-use-ema``), or ``None`` when no option can.
        undecided: key -> candidate keys: a variable and the averages it may take, or an
            average and the variables it may belong to.
        raw: keys named as averages that the file proves hold their variables' raw values
            (a Saver of ``ema.variables_to_restore()``): no pairing is open for them, and
            ``ckpt list`` says so rather than "the file does not prove the pairing".
        none_decides: the words ending the message that say no option decides (``""`` if
            none): a caller that then finds an option that does (a ``.meta``'s update ops)
            drops them, so the message never says both.
    """

    def __init__(self, message: str, option: str | None = None,
                 undecided: dict[str, tuple[str, ...]] | None = None,
                 raw: tuple[str, ...] = (), none_decides: str = ""):
        super().__init__(message)
        self.option = option
        self.undecided = dict(undecided or {})
        self.raw = tuple(raw)
        self.none_decides = none_decides if message.endswith(none_decides) else ""


class AmbiguousCheckpointError(CheckpointError):
    """A path names several checkpoints and nothing recorded proves which is meant (a run
    directory without a ``checkpoint`` state file whose file names record no order): exit 6,
    like a pairing the file cannot prove; the message lists the candidates."""

    exit_code = ExitCode.EMA


class OptionError(CheckpointError, ValueError):
    """An option that cannot apply to this checkpoint (``--trainable``/``--use-ema``, which
    decide only for Keras files, given for a TensorFlow checkpoint): exit 2, like a usage
    error, rather than silently ignored."""

    exit_code = ExitCode.USAGE


class OutputError(CheckpointError):
    """An output path cannot be written (it is an input, exists, or is not writable)."""

    exit_code = ExitCode.OUTPUT


class WriteError(CheckpointError):
    """An operating-system error while writing an output (disk full, I/O error).

    The message names the output path (the user's, never a temporary name) and the operation:
    ``out/m.ckpt.data-00000-of-00001: No space left on device while writing (nothing was left
    behind)``. ``clean`` is set once the writer has removed everything it had written.
    """

    exit_code = ExitCode.ERROR

    def __init__(self, path: str, reason: str, operation: str):
        super().__init__(f"{path}: {reason} while {operation}")
        self.path, self.reason, self.operation = path, reason, operation
        self.clean = False

    def __str__(self) -> str:
        base = f"{self.path}: {self.reason} while {self.operation}"
        return redact(base) + (" (nothing was left behind)" if self.clean else "")


class RemoteAccessError(CheckpointError):
    """A URL cannot be read or written: access is forbidden, or the network failed (the
    message says which, naming the URL). A URL that does not exist is
    :class:`CheckpointNotFoundError` instead."""

    exit_code = ExitCode.ERROR


class TensorFlowRequiredError(CheckpointError):
    """The requested operation needs TensorFlow, which is not installed."""

    exit_code = ExitCode.NEEDS_TENSORFLOW


class VariableNotFoundError(CheckpointError, KeyError):
    """The requested key is not in the checkpoint."""

    exit_code = ExitCode.NOT_FOUND

    def __str__(self) -> str:  # KeyError would repr() the message
        return redact(str(self.args[0])) if self.args else ""


class NoSelectionError(VariableNotFoundError):
    """The ``include``/``exclude`` name filters leave nothing for the operation to act on
    (exit 3, like a name filter that matches no key)."""


class AssumptionWarning(UserWarning):
    """A pairing of averages was made on an assumption the file cannot prove (a Keras file's
    ``fit()`` build order for weights of equal shapes, not saved swapped by ``SwapEMAWeights``;
    a tf_keras TF-format checkpoint's same-named weights in the live model's order): the
    Python counterpart of the notes ``ckpt`` prints and of ``--json``'s ``"assumed"``. Turn
    it into an error with ``warnings.simplefilter("error", AssumptionWarning)``, or pass
    ``strict=True`` (refused before anything is read or assigned); state the assumption
    (``trainable=``, ``not_swapped=True``) and it is not issued.
    """


class RecordedStatementWarning(UserWarning):
    """A Keras file's EMA pairing rests on what ``ckpt train``'s ``run_record.json`` beside it
    states for these very bytes (not saved swapped; its optimizer built in ``fit()``'s order),
    not on the caller's ``not_swapped=``/``fit_order=``: the Python counterpart of the note
    ``ckpt`` prints (and of ``--json``'s ``"not_swapped_record"``/``"fit_order_record"``).
    ``stated`` lists the statements (``"not_swapped"``, ``"fit_order"``), ``record`` the file.

    Also issued where a TF checkpoint's pairing rests on what a ckpt_tools writer recorded of
    the statements its input was read under (``restore-ema --averages-only``'s
    ``.restored.json``, the ``_CKPT_TOOLS_RECORD`` key a statement-marked output carries:
    ``"averages_only"``, ``"no_meta"``, ``"saver_def_wrote"``, ``"not_swapped"``), which every
    ``ckpt`` read of it repeats as a note or warning (:mod:`~ckpt_tools.stated_python`);
    ``notes`` then holds those lines.
    """


class StatementWarning(UserWarning):
    """The caller's own statement decides a pairing that what the file records makes
    doubtful: ``averages_only=True`` read keys named as averages that the ``.meta``'s save op
    wrote from their variables outside an evaluation graph, so a training run's
    ``Saver(ema.variables_to_restore())`` wrote its raw weights under them: the Python
    counterpart of the warning ``ckpt`` prints (:mod:`~ckpt_tools.stated_python`).
    ``stated`` lists the statements, ``notes`` the CLI's lines.
    """
