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

import json
import os

import numpy as np
import pytest
from helpers_keras import fit_saved_mid_fit
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
    _, x, y, truth = fit_saved_mid_fit(keras, out, 5)
    assert len(truth) == 4
    _frozen(keras, out, x, y)
    files = {"keras": out / "w" / "ema.keras", "weights.h5": out / "w" / "ema.weights.h5",
             "h5": out / "w" / "ema.h5"}
    for kind, target in files.items():
        extra = ["--format", "h5"] if kind == "h5" else []
        r = _ckpt("restore-ema", out / "m.keras", "--out", target, "--not-swapped", "-q",
                  *extra)
        assert r.exit_code == 0, r.output
    return out, truth, files


def _frozen(keras, out, x, y) -> None:
    """``frozen.keras``: a model whose frozen ``b`` has the shape of the trained ``c``, so its
    file does not prove which of them the optimizer's copies average (``--trainable``
    decides), and restore-ema's output of it ``fz/ema.keras``; Keras' own averages (raw for
    ``b``) recorded at save time in ``frozen_truth.npz``."""
    keras.utils.set_random_seed(6)
    fr = keras.layers.Dense(4, name="b")
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, name="a"), fr,
                              keras.layers.Dense(4, name="c"), keras.layers.Dense(3, name="out")],
                             name="frozen")
    fr.trainable = False
    model.compile(optimizer=keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.8),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    opt = model.optimizer
    averages = {v.path: a for v, a in zip(opt._trainable_variables,
                                          opt._model_variables_moving_average, strict=True)}
    np.savez(out / "frozen_truth.npz", **{v.path: np.array(averages.get(v.path, v).numpy())
                                          for v in model.weights})
    model.save(str(out / "frozen.keras"))  # after fit(): weights raw, copies the averages
    r = _ckpt("restore-ema", out / "frozen.keras", "--not-swapped", "--trainable", "a,c,out",
              "--out", out / "fz" / "ema.keras", "-q")
    assert r.exit_code == 0, r.output


def test_restore_emas_output_of_a_model_with_a_frozen_layer_needs_no_statement(restored):
    """review-23-user-u25 F3: which of the equal-shaped ``b`` (frozen), ``c`` the copies
    average is not proven by the file, restore-ema's or its input; but restore-ema's output
    holds the averages as its weights (export writes them as stored, bit for bit). ``list`` said
    "pass --trainable to decide" and its --json both weights_are_averages and ema_unproven;
    ``diff --ema`` refused without a word of the bake. The input is still asked."""
    out, _, _ = restored
    baked = out / "fz" / "ema.keras"
    done = _ckpt("list", baked)
    assert done.exit_code == 0, done.output
    said = _words(done.output)
    assert "restore-ema wrote this file: its weights are the averages" in said, said
    assert "pass --trainable" not in said and "to decide" not in said, said
    # what its input was read under, which its mark records, is repeated (r128 F3)
    assert "read under --not-swapped and --trainable, as its mark records" in said, said
    listed = json.loads(_ckpt("list", baked, "--json").stdout)
    assert listed["ema_evidence"]["weights_are_averages"] is True
    assert listed["ema_unproven"] is None, listed["ema_unproven"]
    for command in (["map", baked], ["diff", baked, "--ema"]):
        done = _ckpt(*command)
        assert f"{baked}: {ALREADY}" in _words(done.output), done.output
    target = out / "fz" / "w.npz"
    done = _ckpt("export", baked, "--out", target)
    assert done.exit_code == 0, done.output
    with np.load(target) as got, np.load(out / "frozen_truth.npz") as truth:
        assert sorted(got.files) == sorted(truth.files), got.files
        for name in got.files:  # frozen/b/kernel raw, the others Keras' averages
            assert got[name].tobytes() == truth[name].tobytes(), name
    done = _ckpt("list", out / "frozen.keras")  # not restore-ema's: the statement decides
    assert "pass --trainable to decide" in _words(done.output), done.output


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
