"""The scope hint of ``restore_ema``/``ema_saver`` refusals, and following it literally
(review-17-user-u19 F3, F12): a graph imported under a nested ``import_scope`` (``eval/m``)
is told ``add_scope="eval/m/"``, one rebuilt under ``model/`` in place of the training ``net/``
``strip_scope="net/", add_scope="model/"``, one rebuilt without the scope
``strip_scope="net/"`` (and its top-level ``global_step``, stored as ``global_step``, restores
under it, as ``ckpt map --strip-scope net/`` maps it); Savers whose keys are not their
variables' names (a swapping Saver, ``{"model/" + name: v}``) get the hint too, through their
save op. ``ema_saver``'s refusal names the checkpoint. Every hint is followed here: every
variable then holds its ``ema.average(v)`` (or ``global_step`` its value), as
``sess.run`` recorded them at save time."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import EmaError

SCRIPT = r'''
# each Saver in its own graph, as a user's run has it (a graph holding all three would have
# Savers writing the same keys from different variables, refused by design: eae3ffd); a
# graph-level seed gives every graph the same variables and values
for case in ("plain", "swap", "prefix"):
    with tf.Graph().as_default():
        tf1.set_random_seed(7)
        gs = tf1.train.get_or_create_global_step()
        with tf1.variable_scope("net"):
            w = tf1.get_variable("w", [3, 2])
            b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer())
        loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([4, 3]), w) + b - 1.0))
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply(tf1.trainable_variables())
        tv = tf1.trainable_variables()
        if case == "plain":
            saver = tf1.train.Saver()
        elif case == "swap":
            swap = {v.op.name: ema.average(v) for v in tv}
            swap.update({ema.average_name(v): v for v in tv})
            swap["global_step"] = gs
            saver = tf1.train.Saver(swap)
        else:
            saver = tf1.train.Saver({"model/" + v.op.name: v for v in tf1.global_variables()})
        with trained(tf, step) as s:
            saver.save(s, f"{out}/{case}/model.ckpt")
            for v in tv:
                truth[f"{case}:{v.op.name}"] = s.run(ema.average(v))
            truth[f"{case}:global_step"] = s.run(gs)
'''

NAMES = ("net/w", "net/b")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Returns ``(out, truth)``: ``truth[case]`` maps each of :data:`NAMES` to
    ``sess.run(ema.average(v))`` and ``global_step`` to its value, as case's graph saved them."""
    out = tmp_path_factory.mktemp("restore_scope_hints")
    recorded = run_tf1_script(SCRIPT, out)
    truth = {case: {name: recorded[f"{case}:{name}"] for name in NAMES + ("global_step",)}
             for case in ("plain", "swap", "prefix")}
    for name, value in truth["plain"].items():  # one model, three Savers
        assert all(truth[c][name].tobytes() == value.tobytes() for c in truth), name
    return str(out), truth


def _check(tf, sess, truth, rename):
    got = {v.op.name: v for v in tf.compat.v1.global_variables()}
    for name in NAMES + ("global_step",):
        if rename(name) in got:
            assert np.array_equal(sess.run(got[rename(name)]), truth[name]), name
        else:
            assert name == "global_step"


def _refused_then_followed(tf, prefix, truth, build, hint, rename):
    """Both helpers refuse naming ``hint`` (ema_saver's message naming the checkpoint), and
    both, given the options the hint names, restore every average."""
    v1 = tf.compat.v1
    options = dict((k, v.strip('"')) for k, v in (o.split("=") for o in hint.split(", ")))
    with tf.Graph().as_default():
        build()
        with v1.Session() as sess:
            with pytest.raises(EmaError, match=re.escape(f"pass {hint} if")):
                ckpt_tools.restore_ema(sess, prefix)
            ckpt_tools.restore_ema(sess, prefix, **options)
            _check(tf, sess, truth, rename)
        with pytest.raises(EmaError, match=re.escape(prefix) + ": .*" + re.escape(
                f"pass {hint} if")):
            ckpt_tools.ema_saver(checkpoint=prefix)
        saver = ckpt_tools.ema_saver(checkpoint=prefix, **options)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            saver.restore(sess, prefix)
            _check(tf, sess, truth, rename)


@pytest.mark.parametrize("case", ["plain", "swap", "prefix"])
@pytest.mark.parametrize("scope", ["m", "eval/m"])
def test_a_graph_imported_under_a_scope(made, tf, case, scope):
    out, truth = made
    prefix = f"{out}/{case}/model.ckpt"

    def build():
        tf.compat.v1.train.import_meta_graph(prefix + ".meta", import_scope=scope)

    _refused_then_followed(tf, prefix, truth[case], build, f'add_scope="{scope}/"',
                           lambda n: f"{scope}/{n}")


def _rebuilt(tf, scope):
    def build():
        v1 = tf.compat.v1
        v1.train.get_or_create_global_step()
        with v1.variable_scope(scope or v1.get_variable_scope()):
            v1.get_variable("w", [3, 2])
            v1.get_variable("b", [2])
    return build


def test_a_graph_rebuilt_under_another_scope(made, tf):
    out, truth = made
    _refused_then_followed(tf, f"{out}/plain/model.ckpt", truth["plain"],
                           _rebuilt(tf, "model"),
                           'strip_scope="net/", add_scope="model/"',
                           lambda n: n.replace("net/", "model/"))


def test_a_graph_rebuilt_without_the_scope_keeps_its_global_step(made, tf):
    out, truth = made
    prefix = f"{out}/plain/model.ckpt"
    with tf.Graph().as_default():
        _rebuilt(tf, None)()
        with tf.compat.v1.Session() as sess, pytest.raises(
                EmaError, match=re.escape('pass strip_scope="net/" if the graph was rebuilt '
                                          "without it")):
            ckpt_tools.restore_ema(sess, prefix)
    _refused_then_followed(tf, prefix, truth["plain"], _rebuilt(tf, None), 'strip_scope="net/"',
                           lambda n: n.removeprefix("net/"))
