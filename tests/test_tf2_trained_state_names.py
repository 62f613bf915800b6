"""TF2 variables named like optimizer state but trained (review-22-attack-r61 F1, F2), made here
by TensorFlow, tf_keras and Keras 3, each value recorded at save time.

F1: a ``tf.Module`` with a Meta-SGD ``learning_rate``, a GRU-D ``decay``, a neural-ODE ``step``,
an ``lr`` and an ``iter`` trained by a tf_keras legacy Adam; a tf_keras layer weight ``iter``
trained by ``fit`` with a legacy SGD(momentum); a Keras 3 layer's ``iteration`` and
``learning_rate`` trained by ``Adam(use_ema=True)``. Read by name as a step counter or a
hyperparameter, ``export --raw`` dropped them, exit 0. The object graph records that an
optimizer trains them (its slots for them, its ``_trainable_variables``): weights.

F2: a module ``a`` holding a net and its legacy Adam as ``a.opt``, and another trained net saved
at the root under the name ``"a/opt"``: the optimizer owning slots was matched by its
"/"-joined path, so that net's weights were read as the optimizer's state and dropped, exit 0.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from _tf_runner import run_python
from helpers import assert_npz_holds, run_cli

pytest.importorskip("tf_keras")

_TF = """
    import os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np, tensorflow as tf, tf_keras as k
    out = {out!r}
    tf.random.set_seed(1)

    class Net(tf.Module):
        def __init__(self, names, shapes):
            super().__init__()
            for n, s in zip(names, shapes):
                setattr(self, n, tf.Variable(tf.random.normal(s), name=n))
            self.names = names

        def __call__(self, x):
            y = x
            for n in self.names:
                y = y * tf.reduce_mean(getattr(self, n))
            return y

    def train(net, opt):
        x = tf.random.normal([8, 3])
        for _ in range(3):
            with tf.GradientTape() as t:
                loss = tf.reduce_mean(net(x) ** 2)
            vs = net.trainable_variables
            opt.apply_gradients(zip(t.gradient(loss, vs), vs))

    def truth(case, nets):
        np.savez(f"{{out}}/{{case}}/truth.npz", **{{
            f"{{root}}/{{n}}": getattr(net, n).numpy() for root, net in nets.items()
            for n in net.names}})

    # F1: a module's trained variables named like state, a legacy Adam (records slots)
    net = Net(["kernel", "learning_rate", "decay", "step", "lr", "iter"],
              [[4, 3], [4, 3], [3], [], [], []])
    opt = k.optimizers.legacy.Adam(0.05)
    train(net, opt)
    tf.train.Checkpoint(net=net, opt=opt).write(f"{{out}}/module/ckpt")
    truth("module", {{"net": net}})
    # F2: an optimizer at a.opt (records slots) and a net saved under the name "a/opt"
    holder = tf.Module()
    holder.net = Net(["w", "beta_1"], [[4, 3], []])
    holder.opt = k.optimizers.legacy.Adam(0.05)
    train(holder.net, holder.opt)
    other = Net(["w", "momentum"], [[4, 3], []])
    train(other, k.optimizers.legacy.SGD(0.05))
    tf.train.Checkpoint(**{{"a": holder, "a/opt": other}}).write(f"{{out}}/clash/ckpt")
    truth("clash", {{"a/net": holder.net, "a/opt": other}})

    # F1: a tf_keras layer weight named iter, fit with a legacy SGD(momentum), save_weights
    class Scale(k.layers.Layer):
        def build(self, s):
            self.iter = self.add_weight(name="iter", shape=(), initializer="ones")

        def call(self, x):
            return x * self.iter

    m = k.Sequential([k.layers.Dense(3, input_shape=(4,)), Scale()])
    m.compile(k.optimizers.legacy.SGD(0.05, momentum=0.9), "mse")
    m.fit(np.random.rand(16, 4), np.random.rand(16, 3), epochs=2, verbose=0)
    m.save_weights(f"{{out}}/tfk_layer/ckpt")
    np.savez(f"{{out}}/tfk_layer/truth.npz", **{{
        "layer_with_weights-0/kernel": m.weights[0].numpy(),
        "layer_with_weights-0/bias": m.weights[1].numpy(),
        "layer_with_weights-1/iter": m.weights[2].numpy()}})
"""

_KERAS3 = """
    import os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import numpy as np, keras, tensorflow as tf
    out = {out!r}
    keras.utils.set_random_seed(3)

    class Odd(keras.layers.Layer):
        def build(self, s):
            self.iteration = self.add_weight(name="iteration", shape=(), initializer="ones")
            self.learning_rate = self.add_weight(name="learning_rate", shape=(3,),
                                                 initializer="ones")

        def call(self, x):
            return x * self.learning_rate * self.iteration

    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc"), Odd(name="odd")])
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    m.compile(opt, "mse")
    x, y = np.random.rand(32, 4), np.random.rand(32, 3)
    m.fit(x, y, epochs=1, verbose=0)
    with tf.GradientTape() as t:  # one more step: the weights are no longer the averages
        loss = tf.reduce_mean((m(x) - y) ** 2)
    opt.apply_gradients(zip(t.gradient(loss, m.trainable_variables), m.trainable_variables))
    tf.train.Checkpoint(model=m, optimizer=opt).write(f"{{out}}/keras3/ckpt")
    np.savez(f"{{out}}/keras3/truth.npz", **{{v.path: np.asarray(v) for v in m.weights}})
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("trained_state_names")
    for script in (_TF, _KERAS3):
        proc = run_python(["-c", textwrap.dedent(script.format(out=str(out)))], timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.parametrize("case", ["module", "clash", "tfk_layer", "keras3"])
def test_trained_variables_named_like_state_are_exported_raw(saved, case, tmp_path):
    """export --raw writes every trained variable, bit for bit with the value the library held
    at save time, and ckpt list calls each a weight; the optimizers' own state stays out."""
    d = saved / case
    out = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", str(d), "--raw", "--out", str(out)])
    assert code == 0, err
    with np.load(d / "truth.npz") as t:
        truth = {k: t[k] for k in t.files}
    assert_npz_holds(out, truth)
    code, text, err = run_cli(["list", str(d), "--json"])
    assert code == 0, err
    roles = {v["path"]: v["role"] for v in json.loads(text)["variables"] if v["path"]}
    for name in truth:
        assert roles[name] == "weight", (name, roles)
