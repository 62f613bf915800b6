"""The ``ckpt`` command: a thin typer app over the ckpt_tools API (:mod:`.commands`).

``ckpt list PATH`` with only ``--json``/``-q`` runs without importing typer (:mod:`._run`);
everything else goes through the app, loaded on first use.
"""

from __future__ import annotations

import sys

from ._run import plain_list, run_list


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ckpt`` console script; exits with the command's exit code."""
    if argv is not None:
        sys.argv[1:] = argv
    plain = plain_list(sys.argv[1:])
    if plain is not None:
        sys.exit(run_list(*plain))
    from .commands import main as run_app

    run_app()


def __getattr__(name: str):
    """``app``, ``_state`` …: the typer app module's names (imported on first use)."""
    if name.startswith("__"):  # probes (__wrapped__, __file__ …) never load the app
        raise AttributeError(name)
    from importlib import import_module

    return getattr(import_module(f"{__name__}.commands"), name)
