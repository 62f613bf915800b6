"""``ema_saver`` / ``restore_ema`` with ``add_scope=`` in a graph imported from the training
``.meta`` under ``import_scope``: a variable the EMA never averaged is refused as it is without
the scope (review-17-attack-r36 F4). ``ema_saver`` returned a Saver whose ``restore`` died in
TensorFlow (``Key b/ExponentialMovingAverage not found in checkpoint``): the missing shadow
was looked up under the graph's scoped name. With ``allow_missing=True`` that variable restores
its raw value. Truth: ``sess.run(ema.average(w))`` and ``sess.run(b)`` recorded by TensorFlow
at save time."""

from __future__ import annotations

import pytest
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import EmaError

SCRIPT = r'''
with tf.Graph().as_default():
    w = tf1.get_variable("w", [3], initializer=tf1.ones_initializer())
    b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer())
    loss = tf.reduce_sum(tf.square(w - 3.0)) + tf.reduce_sum(tf.square(b + 1.0))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        step = ema.apply([w])  # b is trained but never averaged
    with trained(tf, step) as s:
        tf1.train.Saver().save(s, f"{out}/model.ckpt")
        truth["w"] = s.run(ema.average(w))
        truth["b"] = s.run(b)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("ema_saver_scope_missing")
    return str(out / "model.ckpt"), run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("scope", [None, "eval"])
def test_a_variable_without_a_shadow_is_refused(made, tf, scope):
    prefix, _ = made
    v1 = tf.compat.v1
    kw = {"add_scope": f"{scope}/"} if scope else {}
    with tf.Graph().as_default():
        v1.train.import_meta_graph(prefix + ".meta", import_scope=scope)
        with pytest.raises(EmaError, match=r"b \(no shadow b/ExponentialMovingAverage\).*"
                                           "allow_missing=True"):
            ckpt_tools.ema_saver(checkpoint=prefix, **kw)
        with v1.Session() as sess, pytest.raises(EmaError, match="allow_missing=True"):
            ckpt_tools.restore_ema(sess, prefix, **kw)


def test_allow_missing_restores_its_raw_value(made, tf):
    prefix, truth = made
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.train.import_meta_graph(prefix + ".meta", import_scope="eval")
        by_name = {v.op.name: v for v in v1.global_variables()}
        saver = ckpt_tools.ema_saver(checkpoint=prefix, add_scope="eval/", allow_missing=True)
        with v1.Session() as sess:
            saver.restore(sess, prefix)
            for name in ("w", "b"):
                got = sess.run(by_name[f"eval/{name}"])
                assert got.tobytes() == truth[name].tobytes(), name
        with v1.Session() as sess:
            ckpt_tools.restore_ema(sess, prefix, add_scope="eval/", allow_missing=True)
            for name in ("w", "b"):
                got = sess.run(by_name[f"eval/{name}"])
                assert got.tobytes() == truth[name].tobytes(), name
