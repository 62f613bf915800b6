"""A tf_keras legacy ``.h5`` of a registered ``Adam`` subclass with a per-weight slot of its
own (``trace``) and ``use_ema=True`` (review-16-attack-r33 F5). One ``Adam/average/<w>`` per
weight does not tell Keras' EMA copies from a subclass' own state (a subclass may update the
copies otherwise: ``test_keras_legacy_h5_training_config.py``'s ``GradInCopies``), so export
stays refused; but the refusal said "which of its 4 variables so named are the copies" (one
per weight: nothing to pick), ``list`` told to pass ``--trainable`` (which export says states
nothing) instead of the ``--optimizer`` the refusal names, and ``--trainable d1,d2`` (a
layer's name for its weights, as the option's help says) was exit 3 naming keys
(``model_weights/d1/d1/kernel``) that ``ckpt list`` does not show. Real tf_keras."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import sys
import numpy as np
import tensorflow as tf
import tf_keras as keras

out = sys.argv[1]


@keras.utils.register_keras_serializable(package="r33")
class PreAdam(keras.optimizers.Adam):
    def build(self, var_list):
        if getattr(self, "_built", False):
            return
        self._traces = [self.add_variable_from_reference(v, "trace") for v in var_list]
        super().build(var_list)


tf.random.set_seed(0)
opt = PreAdam(0.05, use_ema=True, ema_momentum=0.5)
inp = keras.Input((4,))
m = keras.Model(inp, keras.layers.Dense(2, name="d2")(keras.layers.Dense(3, name="d1")(inp)))
m.compile(opt, "mse")
x = np.random.RandomState(0).randn(16, 4).astype("f4")
m.fit(x, np.ones((16, 2), "f4"), epochs=1, batch_size=4, verbose=0)
m.save(out + "/m.h5")
np.savez(out + "/truth.npz", **{v.name[:-2]: a.numpy() for v, a in
                                zip(m.trainable_variables, opt._model_variables_moving_average)})
'''


@pytest.fixture(scope="module")
def h5(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfk_pre")
    truth = run_script(SCRIPT, out)
    assert sorted(truth) == ["d1/bias", "d1/kernel", "d2/bias", "d2/kernel"]
    return out / "m.h5"


def test_the_refusal_says_what_is_open_and_list_names_the_same_option(h5, tmp_path):
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(h5), "--strict", "--out", str(out)])
    said = " ".join(err.split())
    assert code == 6 and "whether its 4 variables so named hold the weights' averages" in said
    assert "which of its" not in said and "--optimizer CLASS[:OPTIONS]" in said, said
    assert not out.exists()
    code, text, err = run_cli(["list", str(h5), "--json"])
    assert code == 0, err
    assert json.loads(text)["ema_unproven"]["option"] == "--optimizer", text
    code, text, err = run_cli(["list", str(h5)])
    said = " ".join((text + err).split())
    assert code == 0 and "pass --optimizer to decide" in said and "--trainable to" not in said


def test_trainable_takes_layer_names_and_its_error_names_what_list_shows(h5, tmp_path):
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(h5), "--trainable", "d1,d2", "--out", str(out)])
    assert code == 6 and "--use-ema and --trainable state neither" in err, err
    code, _, err = run_cli(["export", str(h5), "--trainable", "d1,dx", "--out", str(out)])
    said = " ".join(err.split())
    assert code == 3 and "'dx' names no weight" in said, said
    assert "(d1/kernel, d1/bias, d2/kernel, d2/bias)" in said and "model_weights/" not in said
    assert not out.exists()
