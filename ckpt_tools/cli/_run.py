"""What every ``ckpt`` run shares, without typer: the error report (one line, exit code) and
``ckpt list PATH [--json] [-q]`` run directly.

Why a typer-free path: importing typer and building the app costs ~35 ms of CPU on every call,
a third of a whole ``ckpt list --json`` process; scripts call that form in loops (and it is
what the benchmark holds against TensorFlow's ``inspect_checkpoint``). Any other argument list
(options, filters, ``--help``, a path starting with ``-``) goes through the typer app, so usage
errors and help read the same as ever.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from ..errors import (
    INSTALL_TENSORFLOW,
    CheckpointError,
    ExitCode,
    TensorFlowRequiredError,
    redact,
)
from ._output import Output

# Exit codes for failures that are not CheckpointErrors (documented in the README).
EXIT_OS_ERROR = int(ExitCode.ERROR)
EXIT_USAGE = int(ExitCode.USAGE)
EXIT_INTERNAL = int(ExitCode.INTERNAL)
EXIT_INTERRUPTED = int(ExitCode.INTERRUPTED)
_TF_MODULES = ("tensorflow", "keras", "tf_keras")

state = {"debug": os.environ.get("CKPT_DEBUG", "") not in ("", "0")}


def report(exc: BaseException) -> int | None:
    """Prints ``exc`` as one line on stderr and returns its exit code (None: not ours)."""
    if isinstance(exc, SystemExit):
        return None
    if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] in _TF_MODULES:
        exc = TensorFlowRequiredError(f"this needs TensorFlow (no module {exc.name!r}): "
                                      f"{INSTALL_TENSORFLOW}")
    if isinstance(exc, CheckpointError):
        message, code = str(exc), exc.exit_code
    elif isinstance(exc, KeyboardInterrupt):
        # What a remote write left behind (an old .index already deleted...), when it says.
        message, code = "interrupted" + redact(getattr(exc, "left_behind", "")), \
            EXIT_INTERRUPTED
    elif isinstance(exc, OSError):
        message = f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}"
        code = EXIT_OS_ERROR
    elif isinstance(exc, Exception):  # a bug: say so plainly, traceback behind --debug
        # --debug is ckpt's own option, before the command (review-17-attack-r36 F5)
        message = (f"internal error: {type(exc).__name__}: {exc} (please report it; 'ckpt "
                   "--debug <command> ...' or CKPT_DEBUG=1 shows the traceback)")
        code = EXIT_INTERNAL
    else:
        return None
    if state["debug"]:
        import traceback  # --debug only: not loaded by every run

        traceback.print_exception(type(exc), exc, exc.__traceback__)
    Output().error(message or "failed")  # escaped: a newline in a name cannot forge a line
    return code


def quiet_stdout() -> None:
    """Points stdout at /dev/null after the reader went away, so the interpreter's final
    flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests): nothing to do
        pass


def resolve(out: Output, path: str) -> str:
    """The checkpoint ``path`` names, saying on stderr (once) which one a directory with
    several candidates led to, so every command opens the same one and says so.

    Raises:
        CheckpointNotFoundError, CorruptCheckpointError: as :func:`open_checkpoint`.
    """
    from ..locate import STATE_FILE, locate

    if not os.path.isdir(path) and os.path.basename(path) != STATE_FILE:
        return path
    location = locate(path)
    if not location.choice:
        return path
    if location.choice not in out.noted:  # a command resolving twice says it once
        out.note(f"note: {location.choice}", always=True)  # never silent, even with --quiet
    return location.prefix


def note_sibling_doubt(out: Output, ckpt) -> None:
    """Says (once, on stderr) which ``.meta`` of another checkpoint of its prefix doubts the
    names of ``ckpt``'s keys, saved without a ``.meta`` of its own
    (:mod:`~ckpt_tools.meta_sibling`): the pairing is refused, or rests on --not-swapped;
    and that the keys are read as the ``.meta``'s ``SaverDef`` Saver saved them because
    ``--saver-def-wrote`` states it (:mod:`~ckpt_tools.saver_def_stated`)."""
    from ..meta_sibling import doubt_note

    said = doubt_note(ckpt)
    if said and said not in out.noted:
        out.note(f"note: {said}", always=True)
    note_recorded(out, ckpt)


def warn_read_by_names(out: Output, ckpt) -> None:
    """Warns (once, on stderr; kept for ``--json``'s "warnings" where the command has them)
    that ``--no-meta`` left unread a graph of its prefix doubting the names the pairing of
    ``ckpt`` read (:func:`~ckpt_tools.no_meta_mark.read_warning`); nothing otherwise."""
    from ..no_meta_mark import read_warning

    said = read_warning(ckpt.with_meta(False)) if getattr(ckpt, "graph_declined", False) \
        else None
    if said and said not in out.warned:
        out.warning(said)


