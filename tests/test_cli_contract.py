"""The ``ckpt`` command's contract: output that fits a terminal and a pipe, untrusted text always
literal and escaped, README exit codes, docs/cli.md option tables, ``--version`` and completion.

Golden checks run every command on the shipped fixtures (made by TensorFlow/Keras) at
``COLUMNS=80`` and ``COLUMNS=200`` on a terminal (``TTY_COMPATIBLE=1``) and piped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _corpus import run_cli, write_bundle
from helpers import FIXTURES, set_terminal, shown_names

from ckpt_tools.cli._shorten import ELLIPSIS
from ckpt_tools.cli._text import cell_len

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SGR = re.compile(r"\x1b\[[0-9;]*m")  # our own colours: the only escape sequence allowed


def _fits(line: str, width: int) -> bool:
    return cell_len(line) <= width or " " not in line.strip()


def _shortened_from(cell: str, names: list[str]) -> bool:
    """Whether ``cell`` is a whole name, or a name with whole ``/`` segments left out, each run
    of them shown as ``…`` (``conv1/…/moving_mean/…``)."""
    if cell in names:
        return True
    if ELLIPSIS not in cell:
        return False
    if not re.fullmatch(r"(…/)?([^…/]+/(…/)?)*[^…/]*(/…)?|…", cell.replace("/…/", "/…/")):
        return False
    gap = "[^/]+(?:/[^/]+)*"
    pattern = "".join(gap if part == ELLIPSIS else re.escape(part)
                      for part in re.split(f"({ELLIPSIS})", cell))
    return any(re.fullmatch(pattern, n) for n in names)


# -- tables at 80 and 200 columns, and piped -----------------------------------------------
LIST_CASES = ["towers_bn", "tf2_object", "keras3_object", "model_garden_slot", "partitioned"]


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize("case", LIST_CASES)
def test_list_fits_the_terminal_without_breaking_names(case, columns, capsys, monkeypatch):
    path = str(FIXTURES / case)
    names = shown_names(path, capsys)
    set_terminal(monkeypatch, columns, tty=True)
    code, out, _ = run_cli(["list", path], capsys)
    lines = out.splitlines()
    assert code == 0 and all(_fits(line, columns) for line in lines), out
    header = next(i for i, line in enumerate(lines) if line.startswith("name "))
    rows = lines[header + 1: header + 1 + len(names)]
    assert len(rows) == len(names)
    for row in rows:
        cell = re.split(r"\s{2,}", row)[0].removesuffix(" parts)")
        cell = re.sub(r" \(\d+$", "", cell)
        assert _shortened_from(cell, names), (cell, row)
    if columns == 200:  # room enough: every name whole
        assert all(ELLIPSIS not in re.split(r"\s{2,}", r)[0] for r in rows), out


@pytest.mark.parametrize("case", LIST_CASES)
def test_list_piped_and_wide_are_one_row_per_line_with_whole_names(case, capsys, monkeypatch):
    path = str(FIXTURES / case)
    names = shown_names(path, capsys)
    for tty, extra in ((False, []), (True, ["--wide"])):
        set_terminal(monkeypatch, 80, tty=tty)
        code, out, _ = run_cli(["list", path, *extra], capsys)
        lines = out.splitlines()
        assert code == 0 and ELLIPSIS not in out
        rows = lines[2: 2 + len(names)]
        split = (lambda r: r.split("\t")) if not tty else (lambda r: r.split("  "))
        assert [split(r)[0].split(" (")[0] for r in rows] == [n for n in names]


COMMANDS = [
    ["list", "{towers}"],
    ["map", "{towers}"],
    ["stats", "{towers}"],
    ["diff", "{towers}/model.ckpt-20", "{towers}/model.ckpt-30"],
    ["diff", "{towers}", "--ema"],
    ["show", "{towers}", "conv1/*"],
    ["verify", "{towers}"],
    ["restore-ema", "{towers}", "--out", "{tmp}/ema", "--dry-run"],
    ["list", "{tf2}"],
    ["map", "{tf2}", "--apply-order", "trainable"],
    ["stats", "{tf2}", "--apply-order", "trainable"],
    ["diff", "{tf2}", "--ema", "--apply-order", "trainable"],
]


def _fill(args, tmp_path):
    return [a.format(towers=FIXTURES / "towers_bn", tf2=FIXTURES / "tf2_object", tmp=tmp_path)
            for a in args]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:1] + a[2:3]))
def test_every_command_fits_80_and_200_columns_and_pipes_one_row_per_line(
        args, tmp_path, capsys, monkeypatch):
    argv = _fill(args, tmp_path)
    set_terminal(monkeypatch, None, tty=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    code, piped, _ = run_cli(argv, capsys)
    _, as_json, _ = run_cli([*argv, "--json"], capsys)
    assert code == 0 and ELLIPSIS not in piped
    rows = len(_table(piped))
    for columns in (80, 200):
        set_terminal(monkeypatch, columns, tty=True)
        code, out, err = run_cli(argv, capsys)
        assert code == 0, err
        assert all(_fits(line, columns) for line in out.splitlines()), out
        assert len(_table(out)) == rows, out  # no row was split over two lines
    doc = json.loads(as_json)
    keys = _json_names(doc)
    for name in keys:  # every name whole, on exactly one line
        hits = [line for line in piped.splitlines() if name in line.split("\t")
                or re.search(rf"(^|\s){re.escape(name)}(\s|$)", line)]
        assert hits, (name, piped)


def _table(text: str) -> list[str]:
    """The rows (and header) of the first table in the output: lines with column gaps (on a
    terminal) or tabs (piped)."""
    return [line for line in text.split("\n\n", 1)[0].splitlines()
            if "  " in line.strip() or "\t" in line]


def _json_names(doc) -> list[str]:
    if isinstance(doc, dict) and "variables" in doc:
        return [v["path"] or v["name"] for v in doc["variables"]]
    if isinstance(doc, dict) and isinstance(doc.get("tensors"), list):
        return [t.get("path") or t["name"] for t in doc["tensors"]]
    return []


# -- untrusted text ------------------------------------------------------------------------
HOSTILE = {
    "w[/]x": np.arange(3, dtype=np.float32),
    "[bold]b": np.ones(2, np.float32),
    "[bold]b/ExponentialMovingAverage": np.full(2, 0.5, np.float32),
    "t\x1b]0;title\x07/k": np.arange(4, dtype=np.float32),
    "t\x1b]0;title\x07/k/ExponentialMovingAverage": np.arange(4, dtype=np.float32) / 2,
    "cls\x1b[2J": np.zeros(1, np.float32),
    "forged\nglobal_step": np.ones(1, np.float32),
    # every weight averaged: one left out would be refused (exit 6), not the point here
    "w[/]x/ExponentialMovingAverage": np.arange(3, dtype=np.float32) / 2,
    "cls\x1b[2J/ExponentialMovingAverage": np.zeros(1, np.float32),
    "forged\nglobal_step/ExponentialMovingAverage": np.ones(1, np.float32),
}


def _clean_output(text: str) -> str:
    return SGR.sub("", text)


@pytest.fixture()
def hostile(tmp_path) -> Path:
    run = tmp_path / "r[/][bold]\x1b[2J\nx"
    write_bundle(run / "model.ckpt-1", HOSTILE)
    (run / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1"\n')
    return run


HOSTILE_COMMANDS = [
    (["list", "{p}"], 0), (["list", "{p}", "-q"], 0), (["map", "{p}"], 0),
    (["map", "{p}", "-q"], 0), (["stats", "{p}"], 0), (["show", "{p}", "*"], 0),
    (["diff", "{p}", "{p}"], 0), (["diff", "{p}", "--ema"], 0), (["verify", "{p}"], 0),
    (["restore-ema", "{p}", "--out", "{out}", "--dry-run"], 0),
    (["restore-ema", "{p}", "--out", "{out}"], 0),
    (["restore-ema", "{p}", "--out", "{out}"], 7),  # exists now: the error names it
    (["export", "{p}", "--out", "{out}.npz"], 0),
    (["export", "{p}", "--out", "{out}.npz", "--grep", "[[]bold]*"], 7),
    (["list", "{p}", "--regex", "[/"], 2), (["list", "{p}", "--role", "\x1b[2J"], 2),
    (["show", "{p}", "nope\x1b[2J"], 3), (["list", "{p}/missing[/]\n"], 3),
]


@pytest.mark.parametrize("tty", [False, True])
@pytest.mark.parametrize(("args", "code"), HOSTILE_COMMANDS,
                         ids=[f"{i}-{a[0]}" for i, (a, _) in enumerate(HOSTILE_COMMANDS)])
def test_hostile_names_and_paths_are_literal_and_escaped(
        hostile, args, code, tty, tmp_path, capsys, monkeypatch):
    set_terminal(monkeypatch, 100, tty=tty)
    monkeypatch.delenv("NO_COLOR")  # colours on when tty: they must be our only escapes
    (tmp_path / "o[").mkdir()
    out_path = str(tmp_path / "o[/][bold]\x1b]0;t\x07\nut")
    if args[0] == "restore-ema" and code == 7:
        run_cli(["restore-ema", str(hostile), "--out", out_path], capsys)
    if "--grep" in args:
        run_cli(["export", str(hostile), "--out", out_path + ".npz"], capsys)
    argv = [a.format(p=hostile, out=out_path) for a in args]
    got, out, err = run_cli(argv, capsys)
    assert got == code, (out, err)
    for stream in (out, err):
        assert "Traceback" not in stream and "MarkupError" not in stream
        plain = _clean_output(stream)
        assert "\x1b" not in plain and "\x07" not in plain, repr(plain)
    text = _clean_output(out + err)
    assert not re.search(r"^global_step", text, re.M), text  # no forged row
    if code == 0 and args[0] in ("list", "map", "stats", "diff", "show"):
        assert "[bold]b" in text and "w[/]x" in text or args[0] == "diff" and "--ema" in args
        assert "forged\\nglobal_step" in text or "--ema" in args or args[0] == "map"
        assert "\\x1b]0;title\\x07" in text or args[0] == "list" and "-q" in args
    if code != 0:
        assert _clean_output(err).count("error: ") == 1, err
        if not tty:  # piped: usage line, hint and the error, each one line
            assert len(err.strip().splitlines()) <= 3, err
        else:  # a terminal: the error wraps at spaces to the width (100 here)
            assert all(_fits(line.removeprefix("error: "), 100)  # a path may be longer
                       for line in _clean_output(err).splitlines()), err


def test_hostile_names_survive_json_unchanged(hostile, capsys):
    code, out, _ = run_cli(["list", str(hostile), "--json"], capsys)
    assert code == 0 and "\x1b" not in out  # JSON escapes control characters itself
    doc = json.loads(out)
    assert {v["key"] for v in doc["variables"]} == set(HOSTILE)
    assert "\n" not in out.replace("\n", "").replace("\\n", "")


def test_state_file_entry_with_markup_and_controls_is_escaped(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint").write_text('model_checkpoint_path: "m[/]\\033[2J"\n')
    code, out, err = run_cli(["list", str(run)], capsys)
    assert code == 3 and out == "" and "\x1b" not in err and "m[/]" in err
    assert err.startswith("error: ") and len(err.splitlines()) == 1


# -- exit codes: every row of the README table, through the real CLI ------------------------
def _readme_codes() -> list[int]:
    table = README.split("## Exit codes and errors", 1)[1].split("\n## ", 1)[0]
    return [int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)]


def _subprocess(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)


PATCHED = ("import sys, ckpt_tools.cli.inspect as m\n"
           "def boom(*a, **k):\n    raise {exc}\n"
           "m.list_variables = boom\nfrom ckpt_tools.cli import main\nmain(sys.argv[1:])\n")


def test_every_readme_exit_code_through_the_real_cli(tmp_path, capsys, fixture_copy):
    import h5py

    codes = _readme_codes()
    assert codes == [0, 1, 2, 3, 4, 5, 6, 7, 8, 70, 130]
    got: dict[int, tuple[int, str]] = {}
    got[0] = run_cli(["list", str(FIXTURES / "linear_v2")], capsys)[::2]
    (tmp_path / "blocker").write_text("a file")
    got[1] = run_cli(["restore-ema", str(FIXTURES / "towers_bn"), "--out",
                      str(tmp_path / "blocker" / "out")], capsys)[::2]
    got[2] = run_cli(["list", str(FIXTURES / "towers_bn"), "--role", "nope"], capsys)[::2]
    got[3] = run_cli(["list", str(tmp_path / "nope")], capsys)[::2]
    corrupt = fixture_copy("linear_v2")
    data = next(corrupt.glob("*.data-*"))
    data.write_bytes(bytes([data.read_bytes()[0] ^ 0xFF]) + data.read_bytes()[1:])
    got[4] = run_cli(["stats", str(corrupt)], capsys)[::2]
    with h5py.File(tmp_path / "data.h5", "w") as f:
        f["x"] = np.zeros(3)
    got[5] = run_cli(["list", str(tmp_path / "data.h5")], capsys)[::2]
    got[6] = run_cli(["restore-ema", str(FIXTURES / "linear_trainable_only"), "--out",
                      str(tmp_path / "x")], capsys)[::2]
    inside = fixture_copy("towers_bn")
    got[7] = run_cli(["restore-ema", str(inside), "--out", str(inside)], capsys)[::2]
    no_tf = _subprocess("import sys; sys.modules['tensorflow'] = None\n"
                        "from ckpt_tools.cli import main; main(sys.argv[1:])",
                        "eval", str(FIXTURES / "linear_v2"))
    got[8] = (no_tf.returncode, no_tf.stderr)
    bug = _subprocess(PATCHED.format(exc="RuntimeError('boom')"), "list", "fixtures/linear_v2")
    got[70] = (bug.returncode, bug.stderr)
    stop = _subprocess(PATCHED.format(exc="KeyboardInterrupt"), "list", "fixtures/linear_v2")
    got[130] = (stop.returncode, stop.stderr)
    for code in codes:
        assert got[code][0] == code, (code, got[code])
        assert "Traceback" not in got[code][1]
        if code not in (0, 2):  # warnings may come first; the error is one last line
            assert got[code][1].splitlines()[-1].startswith("error: "), got[code]
    assert "Not a directory" in got[1][1]
    assert "pip install tensorflow-cpu" in got[8][1] and "pip install -e '.[tf]'" in got[8][1]
    assert "please report it" in got[70][1] and "interrupted" in got[130][1]
    assert "'ckpt --debug <command> ...'" in got[70][1]  # not after it (r36 F5)


# -- docs/cli.md option tables match --help ----------------------------------------------------
def _help_options(command: str) -> set[str]:
    from typer.main import get_command

    from ckpt_tools.cli import app

    group = get_command(app)
    cmd = group.get_command(None, command)
    names = set()
    for p in cmd.params:
        if getattr(p, "hidden", False) or p.param_type_name != "option" or p.name == "help":
            continue
        names.add(max(p.opts, key=len))
        names.update(o for o in p.secondary_opts if o.startswith("--"))
    return names


def _readme_options(command: str) -> set[str]:
    """The options docs/cli.md gives ``ckpt COMMAND`` (u15 F8: moved there from README)."""
    from _cli_doc import cli_doc_rows

    return {m for cell in cli_doc_rows(command) for m in re.findall(r"--[\w-]+", cell)}


COMMANDS_WITH_TABLES = ["list", "map", "restore-ema", "export", "verify", "show", "stats",
                        "diff", "eval", "average", "train"]


@pytest.mark.parametrize("command", COMMANDS_WITH_TABLES)
def test_readme_option_tables_match_help(command):
    assert _readme_options(command) == _help_options(command)


def test_shared_vocabulary_in_every_command():
    for command in COMMANDS_WITH_TABLES:
        assert {"--json", "--quiet"} <= _help_options(command), command
    for command in ("list", "map", "restore-ema", "export", "stats", "diff"):
        assert {"--grep", "--regex", "--wide"} <= _help_options(command), command
    for command in ("map", "restore-ema"):
        assert "--slots" in _help_options(command) and "--keep-slots" not in \
            _help_options(command)
    assert "--format" in _help_options("export") and "--to" not in _help_options("export")


def test_to_is_an_alias_of_format_and_unknown_formats_are_usage_errors(tmp_path, capsys):
    path = str(FIXTURES / "linear_v2")
    code, out, _ = run_cli(["export", path, "--out", str(tmp_path / "w.bin"), "--to", "npz",
                            "--json"], capsys)
    assert code == 0 and json.loads(out)["format"] == "npz"
    assert run_cli(["export", path, "--out", str(tmp_path / "w.xyz")], capsys)[0] == 2
    assert run_cli(["export", path, "--out", str(tmp_path / "a.npz"), "--rename", "x"],
                   capsys)[0] == 2
    assert run_cli(["restore-ema", path, "--out", str(tmp_path / "o"), "--format", "zip"],
                   capsys)[0] == 2
    assert run_cli(["map", path, "--slots", "maybe"], capsys)[0] == 2


def test_quiet_prints_only_data(tmp_path, capsys):
    path = str(FIXTURES / "towers_bn")
    code, out, err = run_cli(["restore-ema", path, "--out", str(tmp_path / "o"), "-q"], capsys)
    assert code == 0 and out == "" and err == ""
    code, out, _ = run_cli(["map", path, "-q"], capsys)
    assert code == 0 and all("\t" in line for line in out.splitlines())
    code, out, _ = run_cli(["export", path, "--out", str(tmp_path / "w.npz"), "-q"], capsys)
    assert code == 0 and out == ""
    code, out, _ = run_cli(["stats", path, "-q"], capsys)
    assert code == 0 and not out.startswith(str(FIXTURES))


# -- one pick per directory, said once -------------------------------------------------------
def test_directory_with_several_candidates_says_which_and_all_commands_agree(tmp_path, capsys):
    notes = {}
    for argv in (["list"], ["map"], ["stats"], ["eval", "--data", str(tmp_path / "none")]):
        code, out, err = run_cli([argv[0], str(FIXTURES / "keras_ema"), *argv[1:]], capsys)
        notes[argv[0]] = [line for line in err.splitlines() if "candidate" in line]
    assert all(len(n) == 1 for n in notes.values()), notes
    assert len({n[0] for n in notes.values()}) == 1
    picked = re.search(r"using (\S+)", notes["list"][0]).group(1)
    _, out, _ = run_cli(["list", str(FIXTURES / "keras_ema"), "--json"], capsys)
    assert json.loads(out)["checkpoint"].endswith(picked)


# -- --version and completion ----------------------------------------------------------------
def test_version(capsys):
    import ckpt_tools

    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0 and out.strip() == f"ckpt {ckpt_tools.__version__}"


@pytest.fixture()
def ckpt_on_path(tmp_path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ckpt"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ckpt_tools "$@"\n')
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "HOME": str(tmp_path / "home")}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_completes_commands_options_and_paths(ckpt_on_path, tmp_path):
    (tmp_path / "home").mkdir()
    proc = subprocess.run(["ckpt", "--install-completion", "bash"], env=ckpt_on_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    installed = next((tmp_path / "home").rglob("ckpt.sh"))
    script = f"""
