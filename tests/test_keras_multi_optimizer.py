"""Keras 3 ``MultiOptimizer`` whose inner optimizers run ``use_ema=True`` (review 13
attack-r23 F2): never read as ``use_ema=False`` ("none has a shadow", "configured with
use_ema=False", advice to export --raw as if no averages existed). ckpt does not pair a nested
optimizer's averages: every command refuses (exit 6) saying so, and no option is offered as
deciding it. Truth at save time: Keras' own inner optimizers hold ``use_ema=True`` and one
average per weight they were built with.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    opts = keras.optimizers
    out = tmp_path_factory.mktemp("multi")
    keras.utils.set_random_seed(3)
    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(6, name="enc"),
                          keras.layers.Dense(6, name="mid"), keras.layers.Dense(6, name="head")],
                         name="net")
    omap = opts.OptimizerMap(default_optimizer=opts.SGD(0.01, use_ema=True, ema_momentum=0.8))
    omap[".*enc.*"] = opts.Adam(0.01, use_ema=True, ema_momentum=0.8)
    m.compile(optimizer=opts.MultiOptimizer(omap), loss="mse")
    x = np.random.default_rng(0).normal(size=(16, 6)).astype("float32")
    truth = {}

    class Snap(keras.callbacks.Callback):
        def on_epoch_end(self, ep, logs=None):
            if ep != 1:
                return
            self.model.save(str(out / "multi.keras"))
            self.model.save_weights(str(out / "multi.weights.h5"))
            for o in self.model.optimizer._inner_optimizers:
                assert o.use_ema
                for v, a in zip(o._trainable_variables, o._model_variables_moving_average,
                                strict=True):
                    truth[v.path] = a.numpy()

    m.fit(x, x[:, ::-1].copy(), epochs=2, batch_size=4, verbose=0, callbacks=[Snap()])
    assert len(truth) == 6  # every weight has an average in some inner optimizer
    return out, m, truth


@pytest.mark.parametrize("name", ["multi.keras", "multi.weights.h5"])
def test_multi_optimizer_averages_are_never_read_as_use_ema_false(multi, name):
    out, _m, _truth = multi
    path = out / name
    listed = _ckpt("list", path)
    assert listed.exit_code == 0, listed.output
    assert "none of" not in listed.output and "nests" in listed.output, listed.output
    doc = json.loads(_ckpt("list", path, "--json").stdout)
    assert doc["ema_evidence"]["use_ema"] is not False, doc["ema_evidence"]
    for extra in ([], ["--use-ema"], ["--use-ema", "--trainable", "enc,mid,head"]):
        dst = out / f"o_{name}_{len(extra)}.npz"
        r = _ckpt("export", path, "--out", dst, *extra)
        assert r.exit_code == 6, (extra, r.output)
        assert "use_ema=False" not in r.stderr and "nests" in r.stderr, r.stderr
        assert not dst.exists()
    r = _ckpt("map", path)
    assert r.exit_code == 6 and "nests" in r.stderr, r.output


def test_multi_optimizer_apply_keras_ema_refuses(multi):
    from ckpt_tools import EmaError, apply_keras_ema

    out, m, _truth = multi
    for name in ("multi.keras", "multi.weights.h5"):
        with pytest.raises(EmaError, match="nests"):
            apply_keras_ema(m, str(out / name), use_ema=True)
