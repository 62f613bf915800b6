"""A swapping Saver built wrong: two same-shaped variables whose averages are saved under each
other's names (``{"b": ema.average(c), "c": ema.average(b), ema.average_name(b): b,
ema.average_name(c): c}``). The ``.meta``'s save op proves every key; ``export`` paired it
right, but ``restore-ema`` wrote ``b``'s average under ``b/ExponentialMovingAverage`` and left
key ``b`` holding ``c``'s average, exit 0, so a plain ``Saver()`` restored each variable with
the other's average (review-13-attack-r24 F0). Made by real TensorFlow; the truth is read from
the session at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli

E = "ExponentialMovingAverage"


def _graph(tf, tf1):
    gs = tf1.train.get_or_create_global_step()
    b = tf1.get_variable("b", [2], initializer=tf1.constant_initializer([1.0, 2.0]))
    c = tf1.get_variable("c", [2], initializer=tf1.constant_initializer([-3.0, 5.0]))
    return gs, b, c


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    tf1 = tf.compat.v1
    out = tmp_path_factory.mktemp("crossed")
    with tf.Graph().as_default():
        gs, b, c = _graph(tf, tf1)
        loss = tf.reduce_sum((b - 4.0) ** 2) + tf.reduce_sum((c + 7.0) ** 2)
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply([b, c])
        saver = tf1.train.Saver({"b": ema.average(c), "c": ema.average(b),
                                 ema.average_name(b): b, ema.average_name(c): c,
                                 "global_step": gs})
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
            prefix = saver.save(sess, str(out / "run" / "model.ckpt"), global_step=gs)
            truth = {n: sess.run(ema.average(v).read_value()) for n, v in (("b", b), ("c", c))}
            raw = {n: sess.run(v.read_value()) for n, v in (("b", b), ("c", c))}
    assert not np.array_equal(truth["b"], raw["b"])
    return out, prefix, truth


def test_restore_ema_output_gives_each_variable_its_own_average(made, tf):
    out, _, truth = made
    code, _, err = run_cli(["restore-ema", str(out / "run"), "--out", str(out / "baked")])
    assert code == 0, err
    tf1 = tf.compat.v1
    with tf.Graph().as_default():  # the model graph, as the README's plain Saver() restores it
        _, b, c = _graph(tf, tf1)
        with tf1.Session() as sess:
            tf1.train.Saver().restore(sess, tf.train.latest_checkpoint(str(out / "baked")))
            got = {"b": sess.run(b.read_value()), "c": sess.run(c.read_value())}
    for n in ("b", "c"):
        assert got[n].tobytes() == truth[n].tobytes(), n
    reader = tf.train.load_checkpoint(str(out / "baked"))
    for n in ("b", "c"):  # the graph's own (crossed) Saver reads these keys
        assert reader.get_tensor(f"{n}/{E}").tobytes() == truth[n].tobytes(), n


def test_export_gives_each_variable_its_own_average(made):
    out, _, truth = made
    code, _, err = run_cli(["export", str(out / "run"), "--out", str(out / "w.npz")])
    assert code == 0, err
    with np.load(out / "w.npz") as npz:
        for n in ("b", "c"):
            assert npz[n].tobytes() == truth[n].tobytes(), n
