"""A word read as an EMA name off one pair never makes another model variable an average of a
variable the checkpoint does not store (review-18-attack-r39 F8). A module with a matrix
``attn/query`` beside a sub-module ``attn/query/{kernel,bias}`` makes ``kernel`` read like an
EMA name; the trained ``attn/out/kernel`` (no ``attn/out`` stored) was then read as an orphan
average: export (even ``--raw``) dropped it, restore-ema and ``apply_ema`` left it raw, exit 0
``--strict``. The same with a pruning mask ``dense/kernel/mask`` and a causal-mask buffer
``attn/mask``. An orphan is read only under TF's default EMA name or a stated ``--ema-name``.
Real TensorFlow; the truth is every variable and ``ema.average(v)`` at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli

import ckpt_tools


def _attn(tf):
    class Dense(tf.Module):
        def __init__(self, name, i, o, seed):
            super().__init__(name=name)
            with self.name_scope:
                self.kernel = tf.Variable(tf.random.stateless_normal([i, o], [seed, 1]),
                                          name="kernel")
                self.bias = tf.Variable(tf.zeros([o]), name="bias")

    class Attn(tf.Module):
        def __init__(self):
            super().__init__(name="attn")
            with self.name_scope:
                self.q = tf.Variable(tf.random.stateless_normal([4, 4], [9, 9]), name="query")
                self.proj = Dense("query", 4, 4, 3)  # attn/query/kernel, attn/query/bias
                self.out = Dense("out", 4, 3, 4)  # attn/out/kernel, attn/out/bias

    return Attn


@pytest.fixture(scope="module", params=["apart", "on"])
def attn(request, tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    cls = _attn(tf)
    m = cls()
    tv = list(m.trainable_variables)
    ema = tf.train.ExponentialMovingAverage(0.5)
    x = tf.random.stateless_normal([6, 4], [5, 5])
    for _ in range(4):
        with tf.GradientTape() as tape:
            h = (x @ m.q) @ m.proj.kernel + m.proj.bias
            loss = tf.reduce_sum((h @ m.out.kernel + m.out.bias - 1.0) ** 2)
        for v, g in zip(tv, tape.gradient(loss, tv), strict=True):
            v.assign_sub(0.01 * g)
        ema.apply(tv)
    assert m.q.name == "attn/query:0" and m.out.kernel.name == "attn/out/kernel:0"
    paths = {"model/q": m.q, "model/proj/kernel": m.proj.kernel,
             "model/proj/bias": m.proj.bias, "model/out/kernel": m.out.kernel,
             "model/out/bias": m.out.bias}
    avg = {p: ema.average(v).numpy() for p, v in paths.items()}
    raw = {p: v.numpy() for p, v in paths.items()}
    assert not np.array_equal(avg["model/out/kernel"], raw["model/out/kernel"])
    d = tmp_path_factory.mktemp("attn")
    if request.param == "on":
        m.ema = [ema.average(v) for v in tv]
        tf.train.Checkpoint(model=m).write(str(d / "ckpt"))
    else:
        tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in tv]).write(str(d / "ckpt"))
    return d / "ckpt", avg, raw, cls


def _same(npz, truth):
    with np.load(npz) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for name, want in truth.items():
            assert np.array_equal(z[name], want), name


def test_export_holds_every_weight_with_its_own_average(attn, tmp_path):
    path, avg, raw, _ = attn
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "e.npz"), "--strict"])
    assert code == 0, err
    assert "does not store" not in err and "EMA of an EMA" not in err, err
    _same(tmp_path / "e.npz", avg)
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "r.npz"), "--raw"])
    assert code == 0, err
    _same(tmp_path / "r.npz", raw)


def test_restore_ema_and_apply_ema_average_it(attn, tmp_path):
    tf = pytest.importorskip("tensorflow")
    path, avg, _, cls = attn
    code, _, err = run_cli(["restore-ema", str(path), "--out", str(tmp_path / "r" / "ckpt"),
                            "--strict"])
    assert code == 0, err
    assert "does not store" not in err, err
    got = tf.train.load_checkpoint(str(tmp_path / "r" / "ckpt"))  # read by TensorFlow
    for name, want in avg.items():
        assert np.array_equal(got.get_tensor(name + "/.ATTRIBUTES/VARIABLE_VALUE"), want), name
    live = cls()
    ckpt_tools.apply_ema(live, str(path), strict=True)
    assert np.array_equal(live.out.kernel.numpy(), avg["model/out/kernel"])
    assert np.array_equal(live.q.numpy(), avg["model/q"])


@pytest.fixture(scope="module")
def masked(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")

    class M(tf.Module):
        def __init__(self):
            super().__init__(name="net")
            with self.name_scope:
                with tf.name_scope("dense"):
                    self.kernel = tf.Variable(tf.random.stateless_normal([4, 3], [1, 2]),
                                              name="kernel")
                    self.bias = tf.Variable(tf.zeros([3]), name="bias")
                    with tf.name_scope("kernel"):
                        self.kmask = tf.Variable(np.tril(np.ones([4, 3], np.float32)),
                                                 name="mask", trainable=False)
                with tf.name_scope("attn"):
                    self.causal = tf.Variable(np.tril(np.ones([5, 5], np.float32)) * 2.0,
                                              name="mask", trainable=False)

    m = M()
    tv = list(m.trainable_variables)
    ema = tf.train.ExponentialMovingAverage(0.5)
    x = tf.random.stateless_normal([6, 4], [5, 5])
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((x @ (m.kernel * m.kmask) + m.bias - 1.0) ** 2)
        for v, g in zip(tv, tape.gradient(loss, tv), strict=True):
            v.assign_sub(0.01 * g)
        ema.apply(tv)
    assert m.causal.name == "net/attn/mask:0" and m.kmask.name == "net/dense/kernel/mask:0"
    d = tmp_path_factory.mktemp("masked")
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in tv]).write(str(d / "ckpt"))
    raw = {"model/kernel": m.kernel.numpy(), "model/bias": m.bias.numpy(),
           "model/kmask": m.kmask.numpy(), "model/causal": m.causal.numpy()}
    avg = {**raw, "model/kernel": ema.average(m.kernel).numpy(),
           "model/bias": ema.average(m.bias).numpy()}
    return d / "ckpt", avg, raw


def test_causal_mask_buffer_is_exported(masked, tmp_path):
    path, avg, raw = masked
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "e.npz"),
                            "--ema-name", "ExponentialMovingAverage", "--allow-missing"])
    assert code == 0, err
    assert "does not store" not in err, err
    _same(tmp_path / "e.npz", avg)
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "r.npz"), "--raw"])
    assert code == 0, err
    said = " ".join(err.split())
    assert "may be model weights or averages" in said and "model/causal" in said, said
    _same(tmp_path / "r.npz", raw)


@pytest.fixture(scope="module")
def named_orphans(tmp_path_factory):
    """An EMA named ``fast`` over two modules, only one of which is saved: ``b``'s averages
    belong to variables the checkpoint does not store, under a name no default proves."""
    tf = pytest.importorskip("tensorflow")

    class Dense(tf.Module):
        def __init__(self, name, i, o, seed):
            super().__init__(name=name)
            with self.name_scope:
                self.kernel = tf.Variable(tf.random.stateless_normal([i, o], [seed, 1]),
                                          name="kernel")
                self.bias = tf.Variable(tf.zeros([o]), name="bias")

    a, b = Dense("a", 4, 4, 1), Dense("b", 4, 3, 2)
    tv = list(a.trainable_variables) + list(b.trainable_variables)
    ema = tf.train.ExponentialMovingAverage(0.5, name="fast")
    for i in range(3):
        for v in tv:
            v.assign_add(tf.ones_like(v) * 0.1 * (i + 1))
        ema.apply(tv)
    d = tmp_path_factory.mktemp("named_orphans")
    tf.train.Checkpoint(a=a, ema=[ema.average(v) for v in tv]).write(str(d / "ckpt"))
    assert ema.average(b.kernel).name == "b/kernel/fast:0"
    return d / "ckpt", {"a/kernel": ema.average(a.kernel).numpy(),
                        "a/bias": ema.average(a.bias).numpy()}


def test_stated_name_reads_orphans_and_raw_keeps_them(named_orphans, tmp_path):
    path, avg = named_orphans
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "e.npz"),
                            "--ema-name", "fast"])
    assert code == 0, err
    said = " ".join(err.split())
    assert "2 averages belong to variables this checkpoint does not store" in said, said
    assert "b/kernel" in said, said
    _same(tmp_path / "e.npz", avg)
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "r.npz"), "--raw"])
    assert code == 0, err
    said = " ".join(err.split())
    assert "4 tensors written as stored may be model weights or averages" in said, said
    with np.load(tmp_path / "r.npz") as z:
        assert len(z.files) == 6, z.files
