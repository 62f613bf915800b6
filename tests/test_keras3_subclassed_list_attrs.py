"""review-29-attack-r109 F5: a Keras 3 subclassed model (GAN of two ``Dense`` layers, custom
loop, a Keras optimizer) whose ``tf.train.ExponentialMovingAverage`` averages were kept as list
attributes of the model (``net.g_ema = [...]; net.d_ema = [...]``). Keras 3 keeps list and dict
attributes in its own ``TrackedList``/``TrackedDict``, which ``tf.train.Checkpoint`` does not
save, so the file holds no average: the refusal (exit 6, right) said "the weights are a
tf.Module's (no Keras model holds them)", false. It now says the weights are a Keras 3 model's
layers' and why list attributes are lost; the ways it offers to keep them (a tuple attribute, a
``tf.Module`` attribute, the checkpoint's own ``ema=[...]``) are checked here to export the
averages bit for bit.

Truth: ``ema.average(v)`` at save time, written by the script (real Keras 3 / TensorFlow)."""

from __future__ import annotations

import os

import pytest
from helpers import assert_npz_holds, run_cli, run_script
from helpers_keras import KERAS3_LOOP

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SCRIPT = KERAS3_LOOP + r"""
class GAN(keras.Model):
    def __init__(self):
        super().__init__()
        self.gen = keras.layers.Dense(4, name="gen")
        self.disc = keras.layers.Dense(2, name="disc")
    def call(self, x):
        return self.disc(self.gen(x))
net = GAN(); net(tf.zeros((1, 3)))
opt = keras.optimizers.SGD(0.1)
gv = [v.value for v in net.gen.trainable_variables]
dv = [v.value for v in net.disc.trainable_variables]
e1, e2 = tf.train.ExponentialMovingAverage(0.5), tf.train.ExponentialMovingAverage(0.9)
train(net, opt, lambda: (e1.apply(gv + dv), e2.apply(dv)), 3)
names = ["model/gen/_kernel", "model/gen/bias", "model/disc/_kernel", "model/disc/bias"]
one = [e1.average(v) for v in gv + dv]
np.savez(os.path.join(out, "truth.npz"), **{n: a.numpy() for n, a in zip(names, one)})
def save(name):
    tf.train.Checkpoint(model=net, optimizer=opt).write(os.path.join(out, name, "ckpt"))
net.g_ema = [e1.average(v) for v in gv]; net.d_ema = [e2.average(v) for v in dv]
save("lists")  # Keras 3 saves neither list
del net.g_ema, net.d_ema
net.avgs = tuple(one)
save("tuple")
del net.avgs
holder = tf.Module(); holder.avgs = one; net.ema = holder
save("module")
del net.ema
d = os.path.join(out, "given", "ckpt")
tf.train.Checkpoint(model=net, optimizer=opt, ema=one).write(d)
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    out = tmp_path_factory.mktemp("k3_list_attrs")
    return out, run_script(SCRIPT, out)


@pytest.mark.parametrize("command", ["export", "map", "restore-ema"])
def test_unsaved_list_attributes_are_named_not_a_tf_module(made, command, tmp_path):
    out, _ = made
    dest = ["--out", str(tmp_path / ("o.npz" if command == "export" else "o"))]
    code, _, err = run_cli([command, str(out / "lists"), *([] if command == "map" else dest)])
    assert code == 6, err
    assert "tf.Module's" not in err and "no Keras model holds" not in err, err
    assert "a Keras 3 model's layers'" in err and "TrackedList" in err, err
    assert "use_ema=False" in err and "tf.train.Checkpoint(model=model, ema=[" in err, err


@pytest.mark.parametrize("layout", ["tuple", "module", "given"])
def test_the_ways_offered_keep_the_averages(made, layout, tmp_path):
    out, truth = made
    dest = tmp_path / "o.npz"
    code, _, err = run_cli(["export", str(out / layout), "--out", str(dest)])
    assert code == 0, err
    assert_npz_holds(dest, truth)


BN_SCRIPT = KERAS3_LOOP + r"""
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.norm = keras.layers.BatchNormalization(name="norm")
    def call(self, x):
        return self.norm(x, training=True)
net = Net(); net(tf.zeros((2, 3)))
opt = keras.optimizers.SGD(0.1)
vs = [v.value for v in net.trainable_variables]
e = tf.train.ExponentialMovingAverage(0.5)
train(net, opt, lambda: e.apply(vs), 2)
net.avgs = [e.average(v) for v in vs]  # a list attribute: not saved
tf.train.Checkpoint(model=net, optimizer=opt).write(os.path.join(out, "bn", "ckpt"))
np.savez(os.path.join(out, "truth.npz"), keras=np.array(keras.__version__))
"""


def test_a_keras3_model_without_kernels_is_not_called_a_tf_module(tmp_path):
    """s30d "Left": a Keras 3 subclassed model whose only layer is a BatchNormalization (no
    ``_kernel`` child) still got "the weights are a tf.Module's (no Keras model holds them)"
    in the no-averages refusal. The refusal now says what the graph shows (no Keras model or
    layer above them), not what holds them, and names both causes as before."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    run_script(BN_SCRIPT, tmp_path)
    code, _, err = run_cli(["export", str(tmp_path / "bn"), "--out", str(tmp_path / "o.npz")])
    said = " ".join(err.split())
    assert code == 6, err
    assert "tf.Module's (no Keras model holds them)" not in said, said
    assert "the object graph shows no Keras model or layer holding the weights" in said, said
    assert "use_ema=False" in said and "tf.train.ExponentialMovingAverage" in said, said
