"""TF1 averages of an ``ExponentialMovingAverage`` named with a slash (``name="ema/slow"``:
``fc/w/ema/slow``) without the ``.meta`` (``--no-meta``; s13g's note on r22 F8). The keys
alone read as weights under an unstored ``fc/w/ema``: every command said "no EMA shadow is
stored at all ... ckpt export --raw", and ``--ema-name ema/slow`` did not pair them either. A
name of several parts is not guessed from the keys: the refusal (exit 6) now names
``--ema-name ema/slow`` (each name, with two objects), and that statement pairs them, bit for
bit against ``ema.average(v)`` read by TensorFlow at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli

NAMES = {"slow": ("ema/slow",), "two": ("ema/fast", "ema/slow")}


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    tf1 = tf.compat.v1
    out = tmp_path_factory.mktemp("tf1_slashed_no_meta")
    truth = {}
    for case, names in NAMES.items():
        with tf.Graph().as_default():
            gs = tf1.train.get_or_create_global_step()
            w = tf1.get_variable("fc/w", [3, 3])
            b = tf1.get_variable("fc/b", [3])
            loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([2, 3]), w) + b))
            opt = (tf1.train.GradientDescentOptimizer(0.05) if case == "slow" else
                   tf1.train.MomentumOptimizer(0.05, 0.9))
            train = opt.minimize(loss, global_step=gs)
            emas = {n: tf1.train.ExponentialMovingAverage(0.3 + 0.5 * (n == "ema/slow"),
                                                          name=n) for n in names}
            with tf.control_dependencies([train]):
                step = tf.group(*[e.apply([w, b]) for e in emas.values()])
            with tf1.Session() as s:
                s.run(tf1.global_variables_initializer())
                for _ in range(3):
                    s.run(step)
                tf1.train.Saver().save(s, str(out / case / "model.ckpt"), global_step=gs)
                for n, e in emas.items():
                    for v in (w, b):
                        truth[f"{case}:{n}:{v.op.name}"] = s.run(e.average(v).read_value())
                for v in (w, b):
                    truth[f"{case}:raw:{v.op.name}"] = s.run(v.read_value())
    return out, truth


@pytest.mark.parametrize("case", sorted(NAMES))
@pytest.mark.parametrize("command", ["export", "restore-ema"])
def test_refusal_names_the_slashed_ema_name(made, tmp_path, case, command):
    out, _ = made
    dest = tmp_path / ("x.npz" if command == "export" else "r")
    code, _, err = run_cli([command, str(out / case), "--no-meta", "--out", str(dest)])
    assert code == 6, err
    for n in NAMES[case]:
        assert f"--ema-name {n}" in err, err
    assert "no EMA shadow is stored at all" not in err and "--raw" not in err, err


@pytest.mark.parametrize("case,name", [("slow", "ema/slow"), ("two", "ema/slow"),
                                       ("two", "ema/fast")])
def test_stated_slashed_name_exports_its_averages(made, tmp_path, tf, case, name):
    out, truth = made
    code, _, err = run_cli(["export", str(out / case), "--no-meta", "--ema-name", name,
                            "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as z:
        got = {k: z[k] for k in z.files}
    assert sorted(got) == ["fc/b", "fc/w"], sorted(got)
    for k, v in got.items():
        want = truth[f"{case}:{name}:{k}"]
        assert v.dtype == want.dtype and v.tobytes() == want.tobytes(), k
        assert v.tobytes() != truth[f"{case}:raw:{k}"].tobytes(), k
    code, _, err = run_cli(["restore-ema", str(out / case), "--no-meta", "--ema-name", name,
                            "--out", str(tmp_path / "r")])
    assert code == 0, err
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "r")))
    for k in ("fc/w", "fc/b"):
        assert reader.get_tensor(k).tobytes() == truth[f"{case}:{name}:{k}"].tobytes(), k
