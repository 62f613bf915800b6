"""A stated ``apply_order`` where Keras' tracking, not the object graph, is the order.

- A tf_keras layer that re-assigns a sublayer in ``build()`` (``self.a = Dense(...)`` again
  once the input size is known) tracks it last; the object graph keeps its first place. So
  ``ema.apply(model.trainable_variables)`` got ``b, a`` while the graph lists ``a, b``.
- ``tf.Module.trainable_variables`` of a module holding a subclassed tf_keras model or
  custom layer walks Keras' tracking list (assignment order) before the sorted attributes.

Both statements are true here, and pairing from the file gave each average to the other
sublayer with exit 0. Now ``apply_ema(tf.train.Checkpoint(model=m), path, apply_order=...)``
reads the order from the live objects it wraps, bit for bit, and the CLI refuses the stated
order (exit 6) where the file cannot read it (a layer inside a tf_keras ``Sequential``; a
Keras-named pair whose tf.Module and Keras orders differ), naming re-assignment in build() or
the subclassed model and the live-object way; where it must assume no re-assignment (a
subclassed layer the file does not mark as Keras) it says so on stderr and in ``--json``.
Truth: ``ema.average(v)`` recorded at save by the real tf_keras/TensorFlow in a subprocess."""

from __future__ import annotations

import json

import pytest
from helpers import error_line, run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as K
import ckpt_tools

out = sys.argv[1]
arrays = {}


class Blk(K.layers.Layer):
    """Two same-named Dense sublayers; ``a`` re-created in build()."""

    def __init__(self, first="a", second="b", **kw):
        super().__init__(**kw)
        self.names = (first, second)
        setattr(self, first, K.layers.Dense(4, name="fc"))
        setattr(self, second, K.layers.Dense(4, name="fc"))

    def build(self, shape):
        setattr(self, self.names[0], K.layers.Dense(4, name="fc"))
        super().build(shape)

    def call(self, x):
        return getattr(self, self.names[1])(tf.tanh(getattr(self, self.names[0])(x)))


class Net(K.Model):
    def __init__(self):
        super().__init__()
        self.zeta = K.layers.Dense(4, name="fc", activation="tanh")
        self.alpha = K.layers.Dense(4, name="fc")

    def call(self, x):
        return self.alpha(self.zeta(x))


def seq():
    return K.Sequential([K.Input((4,)), Blk(name="blk")])


def bare():  # a custom layer at the root: the file marks nothing as Keras
    m = Blk("alpha", "zeta", name="blk")
    m(tf.zeros((1, 4)))
    return m


def holder():
    h = tf.Module()
    h.net = Net()
    h.net(tf.zeros((1, 4)))
    return h


def train(tv, fn):
    ema = tf.train.ExponentialMovingAverage(0.5)
    opt = K.optimizers.SGD(0.05)
    for _ in range(3):
        x = tf.random.normal((8, 4))
        with tf.GradientTape() as t:
            loss = tf.reduce_mean((fn(x) - x) ** 2)
        opt.apply_gradients(zip(t.gradient(loss, tv), tv))
        ema.apply(tv)
    return ema


for case, make in (("seq", seq), ("bare", bare), ("holder", holder)):
    tf.keras.utils.set_random_seed(0)
    m = make()
    fn = m.net if case == "holder" else m
    tv = m.trainable_variables  # the statement: "trainable" (and, here, "tracked" alike)
    ema = train(tv, fn)
    p = tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in tv]).write(
        f"{out}/{case}/ckpt")
    r = tf.train.load_checkpoint(p)
    keys = [k for k in r.get_variable_to_shape_map() if k.startswith("model/")]
    for v in tv:  # checkpoint key (found by its raw value) -> ema.average(v)
        hits = [k for k in keys if np.array_equal(r.get_tensor(k), v.numpy())]
        assert len(hits) == 1, hits
        arrays[f"{case}:{hits[0]}"] = ema.average(v).numpy()
    for order in ("tracked", "trainable"):
        for how in ("object", "wrapped"):
            live = make()
            try:
                ckpt_tools.apply_ema(live if how == "object" else tf.train.Checkpoint(
                    model=live), f"{out}/{case}", apply_order=order)
            except ckpt_tools.EmaError as exc:  # a refusal fails the test, never the script
                arrays[f"refused:{case}:{order}:{how}"] = np.array(str(exc))
            for i, v in enumerate(live.trainable_variables):
                arrays[f"api:{case}:{order}:{how}:{i}"] = v.numpy()
    arrays.update({f"avg:{case}:{i}": ema.average(v).numpy() for i, v in enumerate(tv)})
