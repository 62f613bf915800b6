"""Keras 3 ``Adafactor(use_ema=True)`` under a ``LossScaleOptimizer`` (``mixed_float16``, or
wrapped explicitly), ``.keras`` and bare ``.weights.h5`` (``fixtures/make_keras_adafactor_lso.py``,
truth read from the wrapped optimizer at save time): its build stores no placeholders for the
weights of rank < 2, which plain Adafactor stores as int32 scalars (nor Nadam's ``u_product``).
The averages are paired bit for bit where the file (or ``--use-ema``/``--trainable``) proves
them, never otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, run_generator

pytest.importorskip("keras")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("keras_adafactor_lso")
    return out, run_generator("make_keras_adafactor_lso.py", out)


def _export(path: Path, out: Path, *extra: str) -> tuple[int, str, dict[str, np.ndarray]]:
    # the generator saves during fit(), no SwapEMAWeights: stated where the copies are used
    stated = [] if "--raw" in extra else ["--not-swapped"]
    code, _, err = run_cli(["export", str(path), "--out", str(out), *extra, *stated])
    if code != 0:
        return code, err, {}
    with np.load(out) as z:  # a .keras names them under the model (sequential_3/a/kernel)
        return code, err, {"/".join(k.split("/")[-2:]): z[k] for k in z.files}


def _assert_averages(got: dict[str, np.ndarray], truth: dict, case: str) -> None:
    ema = {k.split(":", 2)[2]: v for k, v in truth.items() if k.startswith(f"{case}:ema:")}
    assert ema and set(ema) <= set(got), (sorted(got), sorted(ema))
    for path, value in ema.items():
        assert got[path].tobytes() == value.tobytes(), (case, path)


def test_the_wrapped_optimizer_stores_no_placeholders(made):
    _, truth = made
    assert int(truth["plain:placeholders"]) > 0
    assert int(truth["mixed:placeholders"]) == int(truth["lso:placeholders"]) == 0
    assert int(truth["nadam:scalars"]) == 2  # no u_product: only iteration, learning_rate


@pytest.mark.parametrize("case", ["mixed", "lso", "plain", "frozen", "nadam"])
def test_keras_archive_pairs_adafactor_averages(made, case, tmp_path):
    out, truth = made
    code, err, got = _export(out / f"{case}.keras", tmp_path / "e.npz")
    assert code == 0, err
    _assert_averages(got, truth, case)
    if case == "frozen":  # b was frozen before compile: no average, its raw weights
        assert "frozen:ema:b/kernel" not in truth
        code, _, raw = _export(out / f"{case}.keras", tmp_path / "r.npz", "--raw")
        assert code == 0 and got["b/kernel"].tobytes() == raw["b/kernel"].tobytes()


@pytest.mark.parametrize("case", ["mixed", "lso", "nadam"])
def test_weights_h5_pairs_once_use_ema_is_stated(made, case, tmp_path):
    out, truth = made
    path = out / f"{case}.weights.h5"
    code, err, _ = _export(path, tmp_path / "a.npz")
    assert code == 6 and "--use-ema or --no-use-ema" in err, err
    code, err, got = _export(path, tmp_path / "b.npz", "--use-ema")
    assert code == 0, err
    _assert_averages(got, truth, case)
    code, err, got = _export(path, tmp_path / "c.npz", "--use-ema", "--trainable", "a,bn,b,c")
    assert code == 0, err
    _assert_averages(got, truth, case)
    code, err, _ = _export(path, tmp_path / "d.npz", "--use-ema", "--trainable", "a,bn,c")
    assert code == 6 and "do not fit" in err, err


def test_weights_h5_with_a_frozen_layer_needs_trainable(made, tmp_path):
    out, truth = made
    path = out / "frozen.weights.h5"
    code, err, _ = _export(path, tmp_path / "a.npz", "--use-ema")
    assert code == 6 and "--trainable" in err, err
    code, err, got = _export(path, tmp_path / "b.npz", "--use-ema", "--trainable", "a,bn,c")
    assert code == 0, err
    _assert_averages(got, truth, "frozen")
    code, _, raw = _export(path, tmp_path / "r.npz", "--raw")
    assert code == 0 and got["b/kernel"].tobytes() == raw["b/kernel"].tobytes()


@pytest.mark.parametrize("case", ["mixed", "nadam"])
@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_apply_keras_ema_loads_the_wrapped_optimizers_averages(made, case, suffix):
    import keras

    from ckpt_tools import apply_keras_ema

    out, truth = made
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras.Sequential([
            keras.Input((6,)), keras.layers.Dense(8, name="a"),
            keras.layers.BatchNormalization(name="bn"), keras.layers.Dense(8, name="b"),
            keras.layers.Dense(3, name="c", dtype="float32")])
        apply_keras_ema(model, out / f"{case}{suffix}",
                        use_ema=True if suffix == ".weights.h5" else None, not_swapped=True)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    for v in model.trainable_variables:
        path = v.path.split("/", 1)[1]
        assert np.asarray(v.numpy()).tobytes() == truth[f"{case}:ema:{path}"].tobytes(), path


@pytest.mark.parametrize("case", ["mixed", "nadam"])
def test_loss_scale_optimizers_own_group_is_optimizer_state(made, case):
    """review-11-user-r11 F7: ``LossScaleOptimizer.variables`` is its own state followed by
    the wrapped optimizer's variables, which Keras stores again under ``optimizer/vars/``:
    ``map`` leaves them out with the slots instead of restoring them into themselves, and
    ``list`` names them as the wrapped optimizer's under the wrapper."""
    out, _ = made
    path = str(out / f"{case}.keras")
    code, text, err = run_cli(["map", path, "--json", "--not-swapped"])
    assert code == 0, err
    assert not [k for k in json.loads(text) if k.startswith("optimizer/vars/")], text
    code, text, err = run_cli(["list", path, "--json"])
    assert code == 0, err
    doc = json.loads(text)
    outer = [v for v in doc["variables"] if v["key"].startswith("optimizer/vars/")]
    assert outer and {v["role"] for v in outer} == {"optimizer_slot"}, outer
    assert [v["path"] for v in outer[-2:]] == [
        f"loss_scale_optimizer/{v['path']}" for v in doc["variables"]
        if v["key"].startswith("optimizer/inner_optimizer/vars/")][-2:], outer
    assert any("repeat of the wrapped optimizer's" in n
               for n in doc["ema_evidence"]["notes"]), doc["ema_evidence"]
