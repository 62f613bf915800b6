"""The ``ckpt`` typer app (see :mod:`ckpt_tools.cli`, whose ``main`` runs it).

Commands parse flags, call one library function and print through :class:`Output`. Known errors
(:class:`~ckpt_tools.errors.CheckpointError`) become one line on stderr and the error's exit code;
``--debug`` (or ``CKPT_DEBUG=1``) shows the traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import warnings
from collections.abc import Iterator
from importlib import import_module

import typer
from typer import _click
from typer.core import TyperCommand, TyperGroup

from ..errors import (
    AssumptionWarning,
    ExitCode,
    RecordedStatementWarning,
    StatementWarning,
)
from ._output import Output, clean_message
from ._run import EXIT_INTERRUPTED
from ._run import quiet_stdout as _quiet_stdout
from ._run import report as _report
from ._run import state as _state
from .inspect import list_command

# Command name -> (module, function, help override). Loaded only when that command runs (or for
# --help), so `ckpt list` does not import NumPy, the stats/diff/verify code or the trainer.
_LAZY = {
    "verify": (".verify", "verify_command", None),
    "show": (".show", "show_command", None),
    "stats": (".show", "stats_command", None),
    "diff": (".diff", "diff_command", None),
    "map": (".ema", "map_command", None),
    "restore-ema": (".restore_ema", "restore_ema_command", None),
    "export": (".export", "export_command", None),
    "average": (".average", "average_command", None),
    "train": ("ckpt_tools.train.cli", "train_command", "TRAIN_HELP"),
    "eval": ("ckpt_tools.train.cli", "eval_command", "EVAL_HELP"),
}


def _plain_metavar(make_metavar):
    """Typer writes a required argument as ``{PATH}`` in usage lines; the README and every
    convention write ``PATH`` (optional ones stay ``[B]``)."""
    def wrapper(self, ctx, *args, **kwargs):
        var = make_metavar(self, ctx, *args, **kwargs)
        if var.startswith("{") and "}" in var:
            head, _, tail = var[1:].partition("}")
            return head + tail  # {PATH} -> PATH, {paths}... -> paths...
        return var
    return wrapper


def _option_metavar(make_metavar):
    """Typer writes an option's value as ``<str>``/``<int range>``, and fixed choices as
    ``<a|b>``; ``--help`` shows an explicit metavar, the choices as ``a|b``, or the plain type
    (``TEXT``, ``INT``, ``FLOAT``)."""
    def wrapper(self, ctx, *args, **kwargs):
        if self.metavar is not None:
            return self.metavar
        choices = getattr(self.type, "choices", None)
        if choices:
            var = "|".join(str(getattr(c, "value", c)) for c in choices)
        else:
            kind = str(getattr(self.type, "name", "")).replace(" range", "")
            var = _TYPE_METAVARS.get(kind) or make_metavar(self, ctx, *args, **kwargs)
        return var + ("..." if self.nargs != 1 else "")
    return wrapper


_TYPE_METAVARS = {"str": "TEXT", "text": "TEXT", "int": "INT", "integer": "INT",
                  "float": "FLOAT"}


def _wrap_help_at_spaces() -> None:
    """Makes click wrap ``--help`` text at spaces only: never after a hyphen inside a word
    (``parameter-`` / ``server``), never inside a word longer than the line. Done when help is
    first formatted, so that ``ckpt list`` does not import click's text wrapper."""
    from typer._click import _textwrap

    if getattr(_textwrap.TextWrapper, "_ckpt", False):
        return

    class HelpWrapper(_textwrap.TextWrapper):
        _ckpt = True

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("break_on_hyphens", False)
            kwargs.setdefault("break_long_words", False)
            super().__init__(*args, **kwargs)

    _textwrap.TextWrapper = HelpWrapper  # click's wrap_text imports it each time it runs


class _Command(TyperCommand):
    """A command whose ``--help`` wraps at spaces only (see :func:`_wrap_help_at_spaces`) and
    groups its options by panel (``rich_help_panel``: the options that state a pairing after
    the others; plain text, no rich), with a 24-column name column so the help text keeps 52
    of 80 columns (review-13-user-u15 F10: 146-174 lines at 80 columns before)."""

    def format_help(self, ctx, formatter) -> None:
        _wrap_help_at_spaces()
        super().format_help(ctx, formatter)

    def format_options(self, ctx, formatter) -> None:
        sections: dict[str, list] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                title = "Arguments" if param.param_type_name == "argument" else (
                    getattr(param, "rich_help_panel", None) or "Options")
                sections.setdefault(title, []).append(record)
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows, col_max=24)


typer.core.TyperArgument.make_metavar = _plain_metavar(typer.core.TyperArgument.make_metavar)
typer.core.TyperOption.make_metavar = _option_metavar(typer.core.TyperOption.make_metavar)


