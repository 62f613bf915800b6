"""A Keras 3 model trained in a custom loop with ``SGD(use_ema=True)`` and saved as
``tf.train.Checkpoint(model=m)``: the file holds neither averages nor an optimizer, so the
refusal names both ways to keep the averages (the optimizer, whose variables the use_ema copies
are, and ``ema.average(v)``) and never says the optimizer had ``use_ema=False``
(review-11-attack-r16 F6). A compiled model carries its optimizer (``model.optimizer``) into
``tf.train.Checkpoint(model=m)``, copies included: exported bit for bit. Truth:
``optimizer._model_variables_moving_average``, recorded by Keras at save time in a
subprocess."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli, run_script

SCRIPT = r'''
import os
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"
import keras
import numpy as np
import tensorflow as tf

out = sys.argv[1]
truth = {}
x = np.linspace(0, 1, 12, dtype="float32").reshape(4, 3)
y = np.ones((4, 2), "float32")


def model():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")],
                            name="sequential")


def fit(net, o):  # three custom-loop steps, as a user's loop trains
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((net(x) - y) ** 2)
        o.apply_gradients(zip(tape.gradient(loss, net.trainable_variables),
                              net.trainable_variables))


def record(case, opt):
    for var, avg in zip(opt._trainable_variables, opt._model_variables_moving_average):
        truth[f"{case}:{var.path}"] = avg.numpy()


m = model()
opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
fit(m, opt)
tf.train.Checkpoint(model=m).write(f"{out}/loop_model_only/ckpt")
# the averages saved as a list, without their optimizer (review-20-attack-r47 F3)
tf.train.Checkpoint(model=m, ema=list(opt._model_variables_moving_average)).write(
    f"{out}/loop_list/ckpt")
record("loop", opt)
# a GAN: this optimizer saved, another's averages as a list (review-21-attack-r55 F3)
d = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="e")], name="disc")
opt_d = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.9)
fit(d, opt_d)
tf.train.Checkpoint(model=m, disc=d, optimizer=opt,
                    d_ema=list(opt_d._model_variables_moving_average)).write(f"{out}/gan/ckpt")
record("gan", opt_d)
truth.update({f"raw:{v.path}": v.numpy() for v in d.trainable_variables})


class Sub(keras.Model):  # its weights record sub/kernel, not sub/e/kernel (r59 F3)
    def __init__(self):
        super().__init__(name="sub")
        self.body = keras.layers.Dense(2, name="e")

    def call(self, x):
        return self.body(x)


d = Sub()
opt_d = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.9)
fit(d, opt_d)
tf.train.Checkpoint(model=m, disc=d, optimizer=opt,
                    d_ema=list(opt_d._model_variables_moving_average)).write(
    f"{out}/gan_sub/ckpt")
record("gan_sub", opt_d)
truth.update({f"raw:{v.path}": v.numpy() for v in d.trainable_variables})
m = model()
m.compile(keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5), "mse")
m.fit(x, y, epochs=3, verbose=0)
tf.train.Checkpoint(model=m).write(f"{out}/compiled_model_only/ckpt")
record("compiled", m.optimizer)
np.savez(f"{out}/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("no_optimizer")
    return out, run_script(SCRIPT, out)


def test_a_checkpoint_without_its_optimizer_names_the_optimizer(made, tmp_path):
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "loop_model_only"), "--out", str(target)])
    assert code == 6 and not target.exists(), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    text = " ".join(err.split())
    assert "use_ema=False" not in text, err
    assert "holds no optimizer" in text and "optimizer=optimizer" in text, err
    assert "ema.average(v)" in text, err
    # a Keras 3 model (the graph shows it): ema.apply() refuses its variables, so the code
    # given averages their tf.Variables, as README's recipe (review-24-user-u26 F6)
    assert "else v.value for v in model.trainable_variables]" in text, err
    assert "for v in model.trainable_variables])" not in text, err


def test_a_compiled_models_checkpoint_carries_its_optimizers_copies(made, tmp_path):
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "compiled_model_only"), "--not-swapped",
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for path in ("sequential/dense/kernel", "sequential/dense/bias"):
            assert z[path].tobytes() == truth[f"compiled:{path}"].tobytes(), path


@pytest.mark.parametrize("command", ["export", "restore-ema"])
def test_averages_saved_without_their_optimizer_are_named(made, command, tmp_path):
    """review-20-attack-r47 F3: Keras 3 averages saved as a list without their optimizer read
    as weights, refused as "no averages are stored" (they are): the names alone do not prove
    them (a custom optimizer's own "average" variables are named so too), so still refused,
    naming them and the optimizer to save with them."""
    out, _ = made
    target = tmp_path / ("w.npz" if command == "export" else "ema")
    code, _, err = run_cli([command, str(out / "loop_list"), "--not-swapped",
                            "--out", str(target)])
    assert code == 6 and not target.exists(), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    text = " ".join(err.split())
    assert "no averages are stored" not in text, err
    assert "ema/0 (sgd/sequential_dense_kernel_average)" in text, err
    assert "saved without that optimizer" in text and "optimizer=optimizer" in text, err


@pytest.mark.parametrize("case,name", [("gan", "disc"), ("gan_sub", "sub")])
def test_another_optimizers_averages_beside_a_saved_one_are_refused(made, case, name,
                                                                    tmp_path):
    """review-21-attack-r55 F3 (Keras 3): the saved optimizer's averages paired, the other's
    list read as weights and its weights exported raw with exit 0 ("not built with them").
    Refused, exit 6, naming the list; --allow-missing takes those weights raw, as it says.
    A subclassed D (review-21-attack-r59 F3: its weights record sub/kernel, its copies
    sub_e_kernel_average, and it went out raw with exit 0) likewise."""
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--not-swapped", "--out", str(target)])
    assert code == 6 and not target.exists(), err
    text = " ".join(err.split())
    assert "no EMA copy in the optimizer" not in text, err
    assert "2 weights have no use_ema copy in the saved optimizer" in text, err
    assert f"/{name}_e_kernel_average)" in text and "d_ema/0 (sgd_" in text, err
    assert "--allow-missing" in text, err
    code, _, err = run_cli(["export", str(out / case), "--not-swapped", "--allow-missing",
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for path in ("sequential/dense/kernel", "sequential/dense/bias"):
            assert z[path].tobytes() == truth[f"loop:{path}"].tobytes(), path
        for i, path in enumerate((f"{name}/e/kernel", f"{name}/e/bias")):
            (key,) = [k for k in z.files if k.startswith("disc") and k.endswith(path[-4:])]
            assert z[key].tobytes() == truth[f"raw:{path}"].tobytes(), key
            assert z[f"d_ema/{i}"].tobytes() == truth[f"{case}:{path}"].tobytes()
