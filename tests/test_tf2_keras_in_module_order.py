"""Same-named tf_keras layers (blocks each holding a Dense ``fc``) under a stated
``--apply-order``. ``tf.Module.trainable_variables`` of a trainer holding a tf_keras
functional model walks the model's Python attributes (``_output_layers`` first), which the
checkpoint does not record: ``--apply-order trainable`` is refused there (exit 6) naming the
live-module way, never paired in a guessed order (was: every average on another block, exit
0); ``apply_ema(trainer, path, apply_order="trainable")`` with the live trainer pairs bit for
bit, also as ``tf.train.Checkpoint(model=trainer)``. Keras' ``model.trainable_variables`` of
a tf_keras functional or Sequential model is its layers' order, which the graph records as
``layer-N``: ``--apply-order tracked`` pairs a twelve-block model bit for bit (was: refused,
``layer_with_weights-10`` read as a dict key sorting before ``-2``) and ``trainable`` is
refused naming ``tracked``. Truth: ``ema.average(v)`` recorded at save by real
tf_keras/TensorFlow in a subprocess."""

from __future__ import annotations

import numpy as np
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


def blk(i):
    return K.Sequential([K.Input((4,)), K.layers.Dense(4, name="fc", activation="tanh")],
                        name=f"b{i}")


def functional(n):
    inp = K.Input((4,))
    x = inp
    for i in range(n):
        x = blk(i)(x)
    return K.Model(inp, x)


class Trainer(tf.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net


def record(prefix, tv, ema, tag):
    """checkpoint key of each variable (found by its raw value) -> ema.average(v)"""
    r = tf.train.load_checkpoint(prefix)
    keys = [k for k in r.get_variable_to_shape_map() if "ExponentialMovingAverage" not in k
            and k.endswith("VARIABLE_VALUE") and "/ema/" not in "/" + k]
    for v in tv:
        hits = [k for k in keys if np.array_equal(r.get_tensor(k), v.numpy())]
        assert len(hits) == 1, hits
        arrays[f"{tag}:{hits[0]}"] = ema.average(v).numpy()


def train(tv, net):
    ema = tf.train.ExponentialMovingAverage(0.5)
    opt = K.optimizers.SGD(0.05)
    for _ in range(3):
        x = tf.random.normal((8, 4))
        with tf.GradientTape() as t:
            loss = tf.reduce_mean((net(x) - x) ** 2)
        opt.apply_gradients(zip(t.gradient(loss, tv), tv))
        ema.apply(tv)
    return ema


tf.keras.utils.set_random_seed(0)
trainer = Trainer(functional(3))
tv = trainer.trainable_variables  # tf.Module's order: the model's _output_layers first
ema = train(tv, trainer.net)
p = tf.train.Checkpoint(model=trainer, ema=[ema.average(v) for v in tv]).write(out + "/holder/ckpt")
record(p, tv, ema, "holder")
live = Trainer(functional(3))
ckpt_tools.apply_ema(live, out + "/holder", apply_order="trainable")
arrays.update({f"live:{i}": v.numpy() for i, v in enumerate(live.trainable_variables)})
arrays.update({f"avg:{i}": ema.average(v).numpy() for i, v in enumerate(tv)})
wrapped = Trainer(functional(3))
try:  # the trainer inside the checkpoint it was saved as: its own order, as above
    ckpt_tools.apply_ema(tf.train.Checkpoint(model=wrapped), out + "/holder",
                         apply_order="trainable")
    arrays["via_checkpoint"] = np.array("restored")
except ckpt_tools.EmaError as exc:
    arrays["via_checkpoint"] = np.array(str(exc))
arrays.update({f"wrapped:{i}": v.numpy() for i, v in enumerate(wrapped.trainable_variables)})

for kind in ("func", "seq"):
    net = functional(12) if kind == "func" else K.Sequential(
        [K.Input((4,))] + [blk(i) for i in range(12)])
    tv = net.trainable_variables  # Keras' order: the layers' order
    ema = train(tv, net)
    p = tf.train.Checkpoint(model=net, ema=[ema.average(v) for v in tv]).write(
        f"{out}/{kind}/ckpt")
    record(p, tv, ema, kind)
np.savez(out + "/truth.npz", **arrays)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras_in_module")
    return out, run_script(SCRIPT, out)


def test_trainable_through_a_keras_model_in_a_module_is_refused(made, tmp_path):
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "holder"), "--apply-order", "trainable",
                            "--out", str(target)])
    assert code == 6, err
    line = error_line(err)
    assert str(out / "holder") in line and "model/net" in line, line
    assert "_output_layers" in line and "apply_order='trainable'" in line, line
    assert not target.exists()
    code, _, err = run_cli(["map", str(out / "holder")])
    assert code == 6, err
    line = error_line(err)  # no longer offers --apply-order trainable as a way out
    assert "pass --apply-order trainable" not in line and "apply_order='trainable'" in line


def test_the_live_trainer_pairs_also_inside_a_checkpoint_wrapper(made):
    """``apply_ema(tf.train.Checkpoint(model=trainer), ...)`` reads the trainer's own order
    (was: refused; see also test_tf2_keras_reassigned_order)."""
    _, truth = made
    n = len([k for k in truth if k.startswith("avg:")])
    assert n == 6
    assert str(truth["via_checkpoint"]) == "restored", str(truth["via_checkpoint"])
    for i in range(n):
        assert truth[f"live:{i}"].tobytes() == truth[f"avg:{i}"].tobytes(), i
        assert truth[f"wrapped:{i}"].tobytes() == truth[f"avg:{i}"].tobytes(), i


@pytest.mark.parametrize("kind", ["func", "seq"])
def test_tracked_is_the_tf_keras_layers_order(made, tmp_path, kind):
    out, truth = made
    want = {k.split(":", 1)[1]: v for k, v in truth.items() if k.startswith(kind + ":")}
    assert len(want) == 24
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / kind), "--apply-order", "tracked", "--out",
                            str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for key, value in want.items():
            name = key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")
            assert z[name].tobytes() == value.tobytes(), name
    code, _, err = run_cli(["export", str(out / kind), "--apply-order", "trainable", "--out",
                            str(tmp_path / "t.npz")])
    assert code == 6, err
    assert "pass --apply-order tracked" in error_line(err)
