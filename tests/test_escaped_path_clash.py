"""Two TF2 objects whose unescaped object paths look alike (a dict key ``"a/b"`` beside
``a`` -> ``b``: checkpoint keys ``net/a.Sb/...`` and ``net/a/b/...``) are shown under different
names by ``list``, each average names its own variable, and ``export`` writes each one's
average. Made here by real TensorFlow; the truth is ``ema.average(v)`` read at save time."""

from __future__ import annotations

import json

import numpy as np
from helpers import run_cli


def _save(tf, tmp_path):
    v1 = tf.Variable(tf.random.normal([3], seed=1), name="p")
    v2 = tf.Variable(tf.random.normal([3], seed=2), name="q")
    ema = tf.train.ExponentialMovingAverage(0.5)
    for _ in range(3):
        v1.assign_add(tf.ones([3]))
        v2.assign_sub(tf.ones([3]))
        ema.apply([v1, v2])
    ck = tf.train.Checkpoint(net={"a/b": v1, "a": {"b": v2}},
                             ema={"p:0": ema.average(v1), "q:0": ema.average(v2)})
    prefix = ck.save(str(tmp_path / "ck" / "ckpt"))
    keys = {n for n, _ in tf.train.list_variables(prefix)}
    assert {"net/a.Sb/.ATTRIBUTES/VARIABLE_VALUE", "net/a/b/.ATTRIBUTES/VARIABLE_VALUE"} <= keys
    return prefix, ema.average(v1).numpy(), ema.average(v2).numpy()


def test_list_tells_escaped_and_nested_paths_apart(tf, tmp_path):
    prefix, _, _ = _save(tf, tmp_path)
    code, out, err = run_cli(["list", prefix])
    assert code == 0, err
    rows = {line.split("\t")[0]: line.split("\t")[-1] for line in out.splitlines()
            if "\t" in line}
    assert rows["net/a.Sb"] == "✓" and rows["net/a/b"] == "✓", out
    assert rows["ema/p:0"] == "of net/a.Sb", out
    assert rows["ema/q:0"] == "of net/a/b", out
    code, out, err = run_cli(["list", "--json", prefix])
    assert code == 0, err
    text = json.dumps(json.loads(out))
    assert "net/a.Sb" in text


def test_export_writes_each_objects_own_average(tf, tmp_path):
    prefix, avg1, avg2 = _save(tf, tmp_path)
    dest = tmp_path / "w.npz"
    code, out, err = run_cli(["export", prefix, "-o", str(dest)])
    assert code == 0, err
    got = np.load(dest)
    assert sorted(got.files) == ["net/a.Sb", "net/a/b"]
    assert np.array_equal(got["net/a.Sb"], avg1)
    assert np.array_equal(got["net/a/b"], avg2)