source '{installed}'
complete_at() {{ COMP_WORDS=("$@"); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ));
  _ckpt_completion ckpt; echo "${{COMPREPLY[*]}}"; }}
complete -p ckpt
complete_at ckpt re
complete_at ckpt restore-ema x --sl
complete_at ckpt list {FIXTURES}/towers_b
complete_at ckpt --ver
"""
    proc = subprocess.run(["bash", "-c", script], env=ckpt_on_path, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and "_ckpt_completion" in lines[0], proc.stderr
    assert lines[1] == "restore-ema"
    assert lines[2] == "--slots"
    assert lines[3] == f"{FIXTURES}/towers_bn/"
    assert lines[4] == "--version"


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion_scripts_and_answers(shell, ckpt_on_path):
    proc = subprocess.run(["ckpt", "--show-completion", shell], env=ckpt_on_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "_CKPT_COMPLETE=complete_" + shell in proc.stdout
    env = {**ckpt_on_path, "_CKPT_COMPLETE": f"complete_{shell}",
           "_TYPER_COMPLETE_ARGS": "ckpt restore-ema x --sl",
           "_TYPER_COMPLETE_FISH_ACTION": "get-args"}
    answer = subprocess.run(["ckpt"], env=env, capture_output=True, text=True, timeout=60)
    assert "--slots" in answer.stdout, answer.stderr


def test_display_names_are_object_paths_in_every_command(capsys):
    """TF2 keys are shown as object paths by list, stats, show, diff and map alike, the same
    --grep selects in each, and --json keeps the raw key as `key`."""
    path = str(FIXTURES / "tf2_object")
    lists = json.loads(run_cli(["list", path, "--json"], capsys)[1])["variables"]
    kernel = next(v for v in lists if v["path"] == "model/dense/kernel")
    for argv in (["list", path], ["stats", path], ["diff", path, path],
                 ["map", path, "--apply-order", "trainable"],
                 ["show", path, "model/dense/kernel"]):
        code, out, _ = run_cli([*argv, "--grep", "model/dense/*"] if argv[0] != "show" else argv,
                               capsys)
        assert code == 0 and "model/dense/kernel" in out, (argv, out)
        assert kernel["key"] not in out, (argv, out)
    stats = json.loads(run_cli(["stats", path, "--json", "--grep", "model/dense/kernel"],
                               capsys)[1])["tensors"]
    assert [(t["key"], t["path"]) for t in stats] == [(kernel["key"], "model/dense/kernel")]
    shown = json.loads(run_cli(["show", path, "--regex", "^model/dense/kernel$", "--json"],
                               capsys)[1])["tensors"]
    assert [t["key"] for t in shown] == [kernel["key"]]


def test_a_reader_that_goes_away_is_not_an_error(ckpt_on_path):
    proc = subprocess.run(["bash", "-c", "set -o pipefail; ckpt list "
                           f"'{FIXTURES / 'many_keys'}' | head -1"], env=ckpt_on_path,
                          capture_output=True, text=True, timeout=120)
    # piped, the summary goes to stderr (the table alone on stdout); no error, no warning
    assert proc.returncode == 0, proc.stderr
    assert "error" not in proc.stderr and "warning" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.count("\n") == 1


def test_a_real_terminal_is_detected_and_its_width_used(tmp_path):
    """Under a pseudo-terminal of 80 columns (no COLUMNS, no TTY_COMPATIBLE) tables fit it."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TTY_COMPATIBLE")}
    env.update(PYTHONPATH=str(ROOT), NO_COLOR="1", TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "ckpt_tools", "list",
                             str(FIXTURES / "towers_bn")], stdout=follower, stderr=follower,
                            env=env, cwd=ROOT)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(leader)
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    lines = text.splitlines()
    assert proc.returncode == 0 and any(ELLIPSIS in line for line in lines), text
    assert all(cell_len(line) <= 80 for line in lines if "  " in line), text


@pytest.mark.parametrize("command", [["list"], ["export", "--out", "x.npz"]])
def test_an_empty_path_is_named_in_the_error(command, tmp_path, monkeypatch):
    """``ckpt list ''`` said ``error: : no checkpoint found`` (review-16-user-u18 F9): the
    empty name is shown quoted, exit 3, nothing written."""
    from helpers import run_cli

    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli([command[0], "", *command[1:]])
    assert code == 3 and "'': an empty path names no checkpoint" in err, err
    assert not any(tmp_path.iterdir())
