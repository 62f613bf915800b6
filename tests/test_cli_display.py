"""What the ``ckpt`` tables show at 80 columns and in a pipe (review of issue 13).

- At ``COLUMNS=80`` shortened names stay distinct, are shortened only by whole ``/`` segments,
  and never cut inside an escape.
- stderr notes and stdout summaries fit 80 columns, wrapped at spaces.
- Piped tables are tab-separated: every line of a table has the same number of fields, for
  ``awk -F'\\t'`` (and for plain ``awk`` where names hold no blanks).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _corpus import run_cli
from helpers import FIXTURES, set_terminal, shown_names

from ckpt_tools.cli._layout import Column
from ckpt_tools.cli._output import Output
from ckpt_tools.cli._shorten import ELLIPSIS, shorten_column
from ckpt_tools.cli._text import cell_len, clean

ROOT = Path(__file__).resolve().parent.parent
TOWERS = str(FIXTURES / "towers_bn")


def _rows(out: str) -> list[list[str]]:
    """The data rows of the first table on stdout, split at the column gaps."""
    lines = out.split("\n\n", 1)[0].splitlines()
    header = next(i for i, line in enumerate(lines) if re.match(r"(name|raw) ", line))
    return [re.split(r" {2,}", line.strip()) for line in lines[header + 1:]]


def _matches(cell: str, names: list[str]) -> list[str]:
    """The names ``cell`` can stand for: each ``…`` is one or more whole ``/`` segments."""
    if ELLIPSIS not in cell:
        return [n for n in names if n == cell]
    pattern = "".join("[^/]+(?:/[^/]+)*" if part == ELLIPSIS else re.escape(part)
                      for part in re.split(f"({ELLIPSIS})", cell))
    return [n for n in names if re.fullmatch(pattern, n)]


def _whole_segments(cell: str) -> bool:
    """Every ``…`` stands between ``/`` (or at an end): no segment was cut."""
    return all((m.start() == 0 or cell[m.start() - 1] == "/")
               and (m.end() == len(cell) or cell[m.end()] == "/")
               for m in re.finditer(ELLIPSIS, cell))


@pytest.mark.parametrize("argv", [["list", TOWERS], ["list", TOWERS, "--role", "ema"],
                                  ["stats", TOWERS]], ids=["list", "list-ema", "stats"])
def test_shortened_names_stay_distinct_and_whole_at_80_columns(argv, capsys, monkeypatch):
    names = shown_names(TOWERS, capsys)
    set_terminal(monkeypatch)
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    rows = _rows(out)
    cells = [row[0] for row in rows]
    assert any(ELLIPSIS in c for c in cells), out  # 80 columns do shorten these names
    # No two rows look the same: a shadow shown as …/ExponentialMovingAverage is told apart by
    # the variable named beside it ("of conv1/weights").
    assert len({tuple(r) for r in rows}) == len(rows), out
    for cell in cells:
        assert _whole_segments(cell), (cell, out)
        assert _matches(cell, names), (cell, out)
    assert all(cell_len(line) <= 80 for line in out.splitlines()), out


@pytest.mark.parametrize("fixture", ["towers_bn", "model_garden_slot"])
def test_list_ema_column_says_which_variable_a_shadow_averages(fixture, capsys, monkeypatch):
    """At 80 columns the ema column names the variable (never ``of ..``/``of ../..``): whole
    segments that match exactly one variable, and the shadow's name fits that variable."""
    path = str(FIXTURES / fixture)
    code, out, _ = run_cli(["list", path, "--json"], capsys)
    import json

    doc = json.loads(out)["variables"]
    names = [v["path"] or v["name"] for v in doc]
    truth = {v["path"] or v["name"]: next(w["path"] or w["name"] for w in doc
                                          if w["key"] == v["ema_of"] or w["name"] == v["ema_of"])
             for v in doc if v["ema_of"]}
    set_terminal(monkeypatch)
    code, out, _ = run_cli(["list", path, "--role", "ema"], capsys)
    assert code == 0
    rows = _rows(out)
    assert len(rows) == len(truth) and len({tuple(r) for r in rows}) == len(rows), out
    for row in rows:
        name, ema = row[0], row[-1]
        assert ema.startswith("of "), row
        target = ema[3:]
        assert ".." not in target and target.strip("/" + ELLIPSIS), row
        assert _whole_segments(target), row
        (variable,) = _matches(target, names)  # one variable, unambiguous
        assert any(truth[s] == variable for s in _matches(name, list(truth))), (row, out)
    assert all(cell_len(line) <= 80 for line in out.splitlines()), out


