"""review-13-user-u14 F3, F4, F11: what a new user types first. A Keras run directory's
"N candidate checkpoints" note is said once per command (F3); ``show``'s "did you mean"
matches the names ``ckpt list`` shows, a Keras file's object paths too (F4); the
``checkpoint`` state file named itself reads the checkpoint it names, and a Keras path
missing its suffix gets "did you mean X.keras?" (F11). Inputs: the fixtures, written by
Keras/TF (``fixtures/make_keras_fixtures.py``, ``make_fixtures.py``)."""

from __future__ import annotations

import json
import shutil

from helpers import FIXTURES, run_cli

ADAM = FIXTURES / "keras_ema" / "adam.keras"


def test_run_directory_note_is_said_once(tmp_path):
    for name in ("ep01.keras", "ep02.keras"):
        shutil.copy(ADAM, tmp_path / name)
    for argv in (["list", str(tmp_path)], ["list", str(tmp_path), "--not-swapped"],
                 ["map", str(tmp_path), "--not-swapped"],
                 ["export", str(tmp_path), "--not-swapped", "--out",
                  str(tmp_path.parent / "f3.npz")]):
        code, _, err = run_cli(argv)
        assert code == 0, err
        assert err.count("2 candidate checkpoints") == 1, (argv, err)


def test_show_suggests_the_names_list_shows_for_keras_files():
    code, _, err = run_cli(["show", str(ADAM), "seq/dense/kernl"])
    assert code == 3, err
    assert "did you mean seq/dense/kernel" in err, err
    # the name a .weights.h5 of the same model shows (no model prefix)
    code, _, err = run_cli(["show", str(ADAM), "dense/bias"])
    assert code == 3 and "did you mean seq/dense/bias" in err, err
    # TF1 keys as before
    code, _, err = run_cli(["show", str(FIXTURES / "linear_v2"), "Wx"])
    assert code == 3 and "did you mean W" in err, err


def test_state_file_named_reads_the_checkpoint_it_names():
    state = FIXTURES / "linear_v2" / "checkpoint"
    code, doc, err = run_cli(["list", str(state), "--json"])
    assert code == 0, err
    want = json.loads(run_cli(["list", str(FIXTURES / "linear_v2"), "--json"])[1])
    assert json.loads(doc) == want
    assert "state file" in err and "model.ckpt" in err, err


def test_a_file_named_checkpoint_that_is_no_state_file_is_still_refused(tmp_path):
    (tmp_path / "checkpoint").write_text("not a state file\n")
    code, _, err = run_cli(["list", str(tmp_path / "checkpoint")])
    assert code == 4, err


def test_keras_path_missing_its_suffix_gets_a_hint(tmp_path):
    shutil.copy(ADAM, tmp_path / "ep02.keras")
    shutil.copy(FIXTURES / "keras_ema" / "adam.weights.h5", tmp_path / "w.weights.h5")
    for typed, meant in (("ep02", "ep02.keras"), ("w.weights", "w.weights.h5"),
                         ("w", "w.weights.h5")):
        code, _, err = run_cli(["list", str(tmp_path / typed)])
        assert code == 3, err
        assert f"did you mean {tmp_path / meant}?" in err, err
    code, _, err = run_cli(["list", str(tmp_path / "nothing")])
    assert code == 3 and "did you mean" not in err, err


def test_a_misspelt_path_gets_the_closest_checkpoint_beside_it(tmp_path):
    """review-13-user-u15 F11: ``ep02.kera`` (a suffix missing a letter), a swapped letter, a
    step that is not there, a run directory's name cut short: each names the checkpoint meant."""
    shutil.copy(ADAM, tmp_path / "ep02.keras")
    shutil.copytree(FIXTURES / "linear_v2", tmp_path / "v2")
    for typed, meant in (("ep02.kera", "ep02.keras"), ("ep02.kears", "ep02.keras"),
                         ("v", "v2"), ("v2/model.ckpt-1", "v2/model.ckpt"),
                         ("v2/model.ckpt-1.index", "v2/model.ckpt")):
        code, _, err = run_cli(["list", str(tmp_path / typed)])
        assert code == 3, err
        assert err.rstrip().endswith(f"did you mean {tmp_path / meant}?"), (typed, err)
    code, _, err = run_cli(["list", str(tmp_path / "zzz.keras")])
    assert code == 3 and "did you mean" not in err, err