np.savez(out + "/truth.npz", **arrays)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras_reassigned")
    return out, run_script(SCRIPT, out)


@pytest.mark.parametrize("case", ["seq", "bare", "holder"])
def test_apply_ema_reads_the_live_order_also_through_a_checkpoint(made, case):
    _, truth = made
    n = len([k for k in truth if k.startswith(f"avg:{case}:")])
    assert n == 4
    for order in ("tracked", "trainable"):
        for how in ("object", "wrapped"):
            assert f"refused:{case}:{order}:{how}" not in truth, (order, how)
            for i in range(n):
                got = truth[f"api:{case}:{order}:{how}:{i}"]
                assert got.tobytes() == truth[f"avg:{case}:{i}"].tobytes(), (order, how, i)


@pytest.mark.parametrize("case", ["seq", "bare"])
@pytest.mark.parametrize("order", ["tracked", "trainable"])
def test_a_layers_same_named_sublayers_are_refused(made, tmp_path, case, order):
    """In a tf_keras ``Sequential`` (the file proves a layer) or at the root with Keras-made
    names (``blk/fc/kernel``: may be one), neither stated order can be read from the file."""
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--apply-order", order, "--out",
                            str(target)])
    assert code == 6, err
    line = error_line(err)
    where = "model/layer_with_weights-0" if case == "seq" else "model "
    assert where in line and "re-assigned in build()" in line, line
    assert "in Python pass the live" in line and "apply_order=" in line, line
    assert "pass --apply-order tracked" not in line, line  # never offered where refused
    assert not target.exists()
    code, _, err = run_cli(["map", str(out / case)])
    assert code == 6 and "pass --apply-order tracked" not in error_line(err)


def test_trainable_through_a_subclassed_model_in_a_module_is_refused(made, tmp_path):
    out, _ = made
    code, _, err = run_cli(["export", str(out / "holder"), "--apply-order", "trainable",
                            "--out", str(tmp_path / "w.npz")])
    assert code == 6, err
    line = error_line(err)
    assert "model/net" in line and "subclassed tf_keras model" in line, line
    assert "held by a tf.Module" in line and "apply_order=" in line, line
    assert "[Block(), {'w'" not in err  # not the tf.Module-or-dict cause


def test_a_plain_module_pairs_and_says_what_it_assumes(tmp_path):
    """tf2_object (a tf.Module of plain ``kernel``/``bias`` variables, made by TensorFlow,
    ``ema.apply(model.trainable_variables)``): still paired under ``trainable`` (its values
    are checked in test_fixtures), with a note on stderr and ``keras_layers`` in ``--json``
    naming what a Keras object there would change."""
    from helpers import DECIDE, prefix

    assert DECIDE["tf2_object"] == {"apply_order": "trainable"}
    target = tmp_path / "w.npz"
    code, stdout, err = run_cli(["export", prefix("tf2_object"), "--apply-order", "trainable",
                                 "--out", str(target), "--json"])
    assert code == 0, err
    said = " ".join(err.split())
    assert "reads model as a tf.Module" in said and "re-assigned in build()" in said, err
    assert "apply_ema(tf.train.Checkpoint(model=model)" in said, err
    assert json.loads(stdout)["stated_apply_order"]["keras_layers"] == ["model"]
