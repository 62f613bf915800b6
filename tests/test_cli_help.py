"""``--help`` of every command is readable at 80 columns and through a pipe: no line wider than
80, nothing cut short (no ``…``, every option's help whole), words never broken, and options
with fixed choices show them (``--sort name|size``), never typer's ``<str>``."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from _cli_doc import cli_doc_rows
from typer.main import get_command
from typer.testing import CliRunner

from ckpt_tools.cli import app
from ckpt_tools.cli._output import cell_len

GROUP = get_command(app)
COMMANDS = GROUP.list_commands(None)

# Options whose values are a fixed set: --help must list them as the metavar.
CHOICES = {
    "--sort": "name|size", "--style": "tf1|object|keras|slot",
    "--apply-order": "trainable|tracked", "--slots": "keep|drop", "--non-averaged": "keep|drop",
    "--api": "v1|tf2|keras", "--strategy": "auto|mirrored|multiworker|default|parameter-server",
    "--job-name": "ps|worker",
}


def _words(text: str) -> str:
    return " ".join(text.split())


def _help(argv: list[str], columns: int | None = 80) -> str:
    env = {"COLUMNS": str(columns)} if columns else {}
    result = CliRunner().invoke(app, [*argv, "--help"], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_command_is_listed():
    assert {"list", "map", "restore-ema", "export", "verify", "show", "stats", "diff",
            "average", "train", "eval"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_80_columns_whole(command):
    text = _help([command])
    lines = text.splitlines()
    assert lines[0].startswith(f"Usage: ckpt {command} "), text
    assert all(cell_len(line) <= 80 for line in lines), text
    assert "…" not in text and "<str>" not in text and "{" not in lines[0], text
    flat = _words(text)
    cmd = GROUP.get_command(None, command)
    assert _words(cmd.help.split("\n\n")[0]) in flat  # the description, whole
    for param in cmd.params:
        if getattr(param, "hidden", False) or not param.help:
            continue
        assert _words(param.help) in flat, (param.name, text)  # nothing cut, no mid-word break
        if param.param_type_name != "option":
            continue
        metavar = param.make_metavar(None) if not param.is_flag else ""
        assert not metavar.startswith("<"), (param.opts, metavar)
        name = max(param.opts, key=len)
        if name in CHOICES:
            assert re.search(rf"^\s+(-\w, )?{re.escape(name)} {re.escape(CHOICES[name])}(\s|$)",
                             text, re.M), text
    # the description column starts early enough to hold ~45 characters per line
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    assert max(indents) <= 34, text


def test_top_level_help_lists_each_command_whole():
    text = _help([])
    assert all(cell_len(line) <= 80 for line in text.splitlines()), text
    assert "…" not in text and "..." not in text.split("\n", 1)[1], text
    flat = _words(text)
    for command in COMMANDS:
        help_text = GROUP.get_command(None, command).help
        first = _words(help_text.split("\n\n")[0])
        first = first[: first.index(". ") + 1] if ". " in first else first
        assert first in flat, (command, text)
    assert "--install-completion bash|zsh|fish" in text


@pytest.mark.parametrize("command", ["export", "train", "map"])
def test_help_through_a_pipe_fits_80_columns(command):
    """Piped, without COLUMNS (a script or ``| less``): the same 80-column help."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([sys.executable, "-m", "ckpt_tools", command, "--help"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert all(cell_len(line) <= 80 for line in proc.stdout.splitlines()), proc.stdout
    assert "…" not in proc.stdout and "\x1b" not in proc.stdout and "╭" not in proc.stdout


def _readme_cell(param) -> str:
    """How docs/cli.md's option tables write an option: ``--long, -s METAVAR`` or
    ``--flag/--no-flag`` (``|`` escaped for Markdown)."""
    longs = [o for o in param.opts if o.startswith("--")]
    shorts = [o for o in param.opts if not o.startswith("--")]
    cell = "/".join(longs[:1] + [o for o in param.secondary_opts if o.startswith("--")])
    cell += f", {shorts[0]}" if shorts else ""
    if not param.is_flag and not getattr(param, "count", False):
        cell += " " + param.make_metavar(None)
    return cell.replace("|", "\\|")


@pytest.mark.parametrize("command", [c for c in COMMANDS])
def test_readme_option_rows_spell_options_as_help_does(command):
    """Each docs/cli.md option row starts with what ``--help`` shows for it (names and
    metavar)."""
    cells = list(cli_doc_rows(command))
    cmd = GROUP.get_command(None, command)
    for param in cmd.params:
        if getattr(param, "hidden", False) or param.param_type_name != "option" \
                or param.name == "help":
            continue
        want = _readme_cell(param)
        assert want in cells, f"docs/cli.md's `ckpt {command}` table should have a row `{want}`"


def test_eval_help_says_it_evaluates_the_reference_model_only():
    """review-11-user-r12 F5: eval evaluates only the model 'ckpt train' builds, and its help
    names the argument as the usage line does."""
    flat = _words(_help(["eval"]))
    assert "Report test accuracy of the reference model 'ckpt train' builds" in flat, flat
    assert "PATH is a checkpoint of that model only" in flat and "CHECKPOINT" not in flat, flat
    assert "apply_ema(model, path)" in flat and "--train-dir" not in flat, flat


@pytest.mark.parametrize("command", ["list", "map", "restore-ema", "export", "diff"])
def test_trainable_help_says_the_essentials_first_and_readme_follows(command):
    """review-11-user-r12 F12: --trainable's help starts with what to pass and stays short;
    each docs/cli.md row for it starts with the help itself, then gives the details (u15 F10)."""
    cmd = GROUP.get_command(None, command)
    param = next(p for p in cmd.params if "--trainable" in p.opts)
    assert param.help.startswith("The weights the optimizer was built with, in "
                                 "model.trainable_variables order: names as 'ckpt list' "
                                 "shows them"), param.help
    assert "--loop-order" in param.help and len(param.help) <= 300, len(param.help)
    row = cli_doc_rows(command).get("--trainable NAMES")
    assert row and _words(row).startswith(_words(param.help)), command


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_short_enough_to_read(command):
    """review-13-user-u15 F10: list/map/export/restore-ema's --help ran to 146-174 lines at 80
    columns. Each stays under 100: option help is one to three lines (docs/cli.md's option tables
    give the details), and the options that state a pairing are listed apart, last."""
    text = _help([command])
    assert len(text.splitlines()) < 100, (command, len(text.splitlines()))
    cmd = GROUP.get_command(None, command)
    if any("--not-swapped" in p.opts for p in cmd.params):
        after = text.split("\nPairing statements (a refusal names the one to pass):\n", 1)
        assert len(after) == 2, text
        options = after[0].split("\nOptions:\n", 1)[-1]  # the description may name it
        assert "\n  --not-swapped" in after[1] and "\n  --not-swapped" not in options, text
