"""The ``ckpt`` command: a thin typer app over the ckpt_tools API (:mod:`.commands`).

``ckpt list PATH`` with only ``--json``/``-q`` runs without importing typer (:mod:`._run`);
everything else goes through the app, loaded on first use.
"""

from __future__ import annotations

import gc
import sys
import warnings

from ..errors import AssumptionWarning, RecordedStatementWarning, StatementWarning
from ._run import plain_list, run_list


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ckpt`` console script; exits with the command's exit code."""
    if argv is not None:
        sys.argv[1:] = argv
    # The library's AssumptionWarning is the Python API's note: the commands print their own
    # notes (and --json "assumed"), so Python's warning line would only repeat them.
    warnings.filterwarnings("ignore", category=AssumptionWarning)
    warnings.filterwarnings("ignore", category=RecordedStatementWarning)  # its notes say it
    warnings.filterwarnings("ignore", category=StatementWarning)  # and its warning
    plain = plain_list(sys.argv[1:])
    if plain is not None:
        if argv is None:
            # The process is this command and ends in _exit_now: no cyclic garbage collection.
            # Parsers pause the collector (formats._io.gc_paused) while they build one object
            # per tensor, so the first collection after them finds every one of those objects
            # young and traverses them all (100,000 variables: ~30 ms of a ~0.5 s `list -q`,
            # ~2 ms of a 3,000-variable `list --json`); none is in a cycle.
            gc.disable()
        code = run_list(*plain)
        if argv is None:  # the process is this command: skip the interpreter's teardown
            _exit_now(code)
        sys.exit(code)
    from .commands import main as run_app

    run_app()


def _exit_now(code: int) -> None:
    """Ends the process with ``code`` without the interpreter's teardown.

    ``run_list`` has written and flushed everything it prints (and reported any failure), so
    what is left is freeing every object of the listing and every module one by one: ~12 ms
    of CPU for 3,000 variables, ~10% of the whole ``ckpt list --json``. Only when ``main``
    runs as the process (``ckpt``, ``python -m ckpt_tools``); a caller passing ``argv`` gets
    ``SystemExit`` as before.
    """
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # reader gone, closed, or no stream
            pass
    os._exit(code)


def __getattr__(name: str):
    """``app``, ``_state`` …: the typer app module's names (imported on first use)."""
    if name.startswith("__"):  # probes (__wrapped__, __file__ …) never load the app
        raise AttributeError(name)
    from importlib import import_module

    return getattr(import_module(f"{__name__}.commands"), name)
