"""review-14-user-u16: what the messages and ``--help`` say is true of the file in hand.

Truth: ``fixtures/keras3_midfit`` and ``fixtures/keras_ema`` were written by real Keras 3, their
averages recorded at save time (``expected.npz``, ``fixtures/make_fixtures.py`` and
``make_keras_fixtures.py``)."""

from __future__ import annotations

import json
import shutil

import numpy as np
from helpers import FIXTURES, run_cli
from typer.testing import CliRunner

from ckpt_tools.cli import app

MIDFIT = FIXTURES / "keras3_midfit"


def _flat_help(command: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def test_keras3_object_refusal_names_what_reads_that_file(tmp_path):
    """F5: Keras 3's model.load_weights reads only .keras/.weights.h5/.weights.json, not a
    tf.train.Checkpoint: the refusal names tf.train.Checkpoint(model=model).restore(path)."""
    code, _, err = run_cli(["export", str(MIDFIT), "--out", str(tmp_path / "a.npz")])
    assert code == 6, err
    assert "tf.train.Checkpoint(model=model).restore(path)" in err, err
    assert "load_weights" not in err, err
    code, _, err = run_cli(["export", str(MIDFIT), "--strict", "--out", str(tmp_path / "a.npz")])
    assert code == 6 and "load_weights" not in err, err
    # a Keras file's refusal still names model.load_weights, which reads it
    code, _, err = run_cli(["export", str(FIXTURES / "keras_ema" / "model.keras"),
                            "--out", str(tmp_path / "b.npz")])
    assert code == 6 and "model.load_weights" in err, err


def test_midfit_fixture_is_refused_then_gives_keras_averages(tmp_path):
    """F18: a mid-training Keras 3 tf.train.Checkpoint (weights differ from their copies)
    needs --not-swapped, and then gives the averages Keras held at save time, bit for bit."""
    exp = json.loads((MIDFIT / "expected.json").read_text())
    truth = np.load(MIDFIT / "expected.npz")
    assert all(not np.array_equal(truth[a], truth[w]) for a, w in exp["ema_of"].items())
    out = tmp_path / "k3.npz"
    code, _, err = run_cli(["export", str(MIDFIT), "--out", str(out)])
    assert code == 6 and "--not-swapped" in err, err
    code, _, err = run_cli(["export", str(MIDFIT), "--not-swapped", "--out", str(out)])
    assert code == 0, err
    got = np.load(out)
    for average, weight in exp["ema_of"].items():
        path = exp["variable_paths"][weight]
        assert got[path].tobytes() == truth[average].tobytes(), path


def test_list_of_restore_ema_output_says_use_it_as_it_is(tmp_path):
    """F10: restore-ema's Keras output holds the averages as its weights (equal to their
    copies bit for bit): list no longer sends the user to restore-ema again; a mid-training
    file still does."""
    src = tmp_path / "model.keras"
    shutil.copy(FIXTURES / "keras_ema" / "model.keras", src)
    out = tmp_path / "ema" / "model.keras"
    code, _, err = run_cli(["restore-ema", str(src), "--not-swapped", "--out", str(out)])
    assert code == 0, err
    code, _, err = run_cli(["list", str(out)])
    assert code == 0, err
    assert "use 'ckpt restore-ema'" not in err, err  # (its mark's notes name the writer)
    assert "the weights equal them bit for bit: use the file as it is" in err, err
    code, _, err = run_cli(["list", str(src), "--not-swapped"])
    assert code == 0 and "use 'ckpt restore-ema' to evaluate with them" in err, err
    code, _, err = run_cli(["list", str(FIXTURES / "keras3_object")])  # saved after fit()
    assert code == 0 and "use the file as it is" in err, err


def test_export_help_says_no_averages_is_refused_unless_raw():
    """F11: the summary implied a checkpoint without averages gives raw weights."""
    text = _flat_help("export")
    assert "by default when the checkpoint has shadows" not in text
    assert "a checkpoint without them is refused (exit 6) unless --raw" in text


def test_restore_ema_help_describes_keras_in_keras_out():
    """F17: the first paragraph covered only TF1 checkpoints and SavedModels."""
    text = _flat_help("restore-ema")
    head = text.split("Arguments:")[0]
    assert "Keras in, Keras out" in head and "--not-swapped" in head, head


def test_export_refusal_comes_before_out_exists(tmp_path):
    """F3: an existing --out was reported (exit 7) before the EMA refusal (exit 6), so adding
    --force only led to a second, different error: the refusal comes first."""
    out = tmp_path / "k3.npz"
    out.write_bytes(b"old")
    code, _, err = run_cli(["export", str(MIDFIT), "--out", str(out)])
    assert code == 6 and "--not-swapped" in err and "already exists" not in err, err
    code, _, err = run_cli(["export", str(MIDFIT), "--not-swapped", "--out", str(out)])
    assert code == 7 and "already exists" in err, err
    assert out.read_bytes() == b"old"


def test_part_of_a_keras_group_averaged_export_says_no_option_decides(tmp_path):
    """F16: Keras 3 model with two nested blocks each holding Dense(name="fc"), a custom loop's
    tf.train.ExponentialMovingAverage, averages saved as a dict keyed by v.path (the two
    fc/kernel keys collapse: one block's averages saved). list said "no option decides";
    export's refusal sent the user to --apply-order tracked, which then refused too."""
    import pytest

    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")

    def block(name):
        i = keras.Input((4,))
        return keras.Model(i, keras.layers.Dense(4, name="fc")(i), name=name)

    i = keras.Input((3,))
    o = keras.layers.Dense(2, name="head")(block("b2")(block("b1")(keras.layers.Dense(
        4, name="stem")(i))))
    model = keras.Model(i, o)
    ema = tf.train.ExponentialMovingAverage(0.9)
    ema.apply([v.value for v in model.trainable_variables])
    tf.train.Checkpoint(model=model, ema={v.path: ema.average(v.value)
                                          for v in model.trainable_variables}).write(
        str(tmp_path / "run" / "ckpt-1"))
    code, _, err = run_cli(["list", str(tmp_path / "run")])
    assert code == 0 and "no option decides" in err, err
    out = str(tmp_path / "a.npz")
    for stated in ([], ["--apply-order", "tracked"]):
        code, _, err = run_cli(["export", str(tmp_path / "run"), "--out", out, *stated])
        assert code == 6, err
        assert "no option decides" in err and "pass --apply-order tracked" not in err, err
