"""The ``ckpt`` command: a thin typer app over the ckpt_tools API.

Commands parse flags, call one library function and print through :class:`Output`. Known errors
(:class:`~ckpt_tools.errors.CheckpointError`) become one line on stderr and the error's exit code;
``--debug`` (or ``CKPT_DEBUG=1``) shows the traceback.
"""

from __future__ import annotations

import os
import sys
import traceback

import typer

from ..errors import CheckpointError
from ._output import Output
from .inspect import list_command

app = typer.Typer(
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


def _register_optional() -> None:
    try:
        from ..train.cli import register
    except ImportError:
        return
    register(app)


_register_optional()

# Exit codes for failures that are not CheckpointErrors (documented in the README).
EXIT_OS_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ckpt`` console script."""
    if argv is not None:
        sys.argv[1:] = argv
    if "--debug" in sys.argv[1:]:
        _state["debug"] = True
    out = Output()
    try:
        app()
    except SystemExit:
        raise
    except CheckpointError as exc:
        _fail(out, str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail(out, "interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        sys.stderr.close()  # e.g. `ckpt list … | head`: not an error worth reporting
        sys.exit(0)
    except OSError as exc:
        _fail(out, f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}",
              EXIT_OS_ERROR)
    except Exception as exc:  # a bug: say so plainly, keep the traceback behind --debug
        _fail(out, f"internal error: {type(exc).__name__}: {exc} (please report it; "
              "--debug shows the traceback)", EXIT_INTERNAL)


def _fail(out: Output, message: str, code: int) -> None:
    if _state["debug"]:
        traceback.print_exc()
    out.error(message.splitlines()[0] if message else "failed")
    sys.exit(code)