def test_diff_ema_rows_are_distinct_at_80_columns(capsys, monkeypatch):
    names = shown_names(TOWERS, capsys)
    set_terminal(monkeypatch)
    code, out, _ = run_cli(["diff", TOWERS, "--ema"], capsys)
    assert code == 0
    rows = _rows(out)
    raw = [r[0] for r in rows]
    assert len(rows) == 6 and len(set(raw)) == len(raw), out
    for r in rows:
        assert _whole_segments(r[0]) and _matches(r[0], names), (r, out)
        shadow = r[1]
        # The shadow column leaves out the raw name beside it, or shows a name of its own.
        assert shadow == "…/ExponentialMovingAverage" or _matches(shadow, names), (r, out)
    assert len({(r[0], r[1]) for r in rows}) == len(rows)


def test_escapes_are_never_cut():
    names = ["t\x1b]0;title\x07x" * 20, "rtl\u202eevil" * 30, "a/" + "\u200b" * 50 + "/b",
             "L" * 300]
    for width in range(8, 40):
        shown = shorten_column(names, width, clean, cell_len)
        assert len(set(shown)) == len(shown)
        for name, cell in zip(names, shown, strict=True):
            assert cell_len(cell) <= width
            tokens = [clean(c) for c in name]
            pieces = cell.split(ELLIPSIS)
            head, tail = pieces[0], pieces[-1]
            heads = {"".join(tokens[:k]) for k in range(len(tokens) + 1)}
            tails = {"".join(tokens[len(tokens) - k:]) for k in range(len(tokens) + 1)}
            segs = clean(name).split("/")
            assert head in heads or head.rstrip("/") in segs, (width, cell)
            assert tail in tails or tail.lstrip("/") in segs, (width, cell)


def test_hostile_names_are_shortened_at_escape_boundaries(capsys, monkeypatch, tmp_path):
    import numpy as np
    from _corpus import write_bundle

    names = {"t\x1b]0;title\x07x/" + "k" * 60: np.zeros(1, np.float32),
             "rtl\u202eevil/" + "w" * 70: np.zeros(1, np.float32)}
    write_bundle(tmp_path / "m", names)
    set_terminal(monkeypatch)
    code, out, _ = run_cli(["list", str(tmp_path / "m")], capsys)
    assert code == 0
    for cell in (row[0] for row in _rows(out)):
        for piece in cell.split(ELLIPSIS):
            # a piece never ends or starts inside \x1b / \u202e
            assert not re.search(r"\\(x[0-9a-f]?|u[0-9a-f]{0,3})$", piece), cell
            assert not re.match(r"^([0-9a-f]{1,3}|x?[0-9a-f])\\", piece), cell


@pytest.mark.parametrize("argv", [["list", TOWERS], ["stats", TOWERS], ["diff", TOWERS, "--ema"],
                                  ["list", str(FIXTURES / "model_garden_slot")]],
                         ids=["list", "stats", "diff-ema", "list-slots"])
def test_notes_and_summaries_fit_80_columns_at_spaces(argv, capsys, monkeypatch):
    set_terminal(monkeypatch)
    code, out, err = run_cli(argv, capsys)
    assert code == 0
    for line in (out + err).splitlines():
        assert cell_len(line) <= 80, line
    joined = " ".join(err.split())
    if "hidden" in joined:
        assert "(--wide shows them)" in joined and "hidden at 80 columns:" in joined


def test_a_long_note_wraps_at_spaces_on_a_terminal(capsys, monkeypatch):
    set_terminal(monkeypatch, 40)
    message = "EMA: 6 of 6 weights and BN statistics have a shadow; restore-ema uses them"
    Output().note(message)
    err = capsys.readouterr().err
    assert all(len(line) <= 40 for line in err.splitlines()) and len(err.splitlines()) > 1
    assert " ".join(err.split()) == message  # no word was broken


