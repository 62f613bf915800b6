"""TF1 ``ema.apply([head vars])`` over part of the model, saved with its ``.meta``: the refusal
said the unaveraged variable was "probably frozen (trainable=False ...)" while the ``.meta``
lists it in ``trainable_variables`` (review-14-attack-r25 F4b). It now says what the file
leaves: left out of ``ema.apply()``'s var_list or created after it; a variable made with
``trainable=False`` is still called frozen. Made by real TensorFlow; truth at save time."""

from __future__ import annotations

import numpy as np
from helpers import run_cli


def _run(tf, directory):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        body = v1.get_variable("body/W", [3, 3], initializer=v1.ones_initializer())
        fixed = v1.get_variable("fixed/W", [3, 3], trainable=False)
        head = v1.get_variable("head/W", [3, 3], initializer=v1.ones_initializer())
        loss = tf.reduce_sum(tf.square(tf.ones([1, 3]) @ body @ fixed @ head - 1.0))
        train = v1.train.GradientDescentOptimizer(0.01).minimize(loss)
        ema = tf.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply([head])
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
            v1.train.Saver().save(sess, str(directory / "model.ckpt"))
            return {"head/W": sess.run(ema.average(head)), "body/W": sess.run(body),
                    "fixed/W": sess.run(fixed)}


def test_a_trainable_variable_left_out_is_not_called_frozen(tf, tmp_path):
    truth = _run(tf, tmp_path)
    code, _, err = run_cli(["export", str(tmp_path), "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "body/W" in err and "trainable_variables, so they were not frozen" in err, err
    assert "probably frozen" not in err and "--allow-missing" in err, err
    code, _, err = run_cli(["export", str(tmp_path), "--allow-missing", "--out",
                            str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as z:
        for k, v in truth.items():
            assert z[k].tobytes() == v.tobytes(), k
