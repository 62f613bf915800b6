"""A TF2 module's own variable recorded as ``<x>/<word>`` is never read as an average of a
variable ``<x>`` the checkpoint does not store, nor as a loss's average (s19g, after
review-18-attack-r39 F8 and its scalar and stated-name gaps).

A ``tf.Module`` ``net`` holds ``w``, a buffer ``fast`` (``net/fast``, which the EMA leaves out)
and a scalar ``s``; a module ``loss`` holds a scalar running value ``avg`` (``loss/avg``). An
EMA named ``fast`` (or ``avg``) averages the rest, saved in a list beside the modules.
Under ``--ema-name fast`` ``net/fast`` became an average of an unstored ``net``, dropped by
export, ``--raw`` too, exit 0. The object graph holds it as its module's own variable, so it is
a weight: export refuses it as a weight without an average (exit 6, ``--allow-missing``
decides), ``--raw`` writes it. ``loss/avg``, a scalar ``<x>/avg``, stays a loss average (the
README's roles table; ``ckpt train --api tf2`` keeps its loss averages so): never exported, and
never a weight "without an average" that would make export and restore-ema refuse the whole
checkpoint. Real TensorFlow; the truth is every variable and ``ema.average(v)`` at save time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli


def _modules(tf):
    class Net(tf.Module):
        def __init__(self):
            super().__init__(name="net")
            with self.name_scope:
                self.w = tf.Variable(tf.random.stateless_normal([3, 2], [1, 2]), name="w")
                self.fast = tf.Variable(tf.random.stateless_normal([2], [3, 4]), name="fast",
                                        trainable=False)
                self.s = tf.Variable(1.5, name="s")

    class Loss(tf.Module):
        def __init__(self):
            super().__init__(name="loss")
            with self.name_scope:
                self.avg = tf.Variable(0.0, name="avg", trainable=False)

    return Net(), Loss()


@pytest.fixture(scope="module", params=["fast", "avg"])
def saved(request, tmp_path_factory):
    """``fast``: the EMA averages w and s (net/fast is a buffer); ``avg``: w, fast and s."""
    tf = pytest.importorskip("tensorflow")
    name = request.param
    net, loss = _modules(tf)
    averaged = [net.w, net.s] if name == "fast" else [net.w, net.fast, net.s]
    ema = tf.train.ExponentialMovingAverage(0.5, name=name)
    for i in range(3):
        for v in (net.w, net.fast, net.s):
            v.assign_add(tf.ones_like(v) * (i + 1))
        loss.avg.assign(0.5 * i + 0.25)
        ema.apply(averaged)
    assert net.fast.name == "net/fast:0" and loss.avg.name == "loss/avg:0"
    assert ema.average(net.w).name == f"net/w/{name}:0"
    d = tmp_path_factory.mktemp(name)
    tf.train.Checkpoint(net=net, loss=loss, ema=[ema.average(v) for v in averaged]).write(
        str(d / "ckpt"))
    raw = {"net/w": net.w.numpy(), "net/fast": net.fast.numpy(), "net/s": net.s.numpy(),
           "loss/avg": loss.avg.numpy()}
    paths = {"net/w": net.w, "net/fast": net.fast, "net/s": net.s}
    avg = {p: ema.average(v).numpy() for p, v in paths.items()
           if any(v is a for a in averaged)}
    assert not np.array_equal(avg["net/w"], raw["net/w"])
    return d / "ckpt", name, raw, avg


def _same(npz, truth):
    with np.load(npz) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for name, want in truth.items():
            assert z[name].tobytes() == np.asarray(want).tobytes(), name


@pytest.mark.parametrize("stated", [False, True])
def test_list_reads_both_as_weights(saved, stated):
    path, name, _, _ = saved
    code, out, err = run_cli(["list", str(path), "--json",
                              *(["--ema-name", name] if stated else [])])
    assert code == 0, err
    roles = {v["path"]: v["role"] for v in json.loads(out)["variables"]}
    assert roles["loss/avg"] == "loss_average" and roles["net/fast"] == "weight", roles


@pytest.mark.parametrize("stated", [False, True])
def test_raw_export_writes_every_module_variable(saved, tmp_path, stated):
    path, name, raw, _ = saved
    out = tmp_path / "r.npz"
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--raw",
                            *(["--ema-name", name] if stated else [])])
    assert code == 0, err
    _same(out, {k: v for k, v in raw.items() if k != "loss/avg"})  # never exported


def test_stated_name_pairs_the_averages_and_refuses_the_weights_without_one(saved, tmp_path):
    path, name, raw, avg = saved
    out = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--ema-name", name])
    said = " ".join(err.split())
    weights = {k: v for k, v in raw.items() if k != "loss/avg"}  # a loss average: never exported
    if name == "avg":  # every weight has its average; loss/avg is no weight lacking one
        assert code == 0, said
        _same(out, {**weights, **avg})
        return
    assert code == 6 and not out.exists(), said
    assert "net/fast" in said and "--allow-missing" in said and "loss/avg" not in said, said
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--ema-name", name,
                            "--allow-missing"])
    assert code == 0, err
    _same(out, {**weights, **avg})


def test_map_restores_them_raw_and_counts_the_loss_average(saved):
    path, name, _, _ = saved
    code, out, err = run_cli(["map", str(path), "--ema-name", name, "--allow-missing",
                              "--json"])
    assert code == 0, err
    mapping = json.loads(out)
    key = "/.ATTRIBUTES/VARIABLE_VALUE"
    assert mapping[f"loss/avg{key}"] == f"loss/avg{key}", mapping
    if name == "fast":
        assert mapping[f"net/fast{key}"] == f"net/fast{key}", mapping
    code, out, err = run_cli(["map", str(path), "--ema-name", name, "--allow-missing"])
    assert code == 0 and "), 1 loss average\n" in out + err, out + err
