"""``ckpt average`` over the run of a renaming TF1 Saver: ``Saver({v.op.name + "/var": v})``
(suffix) or ``Saver({"model/" + v.op.name: v})`` (prefix) of every global variable, with a
partitioned ``w`` (its parts saved each under a key of its own), Adam and ``ema.apply()``.
The ``.meta``'s save op says which variable each key holds: ``w/part_N/ExponentialMovingAverage
/var`` is the shadow of ``w/part_N`` and is averaged by ``--ema`` (review-25-attack-r84 F2: it
was read as a weight and copied from the newest, exit 0), and ``beta1_power/var`` is Adam's
non-trainable power, copied from the newest as for a plain Saver (r84 F1: it was averaged).
Truth: the session's values at each save (``ema.average(v)``, the variables), made here by
TensorFlow (a subprocess)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, run_script

SAVES = 3

SCRIPT = r'''
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {}
for case, name in (("sfx", lambda n: n + "/var"), ("pfx", lambda n: "model/" + n),
                   ("mix", lambda n: n + "/var")):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        x = tf.constant(np.random.RandomState(0).rand(4, 4).astype("float32"))
        w = tf1.get_variable("w", [4, 3], partitioner=tf1.fixed_size_partitioner(2))
        b = tf1.get_variable("b", [3])
        loss = tf.reduce_sum((tf.matmul(x, w) + b) ** 2)
        train = tf1.train.AdamOptimizer(0.01).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply(tf1.trainable_variables())
        # mix: w's parts' shadows without w's raw parts (nor their slots)
        kept = [v for v in tf1.global_variables() if case != "mix" or not
                v.op.name.startswith("w/") or v.op.name.endswith("ExponentialMovingAverage")]
        saver = tf1.train.Saver({name(v.op.name): v for v in kept})
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for i in range(SAVES):
                s.run(step)
                saver.save(s, f"{out}/{case}/model.ckpt", global_step=i + 1)
                for v in kept:
                    truth[f"{case}:{i}:{name(v.op.name)}"] = s.run(v)
                for v in tf1.trainable_variables():
                    truth[f"{case}:{i}:ema:{v.op.name}"] = s.run(ema.average(v))
np.savez(f"{out}/truth.npz", **truth)
'''.replace("SAVES", str(SAVES))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("avg_renamed")
    return out, run_script(SCRIPT, out)


def _mean(values: list[np.ndarray]) -> np.ndarray:
    return np.mean(np.stack(values).astype(np.float64), axis=0).astype(values[-1].dtype)


NAME = {"sfx": lambda n: n + "/var", "pfx": lambda n: "model/" + n}
PARTS = ("w/part_0", "w/part_1", "b")


@pytest.mark.parametrize("case", sorted(NAME))
def test_ema_average_averages_every_parts_shadow(made, tmp_path, tf, case):
    out, truth = made
    code, stdout, err = run_cli(["average", str(out / case), "--last", str(SAVES), "--ema",
                                 "--out", str(tmp_path / "avg"), "--json"])
    assert code == 0, err
    result = json.loads(stdout)
    reader = tf.train.load_checkpoint(result["output"])
    for v in PARTS:
        key = NAME[case](v + "/ExponentialMovingAverage")
        values = [truth[f"{case}:{i}:ema:{v}"] for i in range(SAVES)]
        assert not np.array_equal(values[0], values[-1]), key  # training moved it
        assert np.array_equal(reader.get_tensor(key), _mean(values)), key
        assert key in result["averaged"], key
    assert len(result["averaged"]) == len(PARTS)
    code, stdout, err = run_cli(["list", str(out / case), "--json"])
    assert code == 0, err
    roles = {v["name"]: v["role"] for v in json.loads(stdout)["variables"]}
    for v in PARTS:
        assert roles[NAME[case](v)] == "weight"
        assert roles[NAME[case](v + "/ExponentialMovingAverage")] == "ema"
        assert roles[NAME[case](v + "/Adam")] == roles[NAME[case](v + "/Adam_1")] \
            == "optimizer_slot"


@pytest.mark.parametrize("case", sorted(NAME))
def test_adams_powers_are_copied_from_the_newest(made, tmp_path, tf, case):
    out, truth = made
    code, stdout, err = run_cli(["average", str(out / case), "--last", str(SAVES),
                                 "--out", str(tmp_path / "avg"), "--json"])
    assert code == 0, err
    result = json.loads(stdout)
    reader = tf.train.load_checkpoint(result["output"])
    keys = sorted({k.split(":", 2)[2] for k in truth if k.startswith(f"{case}:0:")
                   and ":ema:" not in k})
    state = {NAME[case](n) for n in ("beta1_power", "beta2_power", "global_step")}
    assert state <= set(keys)
    for key in keys:
        values = [truth[f"{case}:{i}:{key}"] for i in range(SAVES)]
        assert not np.array_equal(values[0], values[-1]), key  # training moved it
        if key in state:
            assert np.array_equal(reader.get_tensor(key), values[-1]), key
            assert key in result["copied"], key
        else:
            assert np.array_equal(reader.get_tensor(key), _mean(values)), key
            assert key in result["averaged"], key


def test_ema_average_refuses_shadows_it_cannot_read_as_shadows(made, tmp_path):
    """The hostile twin of r84 F2: w's parts' shadows saved without w's raw parts (b saved raw
    and averaged) are not read as shadows (no raw value beside them); --ema refuses rather
    than average b's shadow alone and copy w's from the newest (exit 0 before)."""
    out, _ = made
    code, _, err = run_cli(["average", str(out / "mix"), "--last", str(SAVES), "--ema",
                            "--out", str(tmp_path / "avg")])
    assert code == 6, err
    assert "w/part_0/ExponentialMovingAverage/var" in err and "leave out --ema" in err
    assert not (tmp_path / "avg").exists()
