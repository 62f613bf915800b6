"""The ``ckpt`` command: a thin typer app over the ckpt_tools API.

Commands parse flags, call one library function and print through :class:`Output`. Known errors
(:class:`~ckpt_tools.errors.CheckpointError`) become one line on stderr and the error's exit code;
``--debug`` (or ``CKPT_DEBUG=1``) shows the traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
from importlib import import_module

import typer
from typer.core import TyperGroup

from ..errors import CheckpointError
from ._output import Output
from .inspect import list_command

# Command name -> (module, function, help override). Loaded only when that command runs (or for
# --help), so `ckpt list` does not import NumPy, the stats/diff/verify code or the trainer.
_LAZY = {
    "verify": (".verify", "verify_command", None),
    "show": (".show", "show_command", None),
    "stats": (".show", "stats_command", None),
    "diff": (".diff", "diff_command", None),
    "map": (".ema", "map_command", None),
    "restore-ema": (".ema", "restore_ema_command", None),
    "export": (".export", "export_command", None),
    "average": (".average", "average_command", None),
    "train": ("ckpt_tools.train.cli", "train_command", "TRAIN_HELP"),
    "eval": ("ckpt_tools.train.cli", "eval_command", "EVAL_HELP"),
}


class _Group(TyperGroup):
    """Loads commands lazily, and turns errors into one stderr line and an exit code, for the
    console script and for in-process callers (tests, ``CliRunner``) alike."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [*super().list_commands(ctx), *_LAZY]

    def get_command(self, ctx: typer.Context, name: str):
        command = super().get_command(ctx, name)
        if command is None and name in _LAZY:
            module_name, function, help_name = _LAZY[name]
            module = import_module(module_name, __name__)
            single = typer.Typer(context_settings={"help_option_names": ["-h", "--help"]})
            single.command(name, help=getattr(module, help_name) if help_name else None)(
                getattr(module, function))
            command = typer.main.get_command(single)
            self.commands[name] = command
        return command

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except BrokenPipeError:
            raise  # handled by main(): `ckpt list … | head` is not an error
        except BaseException as exc:  # noqa: BLE001 - every failure gets the same treatment
            if hasattr(exc, "show") and hasattr(exc, "exit_code"):
                raise  # click's own usage errors (BadParameter...) print themselves
            code = _report(exc)
            if code is None:
                raise
            raise typer.Exit(code) from None


app = typer.Typer(
    cls=_Group,
    name="ckpt",
    help="Inspect TensorFlow checkpoints without TensorFlow, and evaluate with their EMA weights.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
_state = {"debug": os.environ.get("CKPT_DEBUG", "") not in ("", "0")}


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
) -> None:
    if debug:
        _state["debug"] = True


app.command("list")(list_command)

# Exit codes for failures that are not CheckpointErrors (documented in the README).
EXIT_OS_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def _report(exc: BaseException) -> int | None:
    """Prints ``exc`` as one line on stderr and returns its exit code (None: not ours)."""
    if isinstance(exc, SystemExit):
        return None
    if isinstance(exc, CheckpointError):
        message, code = str(exc), exc.exit_code
    elif isinstance(exc, KeyboardInterrupt):
        message, code = "interrupted", EXIT_INTERRUPTED
    elif isinstance(exc, OSError):
        message = f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}"
        code = EXIT_OS_ERROR
    elif isinstance(exc, Exception):  # a bug: say so plainly, traceback behind --debug
        message = (f"internal error: {type(exc).__name__}: {exc} (please report it; --debug "
                   "shows the traceback)")
        code = EXIT_INTERNAL
    else:
        return None
    if _state["debug"]:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    Output().error(message.splitlines()[0] if message else "failed")
    return code


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ckpt`` console script."""
    if argv is not None:
        sys.argv[1:] = argv
    if "--debug" in sys.argv[1:]:
        _state["debug"] = True
    try:
        app()
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)
    except BaseException as exc:  # noqa: BLE001
        code = _report(exc)
        if code is None:
            raise
        sys.exit(code)
