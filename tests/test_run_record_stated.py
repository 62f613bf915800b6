"""``ckpt train --api keras``'s run record states what its files cannot show (not saved
swapped; the optimizer built with ``model.trainable_variables``, fit()'s order), and both the
CLI and the Python API say when a pairing rests on it (s15f, task item 4):

- ``ckpt eval``/``export --strict`` of the trainer's own run pass: fit_order is the trainer's
  record, not an assumption; a record without ``"fit_order"`` still leaves it assumed.
- the Python API (``keras_ema_values``, ``export_weights``) honours the record as the CLI does,
  and says so with a :class:`~ckpt_tools.errors.RecordedStatementWarning` (the CLI's note),
  not silently; statements the caller makes themselves give none.

The truth: the trainer calls ``net.optimizer.build(net.trainable_variables)`` and then
``fit()``, saving from ``on_train_batch_end`` without ``SwapEMAWeights``; the values compared
are those of the caller's own ``not_swapped=True, fit_order=True``.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from ckpt_tools.errors import AssumptionWarning, RecordedStatementWarning, UnprovenPairingError
from ckpt_tools.run_record import RECORD_NAME
from ckpt_tools.train.common import TrainConfig


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from ckpt_tools.train import keras_fit

    train_dir = tmp_path_factory.mktemp("k3")
    cfg = TrainConfig(train_dir=str(train_dir), batch_size=8, max_steps=4, save_every=2,
                      max_to_keep=1, ema_decay=0.9, progress=False)
    keras_fit.train(cfg)
    return str(train_dir)


def _latest(run):
    return os.path.join(run, "ckpt-4.keras")


def test_record_states_fit_order(run):
    with open(os.path.join(run, RECORD_NAME)) as f:
        assert json.load(f)["fit_order"] is True


def test_strict_eval_and_export_of_own_run_pass(run, tmp_path):
    r = _ckpt("eval", run, "--num-examples", "20", "--strict", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert "assumed" not in doc, doc
    assert doc["fit_order_record"] == os.path.join(run, RECORD_NAME), doc
    assert "ckpt train's run record" in r.stderr and "--fit-order" in r.stderr, r.stderr
    e = _ckpt("export", run, "--strict", "--out", tmp_path / "a.npz")
    assert e.exit_code == 0, e.output
    said = _ckpt("export", run, "--not-swapped", "--fit-order", "--out", tmp_path / "b.npz")
    assert said.exit_code == 0, said.output
    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_record_without_fit_order_leaves_it_assumed(run, tmp_path):
    d = tmp_path / "old"
    shutil.copytree(run, d)
    path = d / RECORD_NAME
    doc = json.loads(path.read_text())
    del doc["fit_order"]  # a record written before fit_order was recorded
    path.write_text(json.dumps(doc))
    r = _ckpt("eval", d, "--num-examples", "20", "--strict")
    assert r.exit_code == 6 and "fit_order" in r.stderr, r.output
    assert _ckpt("eval", d, "--num-examples", "20").exit_code == 0


def test_python_api_says_the_record_stated_it(run, tmp_path):
    from ckpt_tools import export_weights, keras_ema_values, open_checkpoint

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        values = keras_ema_values(_latest(run), strict=True)
    said = [w.message for w in got if issubclass(w.category, RecordedStatementWarning)]
    assert len(said) == 1, [str(w.message) for w in got]
    assert said[0].stated == ["not_swapped", "fit_order"], said[0].stated
    assert said[0].record == os.path.join(run, RECORD_NAME)
    assert "run record" in str(said[0])
    assert not [w for w in got if issubclass(w.category, AssumptionWarning)]
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        stated = keras_ema_values(_latest(run), not_swapped=True, fit_order=True)
        with open_checkpoint(_latest(run), not_swapped=True, fit_order=True) as ckpt:
            export_weights(ckpt, tmp_path / "s.npz")
    assert not [w for w in got if issubclass(w.category, RecordedStatementWarning)]
    assert sorted(values) == sorted(stated)
    assert all(np.array_equal(values[k], stated[k]) for k in values)
    with pytest.warns(RecordedStatementWarning):
        export_weights(_latest(run), tmp_path / "r.npz")


def test_python_api_without_record_refuses(run, tmp_path):
    from ckpt_tools import keras_ema_values

    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(_latest(run), alone / "ckpt-4.keras")
    with pytest.raises(UnprovenPairingError):
        keras_ema_values(str(alone / "ckpt-4.keras"))


@pytest.mark.parametrize("flags", [[], ["--sort", "name"], ["-q"], ["-q", "--sort", "name"]])
def test_list_says_the_record_stated_it_in_every_view(run, flags, capsys):
    """review-22-user-u24 F8: ``list`` printed the record's notes only with ``-q --sort name``
    (the app's names-only path); the table and the typer-free ``-q`` path said nothing, where
    map and export say both. Through ``ckpt_tools.cli.main``, as the ``ckpt`` command runs."""
    from ckpt_tools import cli

    capsys.readouterr()
    try:
        cli.main(["list", run, *flags])
        code = 0
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code in (0, None), err
    record = os.path.join(run, RECORD_NAME)
    assert f"not swapped is stated by ckpt train's run record {record}" in err, err
    assert f"fit()'s order (model.trainable_variables) because ckpt train's run record " \
           f"{record} states it" in err, err


_STATED = ("stated_not_swapped", "not_swapped_record", "stated_fit_order", "fit_order_record",
           "assumed")


@pytest.mark.parametrize("flags", [[], ["--sort", "name"]])
def test_list_json_has_the_fields_export_json_has(run, flags, tmp_path, capsys):
    """review-33-user-u33 F7: ``list --json`` of the trainer's file left out the fields
    ``export --json`` of the same file has (the record's statements), in both the typer-free
    path (``[]``) and the app's (``--sort name``); both said nothing on stderr either. The
    record itself is the truth: the trainer wrote ``"swapped": false, "fit_order": true``."""
    from ckpt_tools import cli

    with open(os.path.join(run, RECORD_NAME)) as f:
        written = json.load(f)
    assert written["fit_order"] is True and written["swapped"] is False, written
    e = _ckpt("export", _latest(run), "--json", "--out", tmp_path / "e.npz")
    assert e.exit_code == 0, e.output
    exported = json.loads(e.stdout)
    capsys.readouterr()
    try:
        cli.main(["list", _latest(run), "--json", *flags])
        code = 0
    except SystemExit as exc:
        code = exc.code
    got = capsys.readouterr()
    assert code in (0, None), got.err
    listed = json.loads(got.out)
    record = os.path.join(run, RECORD_NAME)
    assert listed["not_swapped_record"] == listed["fit_order_record"] == record, listed
    assert listed["stated_not_swapped"] is True and listed["stated_fit_order"] is True, listed
    assert {k: listed.get(k) for k in _STATED} == {k: exported.get(k) for k in _STATED}
    assert f"not swapped is stated by ckpt train's run record {record}" in got.err, got.err


def test_list_table_says_the_record_states_the_marked_order(run):
    """review-33-user-u33 F7: the line under the table said a name marked '?' rests on an
    order 'the file cannot prove' without saying that the run record states it."""
    r = _ckpt("list", _latest(run))
    assert r.exit_code == 0, r.output
    marked = [line for line in r.stderr.splitlines() if "a name ending in '?'" in line]
    assert len(marked) == 1, r.output
    assert f"ckpt train's run record {os.path.join(run, RECORD_NAME)} states that order" \
        in marked[0], marked
