"""TF1 with its ``.meta``: in a graph that runs ``ema.apply()``, a key no op of the graph writes
is no proven average (review-18-attack-r41 F1, CRITICAL).

A default EMA averages ``w1``; ``w0/ExponentialMovingAverage`` is a variable the user keeps as
``w0``'s gradient moment from Python (``Variable.load()``, which runs the variable's own
initializer with a feed: no writer in the graph). Read by its name alone it was exported as
``w0``'s average, exit 0 under ``--strict``. The graph's ``AssignMovingAvg`` updates say which
keys ``apply()`` keeps; ``w0``'s is not one of them (TF: ``ema.average(w0)`` is ``None``), so
``w0`` is missing its average and ``--allow-missing`` writes it raw. A graph that runs no
``apply()`` at all (an eval graph) keeps the name's reading
(tests/test_tf1_hand_written_shadows.py ``eval``).

Made by real TensorFlow in a subprocess; truth from the session at save time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools

SCRIPT = r'''
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
with tf1.variable_scope("w0"):
    mom = tf1.get_variable("ExponentialMovingAverage", initializer=tf.zeros([3, 2]),
                           trainable=False)
loss = tf.reduce_sum(tf.square(w0 - 1.5)) + tf.reduce_sum(tf.square(w1 + 2.0))
g0 = tf.gradients(loss, [w0])[0]
train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
ema = tf1.train.ExponentialMovingAverage(0.9)
with tf.control_dependencies([train]):
    upd = ema.apply([w1])
saver = tf1.train.Saver()
with tf1.Session() as s:
    s.run(tf1.global_variables_initializer())
    m = np.zeros([3, 2], np.float32)
    for _ in range(4):
        g = s.run(g0)
        s.run(upd)
        m = 0.9 * m + 0.1 * g
        mom.load(m, s)
    truth["ema:w1"] = s.run(ema.average(w1))
    truth["none:w0"] = np.asarray(ema.average(w0) is None)
    for v in tf1.global_variables():
        truth[f"raw:{v.op.name}"] = s.run(v)
    saver.save(s, f"{out}/model.ckpt")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_unwritten") / "load"
    return out, run_tf1_script(SCRIPT, out)


def test_a_key_no_update_op_writes_is_no_average_where_the_graph_runs_apply(made, tmp_path):
    run, truth = made
    key, dest = "w0/ExponentialMovingAverage", tmp_path / "x.npz"
    assert bool(truth["none:w0"])  # TF: ema.average(w0) is None
    assert truth[f"raw:{key}"].tobytes() != truth["raw:w0"].tobytes()
    for stated in ([], ["--ema-name", "ExponentialMovingAverage"]):
        code, _, err = run_cli(["export", str(run), "--strict", *stated, "--out", str(dest)])
        assert code == 6, (stated, err)
        assert f"{key} is no proven average of w0" in err and "no op of it writes" in err, err
        assert "--allow-missing" in err and "--no-meta" not in err, err
        assert not dest.exists()
        code, _, err = run_cli(["map", str(run), *stated])
        assert code == 6, err
        code, _, err = run_cli(["export", str(run), "--strict", *stated, "--allow-missing",
                                "--out", str(dest)])
        assert code == 0, err
        with np.load(dest) as got:
            assert got["w0"].tobytes() == truth["raw:w0"].tobytes()
            assert got["w1"].tobytes() == truth["ema:w1"].tobytes()
        dest.unlink()
    code, text, err = run_cli(["list", str(run), "--json"])
    assert code == 0, err
    roles = {v["name"]: (v["role"], v["ema_of"]) for v in json.loads(text)["variables"]}
    assert roles[key] != ("ema", "w0") and roles["w1/ExponentialMovingAverage"] == ("ema", "w1")
    m = ckpt_tools.ema_map(str(run), ema_name="ExponentialMovingAverage")
    assert m.missing == ("w0",) and m.mapping.get(key) != "w0", m
