"""Name filters are checked against what each command acts on: ``map``, ``restore-ema`` and
``export`` exit 3 when ``--grep``/``--regex`` match keys but leave them nothing (a dry run and a
real run agree), and a filter naming an EMA shadow selects its pair, as it selects the
shadow's row in ``list`` (review-13-user-r2)."""

from __future__ import annotations

import json

import pytest
from _corpus import run_cli
from helpers import FIXTURES

TOWERS = str(FIXTURES / "towers_bn")
TF2 = str(FIXTURES / "tf2_object")


@pytest.mark.parametrize("argv", [
    ["map", TOWERS, "--grep", "*/Momentum"],
    ["map", TOWERS, "--regex", "Momentum$", "--json"],
    ["restore-ema", TOWERS, "--out", "{tmp}/n", "--grep", "*/Momentum", "--dry-run"],
    ["restore-ema", TOWERS, "--out", "{tmp}/n", "--grep", "*/Momentum"],
    ["export", TOWERS, "--out", "{tmp}/n.npz", "--grep", "*/Momentum"],
])
def test_filters_leaving_the_command_nothing_exit_3(argv, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, out, err = run_cli(argv, capsys)
    assert code == 3 and out == "", (out, err)
    assert err.startswith("error: ") and "the name filters select no " in err, err
    assert "'*/Momentum'" in err or "'Momentum$'" in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_dry_run_and_real_run_agree_on_a_shadow_filter(tmp_path, capsys):
    argv = ["restore-ema", TOWERS, "--out", str(tmp_path / "n"), "--grep",
            "*/ExponentialMovingAverage"]
    code, out, err = run_cli([*argv, "--dry-run", "--json"], capsys)
    assert code == 0, err
    planned = json.loads(out)["map"]
    code, out, err = run_cli([*argv, "--json"], capsys)
    assert code == 0, err
    written = json.loads(out)["replaced"]
    # The averages TensorFlow's variables_to_restore() gave at save time, in both runs.
    recorded = json.loads((FIXTURES / "towers_bn" / "expected.json").read_text())
    averages = {s: t for s, t in recorded["variables_to_restore_ckpt"].items()
                if s.endswith("/ExponentialMovingAverage")}
    assert planned == averages, planned
    assert written == {t: s for s, t in averages.items()}, written


@pytest.mark.parametrize("argv, pair", [
    (["map", TOWERS, "--grep", "conv1/weights/ExponentialMovingAverage"],
     ("conv1/weights/ExponentialMovingAverage", "conv1/weights")),
    (["map", TOWERS, "--regex", "^conv1/weights/ExponentialMovingAverage$"],
     ("conv1/weights/ExponentialMovingAverage", "conv1/weights")),
    # TF2: the object path map shows in its first column, and the raw key.
    (["map", TF2, "--apply-order", "trainable", "--grep", "ema/dense/bias"],
     ("ema/dense.Sbias/.ATTRIBUTES/VARIABLE_VALUE", "model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE")),
    (["map", TF2, "--apply-order", "trainable", "--grep", "*dense.Sbias*"],
     ("ema/dense.Sbias/.ATTRIBUTES/VARIABLE_VALUE", "model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE")),
])
def test_a_filter_naming_a_shadow_selects_its_pair(argv, pair, capsys):
    code, out, err = run_cli([*argv, "--json"], capsys)
    assert code == 0, err
    mapping = json.loads(out)
    assert mapping == dict([pair]), mapping


def test_export_filtered_by_shadow_names_exports_their_weights(tmp_path, capsys):
    code, out, err = run_cli(["export", TOWERS, "--out", str(tmp_path / "w.npz"), "--grep",
                              "logits/*/ExponentialMovingAverage", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert sorted(result["tensors"]) == ["logits/biases", "logits/weights"], result
