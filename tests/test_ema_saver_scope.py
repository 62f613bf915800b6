"""``ema_saver(strip_scope=, add_scope=)``: the Saver for a graph whose names are the
checkpoint's under another scope, as :func:`restore_ema` already takes them -- a graph imported
with ``import_meta_graph(meta, import_scope="eval")`` (``eval/tower_0/w`` reads
``tower_0/w/ExponentialMovingAverage``), or one rebuilt without the training scope
(``w`` reads ``tower_0/w/...``). Every model variable must end up holding its average, never
a shadow's key mapped onto the shadow variable itself. Truth: ``sess.run(ema.average(v))``
recorded by TensorFlow at save time, bit for bit."""

from __future__ import annotations

import pytest
from helpers import FIXTURES
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import EmaError

SCRIPT = r'''
with tf.Graph().as_default():
    gs = tf1.train.get_or_create_global_step()
    with tf1.variable_scope("tower_0"):
        w = tf1.get_variable("w", [3], initializer=tf1.ones_initializer())
        b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer())
    loss = tf.reduce_sum(tf.square(w - 3.0)) + tf.reduce_sum(tf.square(b + 1.0))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        step = ema.apply([w, b])
    with trained(tf, step) as s:
        tf1.train.Saver().save(s, f"{out}/model.ckpt")
        for v in (w, b):
            truth[v.op.name] = s.run(ema.average(v))
        truth["global_step"] = s.run(gs)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("ema_saver_scope")
    return str(out / "model.ckpt"), run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("with_checkpoint", [True, False], ids=["checkpoint", "names"])
def test_graph_imported_under_a_scope(made, tf, with_checkpoint):
    prefix, truth = made
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.train.import_meta_graph(prefix + ".meta", import_scope="eval")
        kw = {"checkpoint": prefix} if with_checkpoint else {}
        saver = ckpt_tools.ema_saver(add_scope="eval/", **kw)
        by_name = {v.op.name: v for v in v1.global_variables()}
        with v1.Session() as sess:
            saver.restore(sess, prefix)
            for var, value in truth.items():
                assert sess.run(by_name[f"eval/{var}"]).tobytes() == value.tobytes(), var
        if with_checkpoint:  # restore_ema in the same graph: the shadows read their own keys
            with v1.Session() as sess:
                ckpt_tools.restore_ema(sess, prefix, add_scope="eval/")
                for var, value in truth.items():
                    assert sess.run(by_name[f"eval/{var}"]).tobytes() == value.tobytes(), var


def test_graph_rebuilt_without_the_training_scope(made, tf):
    prefix, truth = made
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        made_vars = {n: v1.get_variable(n, truth[f"tower_0/{n}"].shape) for n in ("w", "b")}
        for kw in ({"checkpoint": prefix}, {}):
            saver = ckpt_tools.ema_saver(list(made_vars.values()), strip_scope="tower_0/", **kw)
            with v1.Session() as sess:
                saver.restore(sess, prefix)
                for n, var in made_vars.items():
                    got = sess.run(var)
                    assert got.tobytes() == truth[f"tower_0/{n}"].tobytes(), (kw, n)


def test_without_the_scope_it_is_refused(made, tf):
    prefix, _ = made
    with tf.Graph().as_default():
        tf.compat.v1.train.import_meta_graph(prefix + ".meta", import_scope="eval")
        with pytest.raises(EmaError, match="not in the checkpoint"):
            ckpt_tools.ema_saver(checkpoint=prefix)


def test_refusal_names_the_scope_of_an_imported_graph(made, tf):
    """Imported under ``import_scope="m"`` without ``add_scope``: every variable is ``m/`` + a
    stored key, so the refusal names ``add_scope="m/"`` (review-16-attack-r32 F5), and the
    option it names restores the averages."""
    prefix, truth = made
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.train.import_meta_graph(prefix + ".meta", import_scope="m")
        with pytest.raises(EmaError, match='pass add_scope="m/"'):
            ckpt_tools.ema_saver(checkpoint=prefix)
        with v1.Session() as sess, pytest.raises(EmaError, match='pass add_scope="m/"'):
            ckpt_tools.restore_ema(sess, prefix)


def test_refusal_names_the_scope_a_rebuilt_graph_lacks(made, tf):
    """A graph rebuilt without the training scope ``tower_0``: ``strip_scope="tower_0/"``."""
    prefix, truth = made
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("w", [3])
        v1.get_variable("b", [2])
        with pytest.raises(EmaError, match='pass strip_scope="tower_0/"'):
            ckpt_tools.ema_saver(checkpoint=prefix)
        saver = ckpt_tools.ema_saver(checkpoint=prefix, strip_scope="tower_0/")
        with v1.Session() as sess:
            saver.restore(sess, prefix)
            assert sess.run(w).tobytes() == truth["tower_0/w"].tobytes()


def test_a_graph_without_variables_is_refused(made, tf):
    """Before the model is built nothing can be restored: say so, never return an empty
    result as if the averages were in (review-16-attack-r32 F6)."""
    prefix, _ = made
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        with v1.Session() as sess, pytest.raises(EmaError, match="no variables to restore"):
            ckpt_tools.restore_ema(sess, prefix)
        with pytest.raises(EmaError, match="no variables to restore"):
            ckpt_tools.ema_saver(checkpoint=prefix)


def test_a_keras_file_in_a_graph_points_at_apply_ema(tf):
    """A Keras weights file restored into a TF1 graph: the refusal says where it goes."""
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.get_variable("hid/kernel", [4, 5])
        with v1.Session() as sess, pytest.raises(EmaError, match=r"apply_ema\(model, path\)"):
            ckpt_tools.restore_ema(sess, str(FIXTURES / "keras_ema" / "model.keras"),
                                   not_swapped=True)
