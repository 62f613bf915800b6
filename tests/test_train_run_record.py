"""``ckpt train --api keras`` records at save time that it never swapped its files
(``run_record.json``, :mod:`ckpt_tools.run_record`), so ``ckpt eval`` of its own run needs no
``--not-swapped`` (u15 F12), for exactly the recorded bytes: a file replaced, renamed or moved
away from its record is refused (exit 6) as any Keras file whose weights differ from their
EMA copies.

The truth: the trainer saves from ``on_train_batch_end`` during ``fit()`` and never adds
``SwapEMAWeights``; the accuracies compared are ``--not-swapped``'s, stated by the test.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from ckpt_tools.run_record import RECORD_NAME
from ckpt_tools.train.common import TrainConfig


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from ckpt_tools.train import keras_fit

    train_dir = tmp_path_factory.mktemp("k2")
    cfg = TrainConfig(train_dir=str(train_dir), batch_size=8, max_steps=6, save_every=2,
                      max_to_keep=2, ema_decay=0.9, progress=False)
    keras_fit.train(cfg)
    return str(train_dir)


def _copy(run, tmp_path, name="run"):
    dst = tmp_path / name
    shutil.copytree(run, dst)
    return str(dst)


def test_record_names_each_kept_file(run):
    files = sorted(os.listdir(run))
    assert files == ["ckpt-4.keras", "ckpt-6.keras", RECORD_NAME], files
    with open(os.path.join(run, RECORD_NAME)) as f:
        doc = json.load(f)
    assert doc["written_by"] == "ckpt train" and doc["swapped"] is False
    assert sorted(doc["files"]) == ["ckpt-4.keras", "ckpt-6.keras"]  # ckpt-2 pruned
    size = os.path.getsize(os.path.join(run, "ckpt-6.keras"))
    assert doc["files"]["ckpt-6.keras"]["size"] == size


def test_eval_of_own_run_needs_no_flag(run):
    plain = _ckpt("eval", run, "--num-examples", "50", "--json")
    assert plain.exit_code == 0, plain.output
    stated = _ckpt("eval", run, "--num-examples", "50", "--json", "--not-swapped")
    assert stated.exit_code == 0, stated.output
    a, b = json.loads(plain.stdout), json.loads(stated.stdout)
    assert a["checkpoint"].endswith("ckpt-6.keras")
    assert (a["raw_accuracy"], a["ema_accuracy"]) == (b["raw_accuracy"], b["ema_accuracy"])
    assert a["raw_accuracy"] != a["ema_accuracy"]  # the averages, not the raw weights again
    # fit_order: stated by the record too (the trainer builds the optimizer in fit()'s order)
    assert a["stated_not_swapped"] is True and "assumed" not in a, a
    assert a["not_swapped_record"] == os.path.join(run, RECORD_NAME), a
    assert "not_swapped_record" not in b, b  # the user's own statement
    assert "ckpt train's run record" in plain.stderr, plain.stderr


def test_export_says_the_record_stated_it(run, tmp_path):
    r = _ckpt("export", run, "--out", tmp_path / "a.npz", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc.get("stated_not_swapped") is True, doc
    assert doc.get("not_swapped_record") == os.path.join(run, RECORD_NAME), doc
    assert "ckpt train's run record" in r.stderr, r.stderr
    said = _ckpt("export", run, "--out", tmp_path / "b.npz", "--not-swapped")
    assert said.exit_code == 0, said.output
    assert "you stated --not-swapped" in said.stderr, said.stderr
    import numpy as np

    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        assert all(np.array_equal(a[k], b[k]) for k in a.files)


def _refused(path):
    r = _ckpt("eval", path, "--num-examples", "10")
    assert r.exit_code == 6 and "--not-swapped" in r.stderr, r.output
    return r


def test_replaced_file_is_refused(run, tmp_path):
    """Another Keras file of the same model copied over a recorded name: its bytes are not the
    recorded ones, so the record says nothing about it."""
    d = _copy(run, tmp_path)
    shutil.copyfile(os.path.join(d, "ckpt-4.keras"), os.path.join(d, "ckpt-6.keras"))
    _refused(os.path.join(d, "ckpt-6.keras"))
    assert _ckpt("eval", os.path.join(d, "ckpt-4.keras"), "--num-examples", "10").exit_code == 0


def test_renamed_or_moved_file_is_refused(run, tmp_path):
    d = _copy(run, tmp_path)
    os.rename(os.path.join(d, "ckpt-6.keras"), os.path.join(d, "ckpt-8.keras"))
    _refused(d)  # the directory's latest is now ckpt-8.keras, which the record does not name
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(os.path.join(run, "ckpt-6.keras"), alone / "ckpt-6.keras")
    _refused(str(alone))


@pytest.mark.parametrize("change", ["swapped", "writer", "garbage", "sha", "nested", "size"])
def test_other_records_state_nothing(run, tmp_path, change):
    d = _copy(run, tmp_path)
    path = os.path.join(d, RECORD_NAME)
    with open(path) as f:
        doc = json.load(f)
    if change == "swapped":
        doc["swapped"] = True
    elif change == "writer":
        doc["written_by"] = "someone"
    elif change == "sha":
        doc["files"]["ckpt-6.keras"]["sha256"] = "0" * 64
    elif change == "size":
        doc["files"]["ckpt-6.keras"]["size"] = "many"
    with open(path, "w") as f:
        f.write("{not json" if change == "garbage" else
                "[" * 200_000 + "]" * 200_000 if change == "nested" else json.dumps(doc))
    _refused(d)


def test_refusal_names_the_file_once(run, tmp_path):
    d = _copy(run, tmp_path)
    os.remove(os.path.join(d, RECORD_NAME))
    path = os.path.join(d, "ckpt-6.keras")
    r = _refused(path)
    assert r.stderr.count(path) == 1, r.stderr
    assert f"{path}: cannot restore EMA weights: its weights differ" in " ".join(r.stderr.split())


def test_own_series_is_read_without_the_state_file_note(run, tmp_path):
    """review-33-user-u33 F8: every command on the trainer's directory said it had '2 candidate
    checkpoints and no 'checkpoint' state file' (a Keras run never has one), where the run
    record names each file and the step in the names picks the latest, as a state file names
    it in a TF run (no note there). A file the record does not name keeps the note."""
    r = _ckpt("list", run)
    assert r.exit_code == 0, r.output
    assert f"{os.path.join(run, 'ckpt-6.keras')} (keras)" in r.stdout, r.stdout
    assert "state file" not in r.stderr and "candidate" not in r.stderr, r.stderr
    d = _copy(run, tmp_path)
    shutil.copyfile(os.path.join(d, "ckpt-6.keras"), os.path.join(d, "ckpt-8.keras"))
    r = _ckpt("list", d)
    assert "no 'checkpoint' state file; using ckpt-8.keras" in r.stderr, r.output
