"""A bare ``.weights.h5`` of a LoRA fine-tuning whose rank equals its kernels' dimensions
(``Dense(4).enable_lora(4)``: the factors have the kernel's shape, so their shapes do not
say LoRA): the refusal named ``--trainable`` and ``apply_keras_ema(model, path)``, neither of
which can decide (review-11-attack-r15 F2): the optimizer was built with the factors, which
the file does not hold. The number of optimizer variables alone rules every set of the
file's weights out: the refusal says no ``--trainable`` fits and names the run's
``tf.train.Checkpoint``, which gives Keras' averages bit for bit. Made here by Keras 3 (a
subprocess), truth ``optimizer._model_variables_moving_average`` at save."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli, run_script

pytest.importorskip("keras")

SCRIPT = r'''
import os
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"
import keras
import numpy as np
import tensorflow as tf

out = sys.argv[1]
keras.utils.set_random_seed(13)
inp = keras.Input((4,))
h = keras.layers.Dense(4, name="d1")(inp)
m = keras.Model(inp, keras.layers.Dense(4, name="d2")(h))
x = np.random.RandomState(0).normal(size=(16, 4)).astype("float32")
m.compile(keras.optimizers.SGD(0.1), "mse")
m.fit(x, x, epochs=1, verbose=0)  # pre-trained, then LoRA of rank = the kernels' dimensions
m.get_layer("d1").enable_lora(4)
m.get_layer("d2").enable_lora(4)


class Save(keras.callbacks.Callback):  # what ModelCheckpoint does at an epoch's end
    def on_epoch_end(self, epoch, logs=None):
        if epoch != 1:
            return
        opt = self.model.optimizer
        avg = {id(v): a for v, a in zip(opt._trainable_variables,
                                        opt._model_variables_moving_average, strict=True)}
        self.model.save_weights(f"{out}/lora.weights.h5")
        tf.train.Checkpoint(model=self.model, optimizer=opt).write(f"{out}/tf/ckpt")
        np.savez(f"{out}/truth.npz", **{v.path: (avg[id(v)] if id(v) in avg else v).numpy()
                                         for v in self.model.weights})


m.compile(keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.8), "mse")
m.fit(x, x, epochs=2, batch_size=4, verbose=0, callbacks=[Save()])
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("lora_full_rank")
    return out, run_script(SCRIPT, out)


@pytest.mark.parametrize("stated", [[], ["--trainable", "d1/kernel,d1/bias,d2/kernel,d2/bias"],
                                    ["--trainable", "d2/kernel,d2/bias", "--loop-order"]],
                         ids=["none", "trainable", "loop-order"])
def test_refusal_names_no_option_that_cannot_decide(made, tmp_path, stated):
    """Stating weights (all of them, or a loop's order) cannot fit either: said alike."""
    out, _ = made
    code, _, err = run_cli(["export", "--not-swapped",
                            str(out / "lora.weights.h5"), "--use-ema", *stated,
                            "--out", str(tmp_path / "w.npz")])
    assert code == 6, err
    text = " ".join(err.split())
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "no --trainable fits" in text and "tf.train.Checkpoint" in text, text
    assert "pass --trainable" not in text and "apply_keras_ema" not in text, text
    assert not list(tmp_path.iterdir())


def test_the_way_it_names_gives_the_averages(made, tmp_path):
    """The run's tf.train.Checkpoint: the factors' and biases' averages, the frozen base
    kernels raw (the optimizer was not built with them), bit for bit."""
    out, truth = made
    dest = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(out / "tf"), "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as z:
        got = {k: z[k] for k in z.files}
    assert sorted(got) == sorted(truth)
    for k, v in truth.items():
        assert got[k].dtype == v.dtype and got[k].tobytes() == v.tobytes(), k
