"""``restore-ema`` and ``map`` read the mark restore-ema leaves in its Keras outputs, as
``list``, ``export`` and ``eval`` do (review-18-attack-r40 F5; ``ckpt_tools.restored_mark``).

A Keras 3 model is fit with ``SGD(momentum=0.9, use_ema=True)``; at save time a callback records
Keras' own averages (``optimizer._model_variables_moving_average``). restore-ema writes a
``.keras``, a ``.weights.h5`` and a ``--format h5`` file of them. Run again on any of those
(whose weights already ARE the averages), restore-ema refuses (exit 6) naming the file and the
mark, writing nothing, in the CLI and in ``bake_ema``; ``map`` says so before its map of the
copies (or its refusal). A statement that asks for the copies (``--not-swapped``) still reads
them, as ``export`` does, and gives Keras' averages bit for bit.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from typer.testing import CliRunner

ALREADY = "ckpt restore-ema wrote this file: its weights are the averages already"


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def restored(tmp_path_factory):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    out = tmp_path_factory.mktemp("again")
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="relu",
                                                                    name="mid"),
                              keras.layers.Dense(3, name="out")],
                             name="sequential")  # not sequential_N after other tests
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9, use_ema=True,
                                                 ema_momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.RandomState(0).randn(64, 6).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    truth: dict[str, np.ndarray] = {}

    class Snap(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch != 1:
                return
            opt = self.model.optimizer
            self.model.save(str(out / "m.keras"))  # mid-fit: weights raw, copies the averages
            for v, a in zip(opt._trainable_variables, opt._model_variables_moving_average,
                            strict=True):
                truth[v.path.removeprefix(f"{self.model.name}/")] = np.array(a.numpy())

    model.fit(x, y, epochs=3, batch_size=16, verbose=0, callbacks=[Snap()])
    assert len(truth) == 4
    files = {"keras": out / "w" / "ema.keras", "weights.h5": out / "w" / "ema.weights.h5",
             "h5": out / "w" / "ema.h5"}
    for kind, target in files.items():
        extra = ["--format", "h5"] if kind == "h5" else []
        r = _ckpt("restore-ema", out / "m.keras", "--out", target, "--not-swapped", "-q",
                  *extra)
        assert r.exit_code == 0, r.output
    return out, truth, files


def _weights(path) -> dict[str, np.ndarray]:
    """The model weights of a .keras as Keras loads them (its own loader): ``mid/kernel``."""
    import keras

    model = keras.models.load_model(str(path), compile=False)
    return {v.path: np.asarray(v.numpy()) for v in model.weights}


@pytest.mark.parametrize("kind", ["keras", "weights.h5", "h5"])
@pytest.mark.parametrize("fmt", [[], ["--format", "h5"], ["--dry-run"]])
def test_restore_ema_refuses_a_file_it_wrote(restored, kind, fmt):
    out, _, files = restored
    target = out / "again" / f"{kind}{len(fmt)}" / ("x.h5" if "h5" in fmt else files[kind].name)
    done = _ckpt("restore-ema", files[kind], "--out", target, *fmt)
    assert done.exit_code == 6, done.output
    said = _words(done.output)
    assert f"{files[kind]}: {ALREADY}" in said, said
    assert "use it as it is" in said and "--not-swapped" in said, said
    assert not target.exists() and not target.parent.exists(), done.output


@pytest.mark.parametrize("kind", ["keras", "weights.h5"])
def test_bake_ema_refuses_a_file_restore_ema_wrote(restored, kind):
    from ckpt_tools import bake_ema
    from ckpt_tools.errors import EmaError

    out, _, files = restored
    with pytest.raises(EmaError, match="its weights are the averages already"):
        bake_ema(files[kind], out / "api" / kind)
    assert not (out / "api" / kind).exists()


@pytest.mark.parametrize("kind", ["keras", "weights.h5", "h5"])
def test_map_says_the_file_holds_the_averages(restored, kind):
    """The note comes whatever the map of its copies gives: the ``.keras``'s pairs (exit 0),
    the ``.weights.h5``'s use_ema question or the ``.h5``'s no-copies refusal (exit 6)."""
    _, _, files = restored
    done = _ckpt("map", files[kind])
    assert done.exit_code == (0 if kind == "keras" else 6), done.output
    assert f"{files[kind]}: {ALREADY}" in _words(done.output), done.output


def test_a_statement_still_restores_the_copies_as_keras_averaged_them(restored):
    """``--not-swapped`` asks for the EMA copies the output kept (export reads them the same
    way): the result holds Keras' averages, as the first output does."""
    out, truth, files = restored
    target = out / "stated" / "ema.keras"
    done = _ckpt("restore-ema", files["keras"], "--out", target, "--not-swapped")
    assert done.exit_code == 0, done.output
    got = _weights(target)
    first = _weights(files["keras"])
    for path, value in truth.items():
        assert got[path].tobytes() == value.tobytes(), path
        assert first[path].tobytes() == value.tobytes(), path
