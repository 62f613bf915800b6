"""Everything ``ckpt`` prints goes through ``cli/_output.py`` (review-13-user-r2): the training
bar, cluster tasks' lines, TensorFlow's start-up lines and Python warnings are escaped text,
never markup or raw control characters; ``ckpt`` alone lists each command once."""

from __future__ import annotations

import io
import re

from _corpus import run_cli
from helpers import FIXTURES

HOSTILE = "t[bold]x[/]\x1b[2J\x1b]0;T\x07\nrow"
ESCAPED = "t[bold]x[/]\\x1b[2J\\x1b]0;T\\x07\\nrow"


def test_training_bar_is_escaped_text_never_markup(capsys, monkeypatch):
    from ckpt_tools.train.progress import TrainProgress

    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "200")
    with TrainProgress(10, 0, True, HOSTILE) as bar:
        bar.update(5, float("nan"), 1234.0, 0.5)
    err = capsys.readouterr().err
    assert ESCAPED in err, repr(err)
    assert "\x1b[2J" not in err and "\x07" not in err, repr(err)
    # Not a terminal: no bar at all, like every ckpt progress bar.
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    with TrainProgress(10, 0, True, "train") as bar:
        bar.update(5, 0.5, 1.0, 0.5)
    assert capsys.readouterr().err == ""


def test_cluster_task_lines_and_messages_are_escaped(capsys):
    from ckpt_tools.train.cluster import LogPrinter

    LogPrinter(False).pump(io.StringIO(HOSTILE.replace("\n", "") + "\n"), "worker\x1b[1m0",
                           False, None)
    err = capsys.readouterr().err
    assert err == "[worker\\x1b[1m0] " + ESCAPED.replace("\\n", "") + "\n", repr(err)


def test_python_warnings_print_as_one_warning_line(capsys, monkeypatch):
    # A library warning (a UserWarning of several lines, raised in a file of its own, as
    # Keras' loaders do) while a command runs.
    import warnings

    from ckpt_tools.cli import inspect

    real = inspect.list_variables

    def noisy(*args, **kwargs):
        warnings.warn_explicit("Skipping variable loading.\nSee details", UserWarning,
                               "/site-packages/keras/src/saving/saving_lib.py", 869)
        return real(*args, **kwargs)

    monkeypatch.setattr(inspect, "list_variables", noisy)
    code, out, err = run_cli(["list", str(FIXTURES / "keras_ema")], capsys)
    assert code == 0 and "saving_lib.py" not in err and "UserWarning" in err, err
    for line in err.splitlines():
        assert re.match(r"(warning|error|note|EMA|names|\d+ of \d+ variables)|$", line), line
    assert sum("UserWarning" in line for line in err.splitlines()) == 1, err


def test_ckpt_alone_lists_each_command_once(capsys):
    run_cli(["--help"], capsys)  # loads the lazily imported commands
    code, out, err = run_cli([], capsys)
    assert code == 2
    names = re.findall(r"^\s*│?\s*([a-z][a-z-]+)\s{2,}\S", err, flags=re.M)
    for command in ("list", "verify", "stats", "map", "restore-ema", "export", "eval"):
        assert names.count(command) == 1, (command, err)


def test_json_is_indented_on_a_terminal_and_one_line_piped(capsys, monkeypatch):
    """The README shows indented --json output (what a terminal gets); pipes get one line."""
    import json

    argv = ["map", str(FIXTURES / "partitioned"), "--json"]
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    code, tty, _ = run_cli(argv, capsys)
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    code2, piped, _ = run_cli(argv, capsys)
    assert code == code2 == 0
    assert json.loads(tty) == json.loads(piped)
    assert piped.count("\n") == 1 and tty.startswith("{\n  \""), tty
    assert all(len(line) <= 80 for line in tty.splitlines()), tty


def test_eval_usage_names_its_argument_path_like_every_command(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(["eval", "--help"], capsys)
    assert code == 0 and "ckpt eval [OPTIONS] PATH" in out, out
