"""review-26-attack-r92 F5: an object ``fast`` over w, b and a trained, unaveraged variable
literally named ``c/fast`` beside ``c`` (plain Saver): the default export, given no
--ema-name, was refused saying "--ema-name fast names no EMA object", though none was stated
and fast wrote w/fast, b/fast. The refusal stays (exit 6); it now says the name was read,
not stated, and offers --ema-name fast, which with --allow-missing exports w, b averages and
c, c/fast raw, bit for bit. Made by real TensorFlow (tf.compat.v1 graph mode)."""

from __future__ import annotations

import numpy as np
from helpers import run_cli


def test_a_trained_variable_named_as_a_shadow_is_told_truthfully(tf, tmp_path):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        gs = v1.train.get_or_create_global_step()
        vs = {n: v1.get_variable(n, s) for n, s in (("w", [4, 3]), ("b", [3]), ("c", [3]),
                                                    ("c/fast", [3]))}
        h = tf.matmul(tf.ones((2, 4)), vs["w"]) + vs["b"] + 2.0 * vs["c"] + 3.0 * vs["c/fast"]
        step = v1.train.GradientDescentOptimizer(0.01).minimize(tf.reduce_sum(h ** 2),
                                                                global_step=gs)
        ema = v1.train.ExponentialMovingAverage(0.5, name="fast")
        with tf.control_dependencies([step]):
            step = ema.apply([vs["w"], vs["b"]])
        saver = v1.train.Saver()
        with v1.Session() as s:
            s.run(v1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            prefix = saver.save(s, str(tmp_path / "model.ckpt"), global_step=gs)
            truth = {n: s.run(ema.average(vs[n])) for n in "wb"}
            truth.update({n: s.run(vs[n]) for n in ("c", "c/fast")})
    out = tmp_path / "o.npz"
    code, _, err = run_cli(["export", prefix, "--out", str(out)])
    err = " ".join(err.split())
    assert code == 6 and not out.exists(), err
    assert "names no EMA object" not in err and "no --ema-name was given" in err, err
    assert "--ema-name fast" in err and "c/fast is a variable the graph trains" in err, err
    code, _, err = run_cli(["export", prefix, "--out", str(out), "--ema-name", "fast",
                            "--allow-missing"])
    assert code == 0, err
    with np.load(out) as z:
        assert sorted(z.files) == ["b", "c", "c/fast", "w"], z.files
        for n, v in truth.items():
            assert z[n].tobytes() == v.tobytes(), n
