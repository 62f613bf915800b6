"""A zero-debiased average of a TENSOR without the ``.meta`` (review-13-attack-r22 F4).

``ExponentialMovingAverage(zero_debias=True).apply(trainable_variables() + [loss])`` where the
loss is an unnamed ``add`` tensor stores ``add/ExponentialMovingAverage`` beside
``.../biased`` and ``.../local_step``. TF zero-debiases only tensors' averages, never a
variable's, so those siblings prove a tensor's average (no model weight). Without the ``.meta``
it was taken for the average of an unsaved variable ``add``: every command refused, and
``--averages-only`` exported a junk weight ``add``. Made here by TensorFlow, the truth read
from the session at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_tensor_debias")
    tf1 = tf.compat.v1
    truth = {}
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        w = tf1.get_variable("w", [4, 2])
        b = tf1.get_variable("b", [2])
        x = tf.constant(np.arange(8, dtype="float32").reshape(2, 4))
        loss = tf.reduce_sum(tf.square(tf.matmul(x, w))) * 1e-2 + tf.reduce_sum(tf.square(b))
        assert loss.op.name == "add"
        step = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.7, num_updates=gs, zero_debias=True)
        with tf.control_dependencies([step]):
            train_op = ema.apply([w, b, loss])
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(train_op)
            tf1.train.Saver().save(s, str(out / "model.ckpt"), global_step=gs,
                                   write_meta_graph=False)
            for v in (w, b):
                truth[f"ema:{v.op.name}"] = s.run(ema.average(v).read_value())
                truth[f"raw:{v.op.name}"] = s.run(v.read_value())
    return out, truth


def test_tensor_average_is_no_weight(made):
    out, _ = made
    code, text, err = run_cli(["list", "--json", str(out)])
    assert code == 0, err
    roles = {v["name"]: v["role"] for v in json.loads(text)["variables"]}
    assert roles["add/ExponentialMovingAverage"] == "loss_average"
    assert "add" not in roles


@pytest.mark.parametrize("extra", [[], ["--averages-only"]], ids=["plain", "averages-only"])
def test_export_writes_the_weights_averages_only(made, tmp_path, extra):
    out, truth = made
    dest = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out), *extra, "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as z:
        assert sorted(z.files) == ["b", "w"]  # no junk weight "add"
        for n in ("w", "b"):
            assert z[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(out), "--out", str(baked)])
    assert code == 0, err
    import ckpt_tools
    with ckpt_tools.open_checkpoint(str(baked)) as ckpt:
        for n in ("w", "b"):
            assert ckpt.tensor(n).tobytes() == truth[f"ema:{n}"].tobytes(), n