def note_recorded(out: Output, ckpt) -> None:
    """Says (once, on stderr, even with -q) that the keys are read as the ``.meta``'s
    ``SaverDef`` Saver saved them because ``--saver-def-wrote`` or restore-ema's record states
    it, and the ``--averages-only`` caveat restore-ema's record keeps for its output
    (:mod:`~ckpt_tools.restored_record`), and the statements a mark inside the bundle says
    it was written under (:mod:`~ckpt_tools.tools_mark`)."""
    from ..restored_record import averages_only_note
    from ..saver_def_stated import saver_def_note
    from ..tools_mark import stated_notes

    said = saver_def_note(ckpt)
    for line in (f"note: {said}" if said else "", averages_only_note(ckpt),
                 *stated_notes(ckpt.path, getattr(ckpt, "tools_mark", None))):
        text = line.split(": ", 1)[-1]
        if not line or text in out.noted or text in out.warned:
            continue
        if line.startswith("warning: "):
            out.warning(text)
        else:
            out.note(line, always=True)


def say_stated(out: Output, notes: Iterable[str]) -> None:
    """Prints the notes of what a pairing rests on by statement
    (:func:`ckpt_tools.statements.stated_notes`) on stderr, with ``-q`` too (the values are
    wrong if a statement is): a ``warning: `` line as a warning, also kept for ``--json``'s
    "notes" (keys that hold raw weights if a training run saved them, review-26-user-u28 F1),
    each other line as a note."""
    for note in notes:
        if note.startswith("warning: "):
            out.warning(note.removeprefix("warning: "))
            out.noted.append(note)
        else:
            out.note(note, always=True)


def json_notes(out: Output, own: Iterable[str] = ()) -> list[str]:
    """A command's ``--json`` "notes": its result's own notes (``own``, said first, kept even
    where ``--quiet`` left them off stderr), then every other note stderr showed: which file a
    directory led to, the sibling ``.meta``'s doubt, the statements the pairing rests on
    (``--saver-def-wrote``, ``--not-swapped``...), so a script reads there whatever a person
    reads on stderr (review-27-attack-r99 F1).

    Returns:
        `list[str]`: each note once, without its ``note: ``.
    """
    notes = list(own)
    return [*notes, *(n for n in dict.fromkeys(out.noted) if n not in notes)]


_LIST_FLAGS = {"--json": "json", "--quiet": "quiet", "-q": "quiet"}


def plain_list(args: list[str]) -> tuple[str, bool, bool] | None:
    """``(path, json, quiet)`` when ``args`` are ``list``, one path and ``--json`` and/or
    ``--quiet``/``-q`` (in any order); ``None`` for anything else, which the typer app parses
    (and the human table, which it prints)."""
    if not args or args[0] != "list" or os.environ.get("_CKPT_COMPLETE"):
        return None
    paths, flags = [], set()
    for arg in args[1:]:
        if arg in _LIST_FLAGS:
            flags.add(_LIST_FLAGS[arg])
        elif not arg or arg.startswith("-"):
            return None
        else:
            paths.append(arg)
    if len(paths) != 1 or not flags:  # the human table: the app's (ckpt_tools.cli.inspect)
        return None
    return paths[0], "json" in flags, "quiet" in flags


def run_list(path: str, json_out: bool, quiet: bool) -> int:
    """Runs ``ckpt list PATH`` with ``--json`` and/or ``-q`` as the typer command does (same
    output, errors and exit codes); returns the exit code."""
    out = Output(json_mode=json_out, quiet=quiet)
    try:
        from ..listing import list_names, list_variables

        if quiet and not json_out:  # names only: no roles to classify
            from ..checkpoint import open_checkpoint

            with open_checkpoint(resolve(out, path)) as ckpt:
                out.lines(list_names(ckpt, match=None, sort="name"))
                if ckpt.not_swapped_record or ckpt.fit_order_record:
                    # ckpt train's run record stated what the names' pairing rests on: the
                    # notes the app's -q prints (review-22-user-u24 F8)
                    from ..statements import stated_notes

                    for note in stated_notes(ckpt, None)[0]:
                        out.note(note, always=True)
                note_quick_assumed(out, ckpt)
            return 0
        listing = list_variables(resolve(out, path), roles=None, collections=None,
                                 match=None, sort="name", use_ema=None, assumptions=True)
        say_stated(out, listing.said)  # a record's statements: as export says them (u33 F7)
        out.json_of(listing)
        return 0
    except BrokenPipeError:  # `ckpt list … | head` is not an error
        quiet_stdout()
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure gets the same treatment
        code = report(exc)
        if code is None:
            raise
        return code


def note_quick_assumed(out: Output, ckpt) -> dict:
    """``list -q``'s names-only paths: says on stderr (kept with ``-q``) what the pairing
    the names show assumes, as the table's path does (a Keras file's copies are named after
    the weights they are paired with: review-12-attack-r21 F2). Only a Keras file or a
    checkpoint of swappable averages is looked at further: for others the keys-only path
    stays keys only. No typer import.

    Returns:
        `dict`: ``{"assumed": [...]}``, or ``{}``.
    """
    from ..formats.objgraph import has_swappable_averages
    from ..save_op import named_pairs_unproven

    if getattr(ckpt.reader, "keras", None) is None and not has_swappable_averages(
            ckpt.objects) and not named_pairs_unproven(ckpt):  # saver_not_swapped (TF1)
        return {}
    from ..keras_assumed import keras_assumptions

    assumed = keras_assumptions(ckpt)
    for a in assumed:
        out.note(f"note: {a.short}", always=True)
    return {"assumed": [a.name for a in assumed]} if assumed else {}