def _piped(argv: list[str]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TTY_COMPATIBLE", None)
    proc = subprocess.run([sys.executable, "-m", "ckpt_tools", *argv], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("argv", [["list", TOWERS], ["stats", TOWERS], ["diff", TOWERS, "--ema"],
                                  ["diff", TOWERS + "/model.ckpt-20", TOWERS + "/model.ckpt-30"],
                                  ["map", TOWERS], ["list", str(FIXTURES / "tf2_object")]],
                         ids=["list", "stats", "diff-ema", "diff", "map", "list-tf2"])
def test_piped_tables_have_the_same_fields_on_every_line_for_awk(argv):
    lines = _piped(argv)
    start = next(i for i, line in enumerate(lines) if "\t" in line)  # after the title line(s)
    table = lines[start:lines.index("")] if "" in lines else lines[start:]
    assert len(table) > 2 and all("\t" in line for line in table)
    script = "/^$/ { exit } /\t/ { print NF }"
    for awk in (["awk", "-F", "\t", script], ["awk", script]):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
        ckpt = subprocess.Popen([sys.executable, "-m", "ckpt_tools", *argv], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        counts = subprocess.run(awk, stdin=ckpt.stdout, capture_output=True, text=True,
                                timeout=120).stdout.split()
        ckpt.wait(timeout=120)
        assert len(counts) == len(table), counts
        if awk[1] == "-F" or argv[0] in ("stats", "map") or "--ema" in argv or \
                argv[0] == "diff":
            assert len(set(counts)) == 1, (awk, counts, table)
    header = table[0].split("\t")
    assert all(" " not in h for h in header)
    assert all(len(line.split("\t")) == len(header) for line in table)


def test_piped_shapes_hold_no_blanks():
    lines = _piped(["stats", TOWERS])
    row = next(line for line in lines if line.startswith("conv1/weights\t"))
    assert "[3,3,3,4]" in row.split("\t")


def test_decorative_columns_are_left_out_of_pipes(capsys, monkeypatch):
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    Output().table(None, [Column("a"), Column("", data=False), Column("b")],
                   [["x", "→", ""], ["y z", "→", "w"]])
    assert capsys.readouterr().out.splitlines() == ["a\tb", "x\t-", "y z\tw"]


# -- review findings outside tables -------------------------------------------------------------
def test_json_escapes_bidi_and_zero_width_characters(tmp_path, capsys):
    import json

    import numpy as np
    from _corpus import write_bundle

    names = {"rtl\u202eevil": np.zeros(1, np.float32), "zw\u200bsp": np.ones(1, np.float32),
             "del\x7fc1\x85": np.ones(1, np.float32)}
    write_bundle(tmp_path / "m", names)
    for argv in (["list"], ["stats"], ["diff", str(tmp_path / "m")]):
        code, out, _ = run_cli([argv[0], str(tmp_path / "m"), *argv[1:], "--json"], capsys)
        assert code == 0
        assert not re.search("[\u202e\u200b\x7f\x85]", out), argv
        assert "\\u202e" in out and "\\u200b" in out
        doc = json.loads(out)
        found = {v.get("key") or v.get("name") for v in
                 doc.get("variables") or doc.get("tensors") or []}
        assert set(names) <= found or argv[0] == "diff", (argv, found)


@pytest.mark.parametrize("argv", [
    ["restore-ema", TOWERS, "--out", "{tmp}/o", "-g", "nomatch*"],
    ["export", TOWERS, "--out", "{tmp}/o.npz", "-g", "nomatch*"],
    ["export", TOWERS, "--out", "{tmp}/o.npz", "--exclude", "*"],
    ["map", TOWERS, "--regex", "^nomatch$"]], ids=["restore-ema", "export", "exclude", "map"])
def test_filters_that_select_nothing_say_so_with_exit_3(argv, tmp_path, capsys):
    code, out, err = run_cli([a.format(tmp=tmp_path) for a in argv], capsys)
    assert code == 3 and out == "", err
    assert "name filters select no variable" in err and "--include" not in err
    assert any(f in err for f in ("--grep 'nomatch*'", "--exclude '*'", "--regex '^nomatch$'"))
    assert len(err.splitlines()) == 1 and not (tmp_path / "o").exists()


def test_readme_documents_exit_3_for_empty_selections_and_eval_mismatch():
    table = (ROOT / "README.md").read_text().split("## Exit codes and errors", 1)[1]
    row = next(line for line in table.splitlines() if line.startswith("| 3 |"))
    assert "select no variable" in row and "ckpt eval" in row


def test_os_errors_name_the_operation(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    code, _, err = run_cli(["restore-ema", TOWERS, "--out", str(tmp_path / "afile" / "sub")],
                           capsys)
    assert code == 1 and "Not a directory" in err
    assert "while creating the output directory" in err and "afile is a file" in err
    code, _, err = run_cli(["export", TOWERS, "--out", str(tmp_path / "afile" / "x.npz")],
                           capsys)
    assert code == 1 and "while writing the output file" in err


def test_usage_lines_show_path_without_braces(capsys):
    for command in ("list", "stats", "average"):
        code, _, err = run_cli([command], capsys)
        assert code == 2 and "{" not in err.splitlines()[0], err
    assert "Usage: ckpt list [OPTIONS] PATH" in run_cli(["list"], capsys)[2]


def test_restore_ema_without_shadows_gives_advice_that_fits_it(tmp_path, capsys):
    code, _, err = run_cli(["restore-ema", str(FIXTURES / "linear_trainable_only"), "--out",
                            str(tmp_path / "x")], capsys)
    assert code == 6 and "pass --raw to ckpt export" not in err


def _completion_env(tmp_path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ckpt"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ckpt_tools "$@"\n')
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "COLUMNS": "60"}


def test_fish_and_zsh_candidates_have_no_embedded_newlines(tmp_path):
    env = _completion_env(tmp_path)
    fish = subprocess.run(["ckpt"], env={**env, "_CKPT_COMPLETE": "complete_fish",
                                         "_TYPER_COMPLETE_ARGS": "ckpt list --r",
                                         "_TYPER_COMPLETE_FISH_ACTION": "get-args"},
                          capture_output=True, text=True, timeout=60)
    lines = fish.stdout.splitlines()
    assert lines and all("\t" in line for line in lines), fish.stdout  # one candidate a line
    role = next(line for line in lines if line.startswith("--role\t"))
    assert role.rstrip().endswith("other.")
    zsh = subprocess.run(["ckpt"], env={**env, "_CKPT_COMPLETE": "complete_zsh",
                                        "_TYPER_COMPLETE_ARGS": "ckpt list --r"},
                         capture_output=True, text=True, timeout=60)
    inside = zsh.stdout.split("((", 1)[1].rsplit("))", 1)[0]
    assert "--role" in inside and all(line.startswith('"--') for line in inside.splitlines())


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_option_values_with_choices(tmp_path):
    env = _completion_env(tmp_path)
    script = """
source <(ckpt --show-completion bash)
at() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _ckpt_completion ckpt;
  echo "${COMPREPLY[*]}"; }
at ckpt list --role b
at ckpt list --role ''
at ckpt restore-ema x --format ''
at ckpt map x --slots k
at ckpt export x --out y --format s
"""
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=180, cwd=ROOT)
    lines = proc.stdout.splitlines()
    assert lines[0] == "bn_stat", proc.stderr
    assert lines[1].split() == ["weight", "ema", "ema_debias", "optimizer_slot", "bn_stat",
                                "step", "loss_average", "tensor_average", "other"]
    assert lines[2].split() == ["keras", "v2", "h5"]
    assert lines[3] == "keep" and lines[4] == "safetensors"


def test_eval_on_a_checkpoint_of_another_model_is_exit_3_with_the_cause(tmp_path):
    """A TF1 graph's checkpoint: the Python way named is restore_ema(sess, path), and the
    checkpoint is named under the directory as typed, not as the state file's absolute path
    (a Saver's default) (review-22-user-u24 F3)."""
    pytest.importorskip("tensorflow")
    run = tmp_path / "run"
    shutil.copytree(TOWERS, run)
    (run / "checkpoint").write_text(f'model_checkpoint_path: "{run}/model.ckpt-30"\n')
    from _tf_runner import run_python

    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    # its own process, forked from the tests' TensorFlow fork server (eval imports TensorFlow)
    proc = run_python(["-c", "from ckpt_tools.cli import main; main()", "eval", "run",
                       "--num-examples", "10"], timeout=300, env=env, cwd=tmp_path)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: run/model.ckpt-30: not a checkpoint of the reference"), last
    assert "(Python: ckpt_tools.restore_ema(sess, path))" in last, last
    assert proc.returncode == 3, proc.stderr
    assert last.startswith("error: ") and "Traceback" not in proc.stderr
    # the cause in our words (review-20-user-u22 F4: TF's key, one of several, read as if the
    # file were broken): the first variable of the model the file holds in another shape
    assert "(the one 'ckpt train --api v1' builds; its conv1/weights is [3, 3, 3, 4], the " \
        "model's [3, 3, 3, 16]): ckpt eval evaluates only that model" in last, last
    assert "'ckpt restore-ema PATH --out DIR'" in last and "Key " not in last, last
    assert not last.endswith(":")


def test_cause_line_keeps_the_cause_of_a_tensorflow_restore_error():
    from ckpt_tools.train.common import cause_line

    text = ("Restoring from checkpoint failed. ... Original error:\n\nGraph execution error:\n\n"
            "Detected at node 'save/RestoreV2' defined at (most recent call last):\n"
            "    File \"x.py\", line 8, in <module>\nNode: 'save/RestoreV2'\n"
            "Key w not found in checkpoint\n\t [[{{node save/RestoreV2}}]]\n\n"
            "Original stack trace for 'save/RestoreV2':\n  File \"y.py\", line 1\n")
    assert cause_line(RuntimeError(text)) == "Key w not found in checkpoint"


def test_keras_pairing_errors_name_object_paths_not_raw_keys():
    from ckpt_tools import open_checkpoint
    from ckpt_tools.errors import EmaError
    from ckpt_tools.keras_ema import require_keras_pairing

    with open_checkpoint(FIXTURES / "keras_ema" / "adam.keras") as ckpt:
        paths = {v.name: v.path for v in ckpt.variables()}
        layout = ckpt.reader.keras
        averages = dict(layout.averages)
        try:  # as if the file could not pair one copy (sublayers of equal shapes)
            first = next(iter(layout.averages))
            layout.averages[first] = None
            layout.notes.clear()
            with pytest.raises(EmaError) as err:
                require_keras_pairing(ckpt)
        finally:
            layout.averages.clear()
            layout.averages.update(averages)
    message = str(err.value)
    assert paths[first] in message and f" {first})" not in message, message


@pytest.mark.parametrize("argv", [["diff", TOWERS, "--ema"],
                                  ["diff", TOWERS + "/model.ckpt-20", TOWERS + "/model.ckpt-30"]])
def test_diff_reports_progress_over_bytes_like_stats(argv, capsys, monkeypatch):
    from ckpt_tools.cli import _progress

    calls = []
    monkeypatch.setattr(_progress.ByteProgress, "update",
                        lambda self, done, total=None: calls.append((self.label, done, total)))
    code, _, _ = run_cli(argv, capsys)
    assert code == 0 and calls and all(label == "comparing" for label, _, _ in calls)
    done, total = calls[-1][1:]
    assert total and done == total  # a total is known, and the bar ends full


@pytest.mark.parametrize("fixture", ["towers_bn", "model_garden_slot", "keras_ema", "tf2_object",
                                     "linear_v2"])
def test_piped_list_has_one_column_set_for_every_checkpoint(fixture):
    """Piped through a real pipe, ``list`` has the same header on every checkpoint (TF1 with a
    ``.meta``, TF2, Keras), so the README's ``cut -f1,7`` is the shadow and its variable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TTY_COMPATIBLE", None)
    proc = subprocess.run([sys.executable, "-m", "ckpt_tools", "list", str(FIXTURES / fixture)],
                          capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode == 2 and "several" in proc.stderr:  # pragma: no cover
        pytest.skip(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n\n", 1)[0].splitlines()[1:]  # after the title line
    assert lines[0].split("\t") == ["name", "dtype", "shape", "size", "role", "collections",
                                    "ema"], proc.stdout
    for line in lines[1:]:
        fields = line.split("\t")
        assert len(fields) == 7, line
        if fields[4] == "ema":
            assert fields[6].startswith("of ") and ".." not in fields[6], line


def test_refusal_wraps_at_spaces_on_a_terminal_and_is_one_line_in_a_pipe(capsys, monkeypatch):
    """``ckpt map fixtures/tf2_object`` refuses (exit 6) with a long message: at 80 columns on
    a terminal every line fits and no word or option is cut; piped it is one line."""
    argv = ["map", str(FIXTURES / "tf2_object")]
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    code, _, piped = run_cli(argv, capsys)
    assert code == 6 and len(piped.strip().splitlines()) == 1 and len(piped) > 80, piped
    set_terminal(monkeypatch)
    code, _, err = run_cli(argv, capsys)
    assert code == 6
    lines = err.strip().splitlines()
    assert len(lines) > 1 and all(cell_len(line) <= 80 for line in lines), err
    assert " ".join(lines) == piped.strip()  # wrapped at spaces only: nothing cut or lost


def test_error_label_stays_with_a_long_first_word_and_warnings_wrap(tmp_path, capsys,
                                                                    monkeypatch):
    """A path longer than the line starts the error's first line (never ``error:`` alone on a
    line); a long path with blanks wraps at them; piped, each message stays one line."""
    long_dir = tmp_path / ("x" * 120)
    argv = ["list", str(long_dir / "missing")]
    set_terminal(monkeypatch)
    code, out, err = run_cli(argv, capsys)
    assert code == 3 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"error: {tmp_path}"), err
    assert all(line.strip() != "error:" for line in lines), err
    spaced = tmp_path / " ".join(["word"] * 40)
    code, _, err = run_cli(["list", str(spaced)], capsys)
    assert code == 3 and len(err.splitlines()) > 1, err
    assert all(cell_len(line) <= 80 for line in err.splitlines()[1:]), err
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    for args in (argv, ["list", str(spaced)]):
        code, _, err = run_cli(args, capsys)
        assert code == 3 and len(err.splitlines()) == 1 and err.startswith("error: "), err


def test_warning_wraps_on_a_terminal_with_its_label(capsys, monkeypatch):
    from ckpt_tools.cli._output import Output

    set_terminal(monkeypatch)
    Output().warning(" ".join(["averages"] * 30))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) > 1 and lines[0].startswith("warning: averages")
    assert all(cell_len(line) <= 80 for line in lines)


def test_errors_wrap_to_stderrs_terminal_when_stdout_is_piped():
    """``ckpt map … | less``: stdout is a pipe, stderr the terminal; the refusal wraps to the
    terminal's own width (60 here, no COLUMNS), at spaces only."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TTY_COMPATIBLE")}
    env["NO_COLOR"] = "1"
    argv = [sys.executable, "-m", "ckpt_tools", "map", str(FIXTURES / "tf2_object")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 6 and out == b""
    lines = b"".join(chunks).decode().replace("\r\n", "\n").strip().splitlines()
    assert len(lines) > 3 and all(len(line) <= 60 for line in lines), lines
    piped = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120).stderr
    assert " ".join(lines) == piped.strip() and len(piped.strip().splitlines()) == 1


# -- names that differ only in the middle of a segment wider than the column (review r2) --------
P = "p" * 60
ALIKE = [P + "A" + P, P + "B" + P, f"scope/{P}A{P}/w", f"scope/{P}B{P}/w",
         "m/" + "x" * 50 + "1/k", "m/" + "x" * 50 + "2/k"]


def test_names_alike_but_mid_segment_are_shortened_apart():
    many = [f"{P}{c}{P}" for c in "ABCDEFGHIJKLMNOPQRST"] + [f"{c}{P}{P}" for c in "ABCDE"]
    for names in (ALIKE, many, [n + "/ExponentialMovingAverage" for n in ALIKE]):
        for width in (12, 20, 30, 47, 60, 80):
            shown = shorten_column(names, width, clean, cell_len)
            assert len(set(shown)) == len(shown), (width, shown)
            assert all(cell_len(c) <= width for c in shown), (width, shown)


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("command", ["list", "stats", "map", "diff-ema"])
def test_tables_never_show_two_rows_the_same(command, columns, capsys, monkeypatch, tmp_path):
    import numpy as np
    from _corpus import write_bundle

    tensors = {}
    for k, name in enumerate(ALIKE):
        tensors[name] = np.full(2, k, np.float32)
        tensors[name + "/ExponentialMovingAverage"] = np.full(2, k + 6, np.float32)
    write_bundle(tmp_path / "m", tensors)
    set_terminal(monkeypatch, columns)
    argv = {"diff-ema": ["diff", str(tmp_path / "m"), "--ema"]}.get(
        command, [command, str(tmp_path / "m")])
    code, out, _ = run_cli(argv, capsys)
    assert code == 0, out
    lines = out.split("\n\n", 1)[0].splitlines()
    header = next(k for k, line in enumerate(lines)
                  if re.match(r"(name|raw|restored from) ", line))
    rows = lines[header + 1:]
    assert len(rows) == len(tensors) // (1 if command in ("list", "stats") else 2), out
    assert len(set(rows)) == len(rows), out
    assert all(cell_len(line) <= columns for line in lines), out


# -- escaping is one-to-one; suggestions can be typed back (review r2) ------------------------
def test_a_control_character_and_its_spelled_out_form_show_differently(
        capsys, monkeypatch, tmp_path):
    import numpy as np
    from _corpus import write_bundle

    names = ["t\x1bx", "t\\x1bx", "a\nb", "a\\nb", "tab\\", "w\\\\"]
    write_bundle(tmp_path / "m", {n: np.zeros(2, np.float32) for n in names})
    for tty, argv in ((True, ["list"]), (False, ["list"]), (False, ["stats"]),
                      (False, ["list", "-q"])):
        set_terminal(monkeypatch, tty=tty)
        code, out, _ = run_cli([argv[0], str(tmp_path / "m"), *argv[1:]], capsys)
        assert code == 0, out
        firsts = [re.split(r"\t| {2,}", line)[0] for line in out.splitlines()]
        shown = [f for f in firsts if f.startswith(("t", "a", "w"))]
        assert sorted(shown) == sorted(["t\\x1bx", "t\\\\x1bx", "a\\nb", "a\\\\nb", "tab\\\\",
                                        "w\\\\\\\\"]), (argv, out)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_did_you_mean_can_be_typed_back_in_the_shell(tmp_path):
    import numpy as np
    from _corpus import write_bundle

    name = "t\x1b]0;PWNED\x07x"
    write_bundle(tmp_path / "m", {name: np.arange(3, dtype=np.float32),
                                  "u\x1b[31mred": np.ones(2, np.float32),
                                  "a b/c d": np.zeros(1, np.float32)})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CKPT_DEBUG", None)
    ckpt = f'"{sys.executable}" -m ckpt_tools'
    # what 'ckpt list' shows, pasted back (review-11-user-r9 F7: a '[' made it a glob without
    # any suggestion), and a near miss
    for wrong in ("t\\x1b]0;PWNED\\x07x", "u\\x1b[31mred", "a b/c_d"):
        proc = subprocess.run([sys.executable, "-m", "ckpt_tools", "show", str(tmp_path / "m"),
                               wrong], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 3, proc.stderr
        suggestion = re.search(r"did you mean (.*)\?$", proc.stderr.strip()).group(1)
        assert "\x1b" not in suggestion and "\x07" not in suggestion
        again = subprocess.run(["bash", "-c", f"{ckpt} show '{tmp_path / 'm'}' {suggestion}"],
                               capture_output=True, text=True, env=env, timeout=120)
        assert again.returncode == 0, (suggestion, again.stderr)
