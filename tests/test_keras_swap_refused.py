"""Keras documents ``fit(callbacks=[SwapEMAWeights(swap_on_epoch=True), ModelCheckpoint(...)])``
as THE way to checkpoint EMA weights: a file saved mid-training that way holds the averages as
its weights and the raw weights as its EMA copies, and nothing in it shows it. Reading it as
not swapped gave the RAW weights as EMA weights with exit 0 (review-13-attack-r23 F1(a)). The
question is now refused (exit 6, ``UnprovenPairingError`` with option ``--not-swapped``) by
every command and function that hands values or a pairing back, naming both ways out:
``--not-swapped`` (``not_swapped=True``) and, if it was swapped, ``--raw`` (``ema=False``).
``ckpt list`` stays exit 0 and says it (``--json``: ``ema_unproven``, ``assumed``).

Made here by Keras 3 with the review's setup (``fixtures/make_matrix_keras.py``'s functional
model, Adam ``use_ema=True``); the truth is recorded at save time by a callback placed before
``SwapEMAWeights``: the optimizer's averages (``_model_variables_moving_average``) and the raw
weights. A second run saves with ``ModelCheckpoint`` alone (no swap)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from helpers import FIXTURES, run_cli

sys.path.insert(0, str(FIXTURES))


def _run(keras, d, swap: bool) -> dict:
    import make_matrix_keras as mx

    keras.utils.set_random_seed(3)
    model = mx.functional()
    model.compile(keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.8), "mse")
    x, y = mx._data(model, np.random.default_rng(5))
    truth: dict = {}

    class Truth(keras.callbacks.Callback):  # before the swap: Keras' own averages, raw weights
        def on_epoch_end(self, epoch, logs=None):
            o = self.model.optimizer
            truth["ema", epoch + 1] = {v.path: a.numpy() for v, a in zip(
                o._trainable_variables, o._model_variables_moving_average, strict=True)}
            truth["raw", epoch + 1] = {v.path: v.numpy() for v in o._trainable_variables}

    class Saved(keras.callbacks.Callback):  # after ModelCheckpoint: the weights it saved
        def on_epoch_end(self, epoch, logs=None):
            truth["saved", epoch + 1] = {v.path: v.numpy() for v in model.trainable_variables}

    callbacks = [Truth(), *([keras.callbacks.SwapEMAWeights(swap_on_epoch=True)] if swap
                            else []),
                 keras.callbacks.ModelCheckpoint(str(d / "ep{epoch:02d}.keras")), Saved()]
    model.fit(x, y, epochs=2, batch_size=4, verbose=0, callbacks=callbacks)
    ema, raw = truth["ema", 1], truth["raw", 1]
    assert all(ema[k].tobytes() != raw[k].tobytes() for k in ema)  # mid-training: differ
    saved = truth["saved", 1]  # swapped: Keras' averages, by its add/subtract swap (~1e-9)
    for k in ema:
        assert np.allclose(saved[k], ema[k] if swap else raw[k], rtol=0, atol=1e-6), k
        assert np.abs(saved[k] - (raw[k] if swap else ema[k])).max() > 1e-5, k
    return truth


@pytest.fixture(scope="module")
def swapped(keras, tmp_path_factory):
    d = tmp_path_factory.mktemp("swap")
    return d / "ep01.keras", _run(keras, d, swap=True)


@pytest.fixture(scope="module")
def plain(keras, tmp_path_factory):
    d = tmp_path_factory.mktemp("plain")
    return d / "ep01.keras", _run(keras, d, swap=False)


def assert_npz_holds(path, truth: dict[str, np.ndarray]) -> None:
    """Each trainable weight of ``truth`` is in the ``.npz`` bit for bit (with the
    BatchNormalization statistics, which no optimizer averages)."""
    with np.load(path) as z:
        assert set(truth) <= set(z.files), (sorted(z.files), sorted(truth))
        for name, value in truth.items():
            assert z[name].tobytes() == value.tobytes(), name


def _one_clear_refusal(code: int, err: str, path) -> None:
    assert code == 6, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in err and "SwapEMAWeights(swap_on_epoch=True)" in err, err
    assert "--not-swapped" in err and "--raw" in err, err


def test_export_without_a_statement_is_refused(swapped, tmp_path):
    path, _ = swapped
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(path), "--out", str(out)])
    _one_clear_refusal(code, err, path)
    assert not out.exists()


@pytest.mark.parametrize("args", [["restore-ema", "--out", "ema.keras"], ["map"],
                                  ["diff", "--ema"]], ids=lambda a: a[0])
def test_every_command_that_pairs_refuses(swapped, tmp_path, args):
    path, _ = swapped
    rest = [str(tmp_path / a) if a.endswith(".keras") else a for a in args[1:]]
    code, _, err = run_cli([args[0], str(path), *rest])
    _one_clear_refusal(code, err, path)
    assert not (tmp_path / "ema.keras").exists()


def test_show_of_an_average_is_refused(swapped):
    path, _ = swapped
    code, text, err = run_cli(["list", str(path), "--json"])
    average = next(v["name"] for v in json.loads(text)["variables"] if v["role"] == "ema")
    code, _, err = run_cli(["show", str(path), average])
    _one_clear_refusal(code, err, path)


def test_stats_shows_every_tensor_without_the_copies_drift(swapped):
    """review-24-user-u26 F1: statistics are the file's own values whatever the swap; only
    the drift depends on it. ``stats`` shows every tensor (the weights' as Keras saved them),
    the copies' drift '?' with a note naming ``--not-swapped`` and no ``--raw`` (stats has
    none); ``--strict`` refuses."""
    path, truth = swapped
    code, text, err = run_cli(["stats", str(path), "--json"])
    assert code == 0, err
    assert "--not-swapped" in err and "--raw" not in err, err
    doc = json.loads(text)
    assert doc["ema_unproven"]["option"] == "--not-swapped", doc["ema_unproven"]
    by_path = {r["path"] or r["name"]: r for r in doc["tensors"]}
    for name, value in truth["saved", 1].items():  # what ModelCheckpoint saved
        got = by_path[name]["stats"]
        assert (got["min"], got["max"]) == (float(value.min()), float(value.max())), name
    copies = [r for r in doc["tensors"] if r["role"] == "ema"]
    assert len(copies) == len(truth["saved", 1]) and all(r["drift"] is None for r in copies)
    code, _, err = run_cli(["stats", str(path), "--flagged"])
    assert code == 0 and "--raw" not in err, err
    code, _, err = run_cli(["stats", str(path), "--strict"])
    assert code == 6, err


def test_raw_gives_keras_averages_bit_for_bit(swapped, tmp_path):
    path, truth = swapped
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(path), "--raw", "--out", str(out)])
    assert code == 0, err
    assert_npz_holds(out, truth["saved", 1])  # bit for bit: the weights ModelCheckpoint saved
    with np.load(out) as z:  # ... which are Keras' averages, up to its swap's rounding
        for k, v in truth["ema", 1].items():
            assert np.allclose(z[k], v, rtol=0, atol=1e-6), k


def test_not_swapped_on_a_plain_checkpoint_gives_the_averages(plain, tmp_path):
    path, truth = plain
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(path), "--out", str(out)])
    _one_clear_refusal(code, err, path)  # the file is the same kind: nothing shows which
    code, text, err = run_cli(["export", str(path), "--not-swapped", "--out", str(out),
                               "--json"])
    assert code == 0, err
    assert json.loads(text).get("stated_not_swapped") is True, text
    assert "not_swapped" not in json.loads(text).get("assumed", []), text
    assert_npz_holds(out, truth["ema", 1])


def test_list_shows_the_question_with_exit_0(swapped):
    path, _ = swapped
    code, text, err = run_cli(["list", str(path), "--json"])
    assert code == 0, err
    doc = json.loads(text)
    assert "not_swapped" in doc["assumed"], doc.get("assumed")
    assert doc["ema_unproven"]["option"] == "--not-swapped", doc["ema_unproven"]
    assert "--raw" in doc["ema_unproven"]["reason"], doc["ema_unproven"]
    code, text, err = run_cli(["list", str(path)])
    assert code == 0 and "--not-swapped" in err, err
    code, text, err = run_cli(["list", str(path), "--json", "--not-swapped"])
    assert code == 0 and json.loads(text)["ema_unproven"] is None, text


def test_python_api_refuses_and_takes_both_statements(keras, swapped, plain, tmp_path):
    import ckpt_tools
    from ckpt_tools import UnprovenPairingError

    path, truth = swapped
    refusing = {
        "export_weights": lambda p, **kw: ckpt_tools.export_weights(p, tmp_path / "w.npz", **kw),
        "ema_map": ckpt_tools.ema_map,
        "keras_ema_values": ckpt_tools.keras_ema_values,
        "bake_ema": lambda p, **kw: ckpt_tools.bake_ema(p, str(tmp_path / "baked"), **kw),
        "diff_ema": lambda p, **kw: ckpt_tools.diff_ema(ckpt_tools.open_checkpoint(p, **kw)),
        "apply_keras_ema": lambda p, **kw: ckpt_tools.apply_keras_ema(
            keras.models.load_model(p), p, **kw),
        "apply_ema": lambda p, **kw: ckpt_tools.apply_ema(keras.models.load_model(p), p, **kw),
    }
    for name, call in refusing.items():
        with pytest.raises(UnprovenPairingError, match="not_swapped=True") as caught:
            call(path)
        assert caught.value.option == "--not-swapped", name
        assert "ema=False" in str(caught.value), name
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "baked").exists()
    # swapped: the file's own weights are the averages
    ckpt_tools.export_weights(path, tmp_path / "raw.npz", ema=False)
    assert_npz_holds(tmp_path / "raw.npz", truth["saved", 1])
    model = keras.models.load_model(path)
    for v in model.trainable_variables:
        assert v.numpy().tobytes() == truth["saved", 1][v.path].tobytes(), v.path
    # not swapped (ModelCheckpoint alone): stated, the EMA copies are the averages
    path, truth = plain
    ckpt_tools.export_weights(path, tmp_path / "ema.npz", not_swapped=True)
    assert_npz_holds(tmp_path / "ema.npz", truth["ema", 1])
    with ckpt_tools.open_checkpoint(path) as ckpt:
        shown = {v.name: v.path for v in ckpt.variables_unwarned()}
    values = ckpt_tools.keras_ema_values(path, not_swapped=True)
    assert {shown[k]: v.tobytes() for k, v in values.items()} == {
        k: v.tobytes() for k, v in truth["ema", 1].items()}
    assert ckpt_tools.ema_map(path, not_swapped=True).pairs
    model = keras.models.load_model(path)
    ckpt_tools.apply_keras_ema(model, path, not_swapped=True)
    for v in model.trainable_variables:
        assert v.numpy().tobytes() == truth["ema", 1][v.path].tobytes(), v.path
