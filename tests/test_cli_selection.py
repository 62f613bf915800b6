"""Name filters (``--grep``/``--regex``) that select no variable are exit 3 in ``list`` and
``stats`` too, as the README's exit-code table says for every command; a role or collection
filter that leaves nothing is an answer (exit 0)."""

from __future__ import annotations

import pytest
from _corpus import run_cli
from helpers import FIXTURES

TOWERS = str(FIXTURES / "towers_bn")


@pytest.mark.parametrize("argv", [
    ["list", TOWERS, "--grep", ".*Momentum"], ["list", TOWERS, "--grep", ".*Momentum", "-q"],
    ["list", TOWERS, "--regex", "nomatch", "--json"], ["stats", TOWERS, "--grep", ".*Momentum"],
    ["stats", TOWERS, "--regex", "nomatch", "--json"], ["diff", TOWERS, "--ema", "-g", "x*"],
])
def test_name_filters_selecting_nothing_exit_3(argv, capsys):
    code, out, err = run_cli(argv, capsys)
    assert code == 3 and out == "", (out, err)
    assert err.startswith("error: ") and "the name filters select no variable" in err, err
    if ".*Momentum" in argv:  # the README example of a regex given to --grep
        assert "--grep takes a shell glob" in err and "--regex" in err, err


def test_filters_that_select_something_still_list(capsys):
    code, out, _ = run_cli(["list", TOWERS, "--regex", "Momentum$", "-q"], capsys)
    assert code == 0 and out.split() == ["conv1/BatchNorm/beta/Momentum",
                                         "conv1/weights/Momentum", "logits/biases/Momentum",
                                         "logits/weights/Momentum"]
    # The names match, the role filter leaves nothing: an empty answer, not an error.
    code, out, err = run_cli(["list", TOWERS, "--grep", "*Momentum", "--role", "ema"], capsys)
    assert code == 0 and "0 of 29 variables" in err, err  # piped: the summary on stderr


def test_a_collection_the_graph_lacks_is_exit_3_not_an_empty_list(capsys):
    """review-13-user-r2: ``--collection model`` on a graph without model variables listed
    ``0 of 4 variables`` with exit 0; a typo stays a usage error (exit 2)."""
    import json

    linear = FIXTURES / "linear_v2"
    # The collections tf.train.export_meta_graph recorded at save time.
    recorded = json.loads((linear / "expected.json").read_text())["collections"]
    assert not recorded.get("model_variables") and recorded["trainable_variables"]
    code, out, err = run_cli(["list", str(linear), "--collection", "model"], capsys)
    assert code == 3 and out == "", (out, err)
    assert "no 'model' collection" in err and "trainable" in err, err
    code, out, err = run_cli(["list", str(linear), "--collection", "modle"], capsys)
    assert code == 2 and "unknown collection 'modle'" in err, err
    code, out, _ = run_cli(["list", str(linear), "--collection", "trainable", "-q"], capsys)
    assert code == 0 and sorted(out.split()) == sorted(recorded["trainable_variables"])


@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["table", "quiet"])
def test_collection_without_a_meta_is_one_line_naming_the_file(capsys, quiet):
    """review-22-user-u24 F10: ``--collection`` on a TF2 checkpoint (no .meta) printed the
    parser's usage block and "Invalid value"; an option that does not apply to the file named
    is one ``error:`` line naming it and what selects instead (exit 2)."""
    path = str(FIXTURES / "tf2_object")
    code, out, err = run_cli(["list", path, "--collection", "trainable", *quiet], capsys)
    assert code == 2 and out == "", (out, err)
    line = err.strip()
    assert "\n" not in line and line.startswith(f"error: {path}"), err
    assert "--collection needs a .meta graph" in line and "--role" in line, err


@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
def test_quiet_means_the_rows_only_in_every_table(tty, tmp_path, capsys, monkeypatch):
    """review-13-user-r2: ``map -q`` had no header, ``stats -q``/``diff -q`` kept it, and
    ``restore-ema -q --dry-run`` added its summary; now every ``-q`` table is its rows."""
    import json

    monkeypatch.setenv("TTY_COMPATIBLE", "1" if tty else "0")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    keys = [v["name"] for v in json.loads(run_cli(["list", TOWERS, "--json"], capsys)[1])[
        "variables"]]
    for argv in (["map", TOWERS], ["stats", TOWERS], ["diff", TOWERS, TOWERS],
                 ["restore-ema", TOWERS, "--out", str(tmp_path / "o"), "--dry-run"]):
        code, out, err = run_cli([*argv, "-q"], capsys)
        assert code == 0, err
        lines = out.splitlines()
        assert lines and all(line.split()[0] in keys for line in lines), (argv, out)


def test_quiet_still_names_the_file_a_directory_led_to(capsys):
    code, out, err = run_cli(["list", str(FIXTURES / "keras_ema"), "-q"], capsys)
    assert code == 0 and out
    assert "candidate checkpoints" in err and "using " in err, err
    assert err.startswith("note: "), err  # like every other stderr line (note/warning/error)
