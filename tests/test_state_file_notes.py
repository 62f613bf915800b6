"""A run directory whose ``checkpoint`` state file led somewhere the user might not expect says
so in one note (review-11-attack-r16 N1): the state file's absolute path to another existing
checkpoint overridden by the same-named copy in the directory, an absolute path outside the
directory followed, a TF checkpoint taken over Keras files beside it. A state file naming the
checkpoint beside it says nothing. The values read are the fixtures' (recorded by TensorFlow
when they were made)."""

from __future__ import annotations

import shutil

import numpy as np
from helpers import FIXTURES, expected_values, run_cli, same_bits


def _run(tmp_path, name: str, case: str | None, state: str):
    d = tmp_path / name
    d.mkdir()
    if case is not None:
        for f in (FIXTURES / case).glob("model.ckpt*"):
            shutil.copy(f, d / f.name.replace("-30", ""))
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{state}"\n')
    return d


def test_an_overridden_absolute_path_is_noted(tmp_path):
    orig = tmp_path / "orig"
    shutil.copytree(FIXTURES / "linear_v2", orig)
    d = _run(tmp_path, "r3", "towers_bn", f"{orig}/model.ckpt")
    code, out, err = run_cli(["list", str(d)])
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"{d}/model.ckpt"), out
    notes = [line for line in err.splitlines() if "checkpoint names" in line]
    assert len(notes) == 1 and f"{orig}/model.ckpt" in notes[0], err
    assert "exists too" in notes[0] and f"{d}/model.ckpt" in notes[0], err
    code, _, err = run_cli(["list", str(d), "--json"])
    assert code == 0 and "exists too" in err, err


def test_an_absolute_path_outside_the_directory_is_noted(tmp_path):
    orig = tmp_path / "orig"
    shutil.copytree(FIXTURES / "linear_v2", orig)
    d = _run(tmp_path, "r4", None, f"{orig}/model.ckpt")
    code, out, err = run_cli(["list", str(d)])
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"{orig}/model.ckpt"), out
    assert "outside" in err and f"{orig}/model.ckpt" in err, err


def test_a_state_file_beside_keras_files_is_noted(tmp_path):
    d = tmp_path / "mix"
    shutil.copytree(FIXTURES / "linear_v2", d)
    shutil.copy(next(FIXTURES.glob("keras_ema/*.keras")), d / "ep03.keras")
    code, out, err = run_cli(["export", str(d), "--out", str(tmp_path / "w.npz")])
    assert code == 0, err
    assert "ep03.keras" in err and "state file" in err, err
    truth = expected_values("linear_v2")
    with np.load(tmp_path / "w.npz") as z:
        assert same_bits(z["W"], truth["W/ExponentialMovingAverage"])


def test_a_state_file_naming_its_own_checkpoint_says_nothing(tmp_path):
    d = tmp_path / "plain"
    shutil.copytree(FIXTURES / "linear_v2", d)
    for state in ("model.ckpt", f"{d}/model.ckpt"):
        (d / "checkpoint").write_text(f'model_checkpoint_path: "{state}"\n')
        code, _, err = run_cli(["list", str(d)])
        assert code == 0 and "state file" not in err and "names" not in err, err


def test_a_directory_reached_through_a_symlink_says_nothing(tmp_path):
    d = tmp_path / "real"
    shutil.copytree(FIXTURES / "linear_v2", d)
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{d}/model.ckpt"\n')
    (tmp_path / "link").symlink_to(d)
    code, _, err = run_cli(["list", str(tmp_path / "link")])
    assert code == 0 and "state file" not in err and "names" not in err, err


def test_an_absolute_path_to_the_checkpoint_beside_it_is_shown_as_typed(tmp_path, monkeypatch):
    # saver.save(sess, os.path.join(abs_dir, "model.ckpt")) records absolute paths: the title
    # and errors name the checkpoint as the user typed its directory (review-15-user-u17 F6).
    d = _run(tmp_path, "r5", "towers_bn", "")
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{d}/model.ckpt"\n')
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["list", "r5"])
    assert code == 0, err
    assert out.splitlines()[0].startswith("r5/model.ckpt"), out
    assert str(tmp_path) not in out + err, out + err
    code, _, err = run_cli(["show", "r5", "no/such/name"])
    assert code != 0 and "r5/model.ckpt" in err and str(tmp_path) not in err, err
