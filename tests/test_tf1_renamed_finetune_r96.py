"""Renamed-Saver fine-tunes of review-27-attack-r96: a fine-tune that loaded a training run's
averages, trained, and saved with ``Saver({"model/" + k: v for k, v in
ExponentialMovingAverage(0.5).variables_to_restore().items()})`` (a fresh default object's
vtr, so ``model/<v>/ExponentialMovingAverage`` holds ``<v>``'s fine-tuned RAW value):

* ``part_init`` (F1): ``fc/w`` partitioned in two, the averages loaded by
  ``init_from_checkpoint``; ``--raw`` named ``--raw --keys-are-raw``, which said "no such key";
* ``named_own`` (F2): the fine-tune's own ``ema.apply()`` under ``name="ema_slow"``; the same;
* ``two_own`` (F3): two own objects (default-named and ``ema_slow``); ``--ema-name ema_slow``
  called the default object's averages of ``fc/b``, ``fc/w`` "averages of tensors" that
  ``--tensor-averages`` would export (it does not).

Made here by TensorFlow (a subprocess), the truth read from the session at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import raw_bytes, run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''


def model(part):
    x = tf1.placeholder_with_default(
        tf.constant(np.arange(8, dtype=np.float32).reshape(2, 4) / 7), [None, 4], name="x")
    w = tf1.get_variable("fc/w", [4, 4], initializer=tf1.random_normal_initializer(seed=1),
                         partitioner=tf1.fixed_size_partitioner(2) if part else None)
    b = tf1.get_variable("fc/b", [4], initializer=tf1.random_normal_initializer(seed=3))
    vs = (list(w) if part else [w]) + [b]
    return vs, tf.reduce_mean(tf.square(tf.matmul(x, w) + b))


src = {}
for part in (True, False):  # the training runs: ema.apply() and Saver()
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        vs, loss = model(part)
        step = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5, num_updates=gs)
        with tf.control_dependencies([step]):
            op = ema.apply(vs)
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(op)
            tf1.train.Saver().save(s, f"{out}/train{int(part)}/model.ckpt", global_step=gs)
            for v in vs:
                truth[f"train{int(part)}:ema:{v.op.name}"] = s.run(ema.average(v).read_value())
    src[part] = tf.train.latest_checkpoint(f"{out}/train{int(part)}")
for kind in ("part_init", "named_own", "two_own"):
    part = kind == "part_init"
    with tf.Graph().as_default():  # the fine-tune
        gs = tf1.train.get_or_create_global_step()
        vs, loss = model(part)
        rs = None
        if part:
            tf1.train.init_from_checkpoint(
                src[part], {f"{n}/ExponentialMovingAverage": n for n in ("fc/w", "fc/b")})
        else:
            rs = tf1.train.Saver(tf1.train.ExponentialMovingAverage(0.5).variables_to_restore())
        step = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
        own = {}
        if kind == "named_own":
            own["slow"] = tf1.train.ExponentialMovingAverage(0.5, num_updates=gs,
                                                             name="ema_slow")
        elif kind == "two_own":
            own["fast"] = tf1.train.ExponentialMovingAverage(0.5)
            own["slow"] = tf1.train.ExponentialMovingAverage(0.9, name="ema_slow")
        if own:
            with tf.control_dependencies([step]):
                step = tf.group(*[e.apply(vs) for e in own.values()])
        vtr = tf1.train.ExponentialMovingAverage(0.5).variables_to_restore()
        saver = tf1.train.Saver({"model/" + k: v for k, v in vtr.items()})
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            if rs is not None:
                rs.restore(s, src[part])
            for _ in range(3):
                s.run(step)
            saver.save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
            for v in vs:
                truth[f"{kind}:raw:{v.op.name}"] = s.run(v.read_value())
                for name, e in own.items():
                    truth[f"{kind}:{name}:{v.op.name}"] = s.run(e.average(v).read_value())
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_renamed_finetune_r96")
    return out, run_tf1_script(SCRIPT, out)


def _flat(err: str) -> str:
    return " ".join(err.split())


@pytest.mark.parametrize("case", ["part_init", "named_own"])
def test_raw_route_offered_is_the_route_that_works(made, case, tmp_path):
    """``--raw`` refuses naming ``--raw --keys-are-raw``; that route exited 2 "this
    checkpoint has no such key" for a partitioned variable's part keys (F1: the collections
    list ``fc/w/part_0``, not ``fc/w``, and one such key dropped ``fc/b`` too) and beside an
    own ``apply()`` named ``ema_slow`` (F2). It now writes every fine-tuned raw weight bit for
    bit, none an average."""
    out, truth = made
    dst = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / case), "--raw", "--out", str(dst)])
    err = _flat(err)
    assert code == 6 and not dst.exists(), err
    assert "--keys-are-raw" in err, err
    code, text, err = run_cli(["export", str(out / case), "--raw", "--keys-are-raw", "--json",
                               "--out", str(dst)])
    assert code == 0, err
    raw = {k.split(":", 2)[2]: v for k, v in truth.items() if k.startswith(f"{case}:raw:")}
    doc = json.loads(text)
    assert doc["averaged"] == [] and len(doc["raw"]) == len(raw), doc
    if case == "part_init":
        assert raw_bytes(raw["fc/w/part_0"]) != raw_bytes(raw["fc/w/part_1"])
    with np.load(dst) as z:
        assert sorted(n.removeprefix("model/") for n in z.files) == sorted(raw), z.files
        for n in z.files:
            var = n.removeprefix("model/")
            assert raw_bytes(z[n]) == raw_bytes(raw[var]), n
            assert all(raw_bytes(z[n]) != raw_bytes(t) for k, t in truth.items()
                       if ":raw:" not in k), n  # no average of any run or object


def test_named_own_default_export_is_its_own_averages(made, tmp_path):
    """F2's file without options: the fine-tune's own ``ema_slow`` averages, bit for bit (as
    ``restore-ema`` writes them), or a refusal; never the raw weights."""
    out, truth = made
    dst = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / "named_own"), "--out", str(dst)])
    if code != 0:
        assert code == 6 and not dst.exists(), err
        return
    with np.load(dst) as z:
        assert len(z.files) == 2, z.files
        for n in z.files:
            var = n.removeprefix("model/").removesuffix("/ExponentialMovingAverage")
            assert raw_bytes(z[n]) == raw_bytes(truth[f"named_own:slow:{var}"]), n


@pytest.mark.parametrize("more", [[], ["--tensor-averages"]])
def test_other_objects_averages_are_not_called_tensors(made, more, tmp_path):
    """``--ema-name ema_slow`` exports the slow averages bit for bit and said it left out
    "averages of tensors" (the default object's averages of fc/b and fc/w) that
    ``--tensor-averages`` would export: both false, and with ``--tensor-averages`` they went
    unsaid (F3). They are named as another EMA object's averages of those variables."""
    out, truth = made
    dst = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / "two_own"), "--ema-name", "ema_slow", *more,
                            "--out", str(dst)])
    assert code == 0, err
    err = _flat(err)
    with np.load(dst) as z:
        assert sorted(z.files) == ["fc/b", "fc/w"], z.files
        for n in z.files:
            assert raw_bytes(z[n]) == raw_bytes(truth[f"two_own:slow:{n}"]), n
    assert "averages of tensors that are not" not in err and "--tensor-averages" not in err, err
    assert "another EMA object's averages" in err, err
    assert "model/fc/b/ExponentialMovingAverage" in err and "the average of fc/b" in err, err