class _Group(TyperGroup):
    """Loads commands lazily, prints usage errors through :class:`Output`, and turns errors into
    one stderr line and an exit code, for the console script and in-process callers (tests,
    ``CliRunner``) alike."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        # Once a help rendering has loaded the lazy commands, super() lists them too: each
        # name once, in the same order before and after.
        return [*(n for n in super().list_commands(ctx) if n not in _LAZY), *_LAZY]

    def get_command(self, ctx: typer.Context, name: str):
        command = super().get_command(ctx, name)
        if command is None and name in _LAZY:
            module_name, function, help_name = _LAZY[name]
            module = import_module(module_name, __package__)
            single = typer.Typer(add_completion=False, rich_markup_mode=None,
                                 context_settings={"help_option_names": ["-h", "--help"]})
            helptext = getattr(module, help_name) if help_name else None
            single.command(name, cls=_Command, help=helptext)(
                getattr(module, function))
            command = typer.main.get_command(single)
            self.commands[name] = command
        return command

    def format_help(self, ctx, formatter) -> None:
        _wrap_help_at_spaces()
        super().format_help(ctx, formatter)

    def format_commands(self, ctx, formatter) -> None:
        """The command list of ``ckpt --help``: each command's first sentence whole, wrapped
        at spaces (click would cut it to fit one line, with ``...``)."""
        rows = [(name, command.get_short_help_str(limit=1 << 16))
                for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        if os.environ.get(COMPLETE_VAR):  # a completion request from the shell script
            from typer import _completion_classes as classes

            classes.completion_init()
            render = classes._sanitize_help_text
            # typer renders help through rich at the terminal width, so a long help came back
            # on several lines, and fish/zsh read each extra line as a candidate of its own.
            classes._sanitize_help_text = lambda text: " ".join(render(text).split())
        try:
            with _warnings_to_output():
                code = super().main(args, prog_name or "ckpt", complete_var,
                                    standalone_mode=False, **extra)
            code = code if isinstance(code, int) else 0
        except _click.exceptions.NoArgsIsHelpError as exc:
            _click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
            code = ExitCode.USAGE
        except _click.ClickException as exc:  # usage errors: our format, escaped
            code = _usage_error(exc)
        except typer.Abort:
            Output().error("interrupted")
            code = EXIT_INTERRUPTED
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except BrokenPipeError:  # `ckpt list … | head` is not an error
            _quiet_stdout()
            raise typer.Exit(0) from None
        except BaseException as exc:  # noqa: BLE001 - every failure gets the same treatment
            if isinstance(exc, _click.ClickException):
                raise  # usage errors (BadParameter...) are printed by main()
            code = _report(exc)
            if code is None:
                raise
            raise typer.Exit(code) from None


def _usage_error(exc) -> int:
    """Prints a click usage error as ``Usage:`` + hint + ``error: …`` (escaped); returns 2."""
    out = Output()
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        out.write_err(clean_message(ctx.get_usage()) + "\n")
        help_name = ctx.help_option_names[0] if ctx.help_option_names else "--help"
        out.write_err(f"Try '{clean_message(ctx.command_path)} {help_name}' for help.\n")
    out.error(exc.format_message())
    return exc.exit_code if isinstance(exc.exit_code, int) else ExitCode.USAGE


app = typer.Typer(
    cls=_Group,
    name="ckpt",
    help="Inspect TensorFlow checkpoints without TensorFlow, and evaluate with their EMA weights.",
    no_args_is_help=True,
    add_completion=False,  # our own --install-completion/--show-completion SHELL (below)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        Output().line(f"ckpt {__version__}")
        raise typer.Exit(0)


SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_CKPT_COMPLETE"


def _check_shell(value: str) -> str:
    if value not in SHELLS:
        raise typer.BadParameter(f"{value!r} is not one of: {', '.join(SHELLS)}")
    return value


def _show_completion(value: str | None) -> None:
    if value:
        from typer._completion_shared import get_completion_script

        script = get_completion_script(prog_name="ckpt", complete_var=COMPLETE_VAR,
                                       shell=_check_shell(value))
        Output().raw(script.rstrip("\n") + "\n")
        raise typer.Exit(0)


def _install_completion(value: str | None) -> None:
    if value:
        from typer._completion_shared import install

        shell, path = install(shell=_check_shell(value), prog_name="ckpt",
                              complete_var=COMPLETE_VAR)
        Output().line(f"{shell} completion for ckpt installed in {path}; it takes effect in "
                      "new shells")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    install_completion: str | None = typer.Option(
        None, "--install-completion", metavar="bash|zsh|fish", callback=_install_completion,
        is_eager=True, help="Install completion of commands, options and paths for this shell."),
    show_completion: str | None = typer.Option(
        None, "--show-completion", metavar="bash|zsh|fish", callback=_show_completion,
        is_eager=True, help="Print the completion script for this shell."),
) -> None:
    if debug:
        _state["debug"] = True


app.command("list", cls=_Command)(list_command)

@contextlib.contextmanager
def _warnings_to_output() -> Iterator[None]:
    """Python warnings raised while a command runs (Keras' UserWarnings while ``eval`` loads a
    model) print through :class:`Output`: one escaped ``warning:`` line each, wrapped like
    ours, instead of the library's file path, message and source line."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, (AssumptionWarning, RecordedStatementWarning,
                                 StatementWarning)):
            return  # the Python API's note: the command prints its own (and --json "assumed")
        Output().warning(f"{category.__name__}: {' '.join(str(message).split())}")

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ckpt`` console script."""
    if argv is not None:
        sys.argv[1:] = argv
    if "--debug" in sys.argv[1:]:
        _state["debug"] = True
    # SIGTERM (kill, a job scheduler, docker stop) is handled like Ctrl-C by the commands
    # that write: "error: interrupted", exit 130, temporary outputs removed by the writers'
    # cleanup. (Not for `train`, whose TensorFlow servers block in C code and are stopped by
    # SIGTERM's default action.)
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    previous = None
    if command in _WRITERS:
        try:
            previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        except ValueError:  # not the main thread (an embedding program): leave it alone
            previous = None
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
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


_WRITERS = {"restore-ema", "export", "average"}


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
