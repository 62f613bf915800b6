"""``ckpt average --ema --bake`` of a Keras 3 run's ``tf.train.Checkpoint`` files saved after
``SwapEMAWeights(swap_on_epoch=True)`` (review-12-attack-r21 F1): the pairing it bakes reads the
optimizer's copies as the averages, which the files cannot show (saved swapped, they are the
raw weights). Refused as ``export`` refuses it (exit 6, nothing written, kept with ``-q``,
naming ``--not-swapped`` and ``--raw``: review-13-attack-r23 F1), ``--not-swapped`` states it;
in Python too.

Made here by Keras 3; the truth is recorded by callbacks around the swap: the optimizer's
averages before ``SwapEMAWeights`` runs, and the saved weights and copies right after the save."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import keras_averages, run_cli


@pytest.fixture(scope="module")
def swapped_run(keras, tmp_path_factory):
    import tensorflow as tf

    d = tmp_path_factory.mktemp("swapped_run")
    keras.utils.set_random_seed(7)
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(2, name="b")(keras.layers.Dense(3, name="a")(inp)))
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")
    truth: dict = {}

    class Before(keras.callbacks.Callback):  # runs before SwapEMAWeights' on_epoch_end
        def on_epoch_end(self, epoch, logs=None):
            truth["averages", epoch] = keras_averages(opt)

    class Save(keras.callbacks.Callback):  # after SwapEMAWeights: the model holds averages
        def on_epoch_end(self, epoch, logs=None):
            if epoch < 2:
                tf.train.Checkpoint(model=model, optimizer=opt).write(str(d / f"e{epoch}"))
                truth["weights", epoch] = {v.path: v.numpy() for v in model.trainable_variables}
                truth["copies", epoch] = keras_averages(opt)

    model.fit(x, y, epochs=3, batch_size=8, verbose=0, callbacks=[
        Before(), keras.callbacks.SwapEMAWeights(swap_on_epoch=True), Save()])
    for e in (0, 1):  # what the library did: saved swapped (copies differ from the weights)
        w, c = truth["weights", e], truth["copies", e]
        assert all(w[k].tobytes() != c[k].tobytes() for k in w)
        assert max(float(abs(w[k] - truth["averages", e][k]).max()) for k in w) < 1e-6
    return [str(d / "e0"), str(d / "e1")], truth


def _average(paths, out, *extra):
    return run_cli(["average", *paths, "--ema", "--bake", "--newest", paths[1],
                    "--out", str(out), *extra])


def test_bake_refuses_the_swap_question_with_quiet(swapped_run, tmp_path):
    paths, _ = swapped_run
    code, _, err = _average(paths, tmp_path / "q", "-q")
    assert code == 6, err
    assert "SwapEMAWeights" in err and "--not-swapped" in err and "--raw" in err, err
    assert not (tmp_path / "q").exists() or not any((tmp_path / "q").iterdir())
    code, text, err = _average(paths, tmp_path / "j", "--json")
    assert code == 6 and not text, (text, err)


def test_bake_strict_refuses_and_writes_nothing(swapped_run, tmp_path):
    paths, _ = swapped_run
    code, _, err = _average(paths, tmp_path / "s", "--strict")
    assert code == 6 and "not_swapped" in err and "--not-swapped" in err, err
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())


def test_bake_not_swapped_stated_passes_strict(swapped_run, tmp_path):
    paths, truth = swapped_run
    code, text, err = _average(paths, tmp_path / "n", "--strict", "--not-swapped", "--json")
    assert code == 0, err
    doc = json.loads(text)
    assert "assumed" not in doc and doc.get("stated_not_swapped") is True, text
    assert "because you stated --not-swapped" in err, err


@pytest.mark.parametrize("option", ["--strict", "--not-swapped"])
def test_swap_options_need_bake(swapped_run, tmp_path, option):
    paths, _ = swapped_run
    code, _, err = run_cli(["average", *paths, "--ema", "--out", str(tmp_path / "x"), option])
    assert code == 2 and option in err, err


def test_python_average_says_what_it_assumed(swapped_run, tmp_path):
    import warnings

    from ckpt_tools import AssumptionWarning, EmaError, UnprovenPairingError, average_checkpoints

    paths, _ = swapped_run
    with pytest.raises(UnprovenPairingError, match="not_swapped=True") as refused:
        average_checkpoints(paths, tmp_path / "p", ema=True, bake=True, newest=paths[1])
    assert refused.value.option == "--not-swapped"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = average_checkpoints(paths, tmp_path / "p2", ema=True, bake=True,
                                     newest=paths[1], not_swapped=True)
    assert result.assumed == [] and "assumed" not in result.to_dict()
    assert not any(issubclass(w.category, AssumptionWarning) for w in caught)
    with pytest.raises(EmaError, match="not_swapped"):
        average_checkpoints(paths, tmp_path / "s", ema=True, bake=True, newest=paths[1],
                            strict=True)
    stated = average_checkpoints(paths, tmp_path / "n", ema=True, bake=True, newest=paths[1],
                                 strict=True, not_swapped=True)
    assert stated.assumed == []