def test_list_names_other_objects_averages_as_averages(made):
    """F3's ``list``: ``model/fc/*/ExponentialMovingAverage`` (the default object's averages,
    written from its shadows) showed as ``tensor_average`` and ``model/fc/*/ema_slow`` (the
    slow object's) as ``weight``, each "? (1 average)". Both are averages of ``fc/*`` as
    export names them (and as the same graph without the prefix lists them); each key holds
    what its object's ``average()`` held at save time, bit for bit, and the raw holders stay
    'raw value?'."""
    from ckpt_tools import open_checkpoint

    out, truth = made
    code, text, err = run_cli(["list", str(out / "two_own"), "--json"])
    assert code == 0, err
    rows = {v["name"]: v for v in json.loads(text)["variables"]}
    with open_checkpoint(str(out / "two_own")) as ckpt:
        for var in ("fc/b", "fc/w"):
            for suffix, which in (("ExponentialMovingAverage", "fast"), ("ema_slow", "slow")):
                key = f"model/{var}/{suffix}"
                row = rows[key]
                assert (row["role"], row["ema_of"], row["ema_candidates"]) == (
                    "ema", var, []), row
                assert raw_bytes(ckpt.tensor(key)) == raw_bytes(
                    truth[f"two_own:{which}:{var}"]), key
            raw = rows[f"model/{var}/ExponentialMovingAverage_1"]
            assert raw["role"] == "ema" and raw["ema_of"] is None, raw
            assert raw_bytes(ckpt.tensor(f"model/{var}/ExponentialMovingAverage_1")) == raw_bytes(
                truth[f"two_own:raw:{var}"])
    code, text, err = run_cli(["list", str(out / "two_own")])
    assert code == 0, err
    lines = {line.split("\t")[0]: line for line in text.splitlines()}
    assert lines["model/fc/b/ema_slow"].endswith("of fc/b (not stored)"), text
    # the renamed global_step is no weight with an average open (s28a "Left")
    assert rows["model/global_step"]["ema_candidates"] == [], rows["model/global_step"]
    assert lines["model/global_step"].endswith("\t-"), lines["model/global_step"]
    assert "does not prove the pairing of" not in text, text
    assert "tensor_average" not in text, text
