"""TF1 with its ``.meta``: EMA ``ema`` over ``w0``, EMA ``ema/fast`` over ``w0``, ``w1``, and a
trained buffer ``w1/ema`` (``m = 0.9 m + g``, a momentum-like variable that happens to be called
``ema``) (review-17-attack-r36 F3, MAJOR). The true ``--ema-name ema`` was refused as "names no
EMA object of this checkpoint", with or without ``--allow-missing``: no way out, although the
update ops prove the object ``ema``. Now ``w1`` is reported without an average of ``ema``'s
(TF: ``ema.average(w1)`` is ``None``) and ``--allow-missing`` keeps it and the buffer raw.

Made by real TensorFlow in a subprocess; truth ``sess.run(o.average(v))`` at save time.
"""

from __future__ import annotations

import numpy as np
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
E = tf1.train.ExponentialMovingAverage
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
step = tf1.assign_add(w0, tf.ones([3, 2]) * 0.7), tf1.assign_add(w1, tf.ones([2]) * 1.3)
objs = {"ema": E(0.9, name="ema"), "ema/fast": E(0.5, name="ema/fast")}
with tf1.variable_scope("w1"):
    mom = tf1.get_variable("ema", initializer=tf.zeros([2]))
with tf.control_dependencies(step):
    m_upd = tf1.assign(mom, 0.9 * mom + tf.ones([2]) * 2.0)
    upd = tf.group(objs["ema"].apply([w0]), objs["ema/fast"].apply([w0, w1]), m_upd)
saver = tf1.train.Saver()
with trained(tf, upd) as s:
    for name, o in objs.items():
        for v in (w0, w1):
            if o.average(v) is not None:
                truth[f"{name}:{v.op.name}"] = s.run(o.average(v))
    for v in tf1.global_variables():
        truth[f"raw:{v.op.name}"] = s.run(v)
    saver.save(s, f"{out}/model.ckpt")
'''


def test_true_ema_name_beside_a_trained_buffer_named_ema(tmp_path):
    truth = run_tf1_script(SCRIPT, tmp_path / "run")
    assert "ema:w1" not in truth and "ema:w0" in truth
    run, dest = tmp_path / "run", tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(run), "--strict", "--ema-name", "ema",
                            "--out", str(dest)])
    assert code == 6 and not dest.exists(), err
    said = " ".join(err.split())
    assert "names no EMA object" not in said and "--allow-missing" in said, said
    code, _, err = run_cli(["export", str(run), "--strict", "--ema-name", "ema",
                            "--allow-missing", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert got["w0"].tobytes() == truth["ema:w0"].tobytes()
        assert got["w1"].tobytes() == truth["raw:w1"].tobytes()
        assert got["w1/ema"].tobytes() == truth["raw:w1/ema"].tobytes()
        assert not np.array_equal(got["w1"], truth["raw:w1/ema"])
