"""TF1 with its ``.meta``: EMA objects ``ema`` and ``slow/ema`` over ``w0``, ``w1``, beside a
variable ``w0/slow`` (a Lookahead-style slow copy): object ``slow/ema``'s average of ``w0`` is
``w0/slow/ema``, the key ``ema`` would give ``w0/slow`` (review-17-attack-r36 F9, MAJOR).

The true ``--ema-name ema`` was refused as "an optimizer keeping a slot by
assign_moving_average", with or without ``--allow-missing``: no way out. ``w0/slow`` not
averaged (trainable=False) keeps its raw value; trainable, it has no average of ``ema``'s
(``ema.average(w0/slow)`` is ``None``): refused naming ``--allow-missing``, which keeps it raw,
never ``slow/ema``'s average of ``w0`` as its own.

Made by real TensorFlow in a subprocess; truth ``sess.run(o.average(v))`` at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
E = tf1.train.ExponentialMovingAverage
trainable = sys.argv[2] == "trainable"
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
step = tf1.assign_add(w0, tf.ones([3, 2]) * 0.7), tf1.assign_add(w1, tf.ones([2]) * 1.3)
with tf1.variable_scope("w0"):
    sv = tf1.get_variable("slow", initializer=tf.zeros([3, 2]), trainable=trainable)
objs = {"ema": E(0.9, name="ema"), "slow/ema": E(0.5, name="slow/ema")}
with tf.control_dependencies(step):
    upd = tf.group(*[o.apply([w0, w1]) for o in objs.values()],
                   tf1.assign(sv, sv * 0.5 + w0 * 0.5))
saver = tf1.train.Saver()
with trained(tf, upd) as s:
    for name, o in objs.items():
        for v in (w0, w1, sv):
            if o.average(v) is not None:
                truth[f"{name}:{v.op.name}"] = s.run(o.average(v))
    for v in tf1.global_variables():
        truth[f"raw:{v.op.name}"] = s.run(v)
    saver.save(s, f"{out}/model.ckpt")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_slow_beside_object")
    return out, {c: run_tf1_script(SCRIPT, out / c, c) for c in ("frozen", "trainable")}


def _check(dest, truth, slow):
    with np.load(dest) as got:
        for n in ("w0", "w1"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
        if slow:
            assert got["w0/slow"].tobytes() == truth["raw:w0/slow"].tobytes()


@pytest.mark.parametrize("extra", [[], ["--allow-missing"]])
def test_true_ema_name_beside_a_slow_variable_takes_emas_averages(made, tmp_path, extra):
    out, truths = made
    truth = truths["frozen"]
    assert "ema:w0/slow" not in truth
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out / "frozen"), "--strict", "--ema-name", "ema",
                            *extra, "--out", str(dest)])
    assert code == 0, err
    _check(dest, truth, slow=False)


def test_trained_slow_variable_has_no_average_of_ema(made, tmp_path):
    out, truths = made
    truth = truths["trainable"]
    assert "ema:w0/slow" not in truth  # ema.apply([w0, w1]) only
    run, dest = out / "trainable", tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(run), "--strict", "--ema-name", "ema",
                            "--out", str(dest)])
    assert code == 6 and not dest.exists(), err
    said = " ".join(err.split())
    assert "w0/slow/ema is no average of w0/slow" in said and "--allow-missing" in said, said
    code, _, err = run_cli(["export", str(run), "--strict", "--ema-name", "ema",
                            "--allow-missing", "--out", str(dest)])
    assert code == 0, err
    _check(dest, truth, slow=True)
    with np.load(dest) as got:
        assert got["w0/slow"].tobytes() != truth["slow/ema:w0"].tobytes()
