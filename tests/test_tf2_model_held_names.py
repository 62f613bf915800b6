"""TF2: a model's own variable named like another variable's average (review-16-attack-r33 F1,
F10). A module with a weight ``w`` and a sub-module also called ``w`` stores ``block/w`` and
``block/w/proj/kernel`` (or ``block/w/x``): read as ``block/w``'s average under an EMA named
``proj/kernel`` (``x``), ``export --raw --strict`` dropped the model weight (exit 0), and with a
real EMA the refusal offered names pairing ``block/w`` with another variable's raw value.
The object graph tracks them through the model beside ``block/w``: model variables, unless
``--ema-name`` states the name. Checkpoints are made here by real TensorFlow; truth is read
from the variables and ``ema.average(v)`` at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def _block(tf, inner):
    """block/w and block/w/proj/kernel ("proj") or block/w/x ("one")."""

    class Leaf(tf.Module):
        def __init__(self, name):
            super().__init__(name=name)
            with self.name_scope:
                self.kernel = tf.Variable(tf.random.stateless_normal([4, 4], [1, 2]),
                                          name="kernel" if inner == "proj" else "x")

    class Gate(tf.Module):
        def __init__(self, name):
            super().__init__(name=name)
            with self.name_scope:
                self.proj = Leaf("proj")

    class Block(tf.Module):
        def __init__(self):
            super().__init__(name="block")
            with self.name_scope:
                self.w = tf.Variable(tf.random.stateless_normal([4, 4], [5, 6]), name="w")
                self.gate = Gate("w") if inner == "proj" else Leaf("w")

    return Block()


def _export(d, out, *args):
    return runner.invoke(app, ["export", str(d), "--strict", "--out", str(out), "--force",
                               *args])


def _same(out, want):
    with np.load(out) as z:
        assert sorted(z.files) == sorted(want)
        for k, v in want.items():
            assert z[k].tobytes() == v.tobytes(), k


@pytest.mark.parametrize("inner", ["proj", "one"])
def test_model_variable_under_a_weight_name_is_a_weight(tf, tmp_path, inner):
    m = _block(tf, inner)
    leaf = m.gate.proj.kernel if inner == "proj" else m.gate.kernel
    assert leaf.name == ("block/w/proj/kernel:0" if inner == "proj" else "block/w/x:0")
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m).write(str(d / "ckpt"))
    key = "model/gate/proj/kernel" if inner == "proj" else "model/gate/kernel"
    raw = {"model/w": m.w.numpy(), key: leaf.numpy()}
    listed = runner.invoke(app, ["list", "--json", str(d)])
    assert listed.exit_code == 0, listed.output
    roles = {v["path"]: v["role"] for v in json.loads(listed.output)["variables"]
             if v["path"]}
    assert roles == {k: "weight" for k in raw}, roles
    result = _export(d, out, "--raw")
    assert result.exit_code == 0, result.output
    _same(out, raw)  # never a model weight dropped as an average


def test_model_variable_under_a_weight_name_with_a_real_ema(tf, tmp_path):
    m = _block(tf, "proj")
    ema = tf.train.ExponentialMovingAverage(0.5)
    for _ in range(3):
        for v in m.trainable_variables:
            v.assign_add(tf.ones_like(v))
        ema.apply(m.trainable_variables)
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in m.trainable_variables]).write(
        str(d / "ckpt"))
    truth = {"model/w": ema.average(m.w).numpy(),
             "model/gate/proj/kernel": ema.average(m.gate.proj.kernel).numpy()}
    result = _export(d, out)
    assert result.exit_code == 0, result.output
    _same(out, truth)
    # a stated name is taken as said, never one the model's own path suggests
    result = _export(d, out, "--ema-name", "model")
    assert result.exit_code != 0, result.output


def test_model_held_average_of_a_stated_name(tf, tmp_path):
    """A module keeping its own EMA's averages (name "fast") as named attributes of its own:
    read as the model's variables unless --ema-name fast states the name; then as the
    averages. (Kept in a list, m.avgs = [...], they are an averages container:
    tests/test_tf2_kept_averages.py.)"""

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w0 = tf.Variable(tf.random.stateless_normal([3, 2], [1, 2]), name="w0")
            self.w1 = tf.Variable(tf.zeros([2]), name="w1")

    m = M()
    ema = tf.train.ExponentialMovingAverage(0.5, name="r33fast")
    for s in range(3):
        for v in (m.w0, m.w1):
            v.assign_add(tf.ones_like(v) * (s + 1))
        ema.apply([m.w0, m.w1])
    m.a0, m.a1 = ema.average(m.w0), ema.average(m.w1)
    assert m.a0.name == "w0/r33fast:0"
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m).write(str(d / "ckpt"))
    # unstated: the model's variables, no averages; the refusal names the statement hedged
    result = _export(d, out)
    assert result.exit_code != 0, result.output
    said = " ".join(result.stderr.split())
    assert "pass --ema-name r33fast (ema_name='r33fast' in Python) only if that is the name " \
        "you gave an ExponentialMovingAverage" in said, said
    assert not out.exists()
    result = _export(d, out, "--ema-name", "r33fast")
    assert result.exit_code == 0, result.output
    _same(out, {"model/w0": m.a0.numpy(), "model/w1": m.a1.numpy()})


def test_a_sub_module_weight_named_like_an_average_is_never_one(tf, tmp_path):
    """review-32-attack-r118 F3: ``m.sub.d``, a weight of the model named ``w/fast`` (a
    sub-module named like a weight names its variables so), beside ``m.w`` and an EMA truly
    named ``fast`` over ``w``, ``b``. ``--ema-name fast --allow-missing`` (saved without
    averages) and the split refusal's ``--ema-name fast --exclude model/b`` (``b``'s average
    saved apart) exported d's raw value as w's average, exit 0. The file cannot tell it from
    ``m.sub.d = fast.average(m.w)``: refused, and the hint offers no ``--ema-name``. Names are
    this test's own (TF2 counts them across the process)."""
    m = tf.Module()
    m.w = tf.Variable(tf.random.stateless_normal([3], [3, 2]), name="s32i3_w")
    m.b = tf.Variable(tf.random.stateless_normal([3], [3, 3]), name="s32i3_b")
    m.sub = tf.Module()
    m.sub.d = tf.Variable(tf.random.stateless_normal([3], [3, 4]), name="s32i3_w/s32i3f")
    fast = tf.train.ExponentialMovingAverage(0.5, name="s32i3f")
    for s in range(3):
        for v in (m.w, m.b, m.sub.d):
            v.assign_add(tf.ones_like(v) * (s + 1))
        fast.apply([m.w, m.b])
    assert fast.average(m.w).name == m.sub.d.name == "s32i3_w/s32i3f:0"
    # what the reading exported as w's average is no average of w at all
    assert fast.average(m.w).numpy().tobytes() != m.sub.d.numpy().tobytes()
    bare, apart, out = tmp_path / "bare", tmp_path / "apart", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m).write(str(bare / "ckpt"))
    tf.train.Checkpoint(model=m, ema=[fast.average(m.b)]).write(str(apart / "ckpt"))
    result = _export(bare, out)
    said = " ".join(result.stderr.split())
    assert result.exit_code == 6 and "no --ema-name reads it as an average" in said, said
    assert "pass --ema-name" not in said, said
    for d, args in ((bare, ["--allow-missing"]), (bare, []), (apart, []),
                    (apart, ["--exclude", "model/b"]), (apart, ["--allow-missing"])):
        result = _export(d, out, "--ema-name", "s32i3f", *args)
        said = " ".join(result.stderr.split())
        assert result.exit_code == 6 and not out.exists(), (d.name, args, said)
        assert "a variable the model itself tracks, in the sub-module model/sub" in said, said
        if d == bare or "model/b" in args:  # no other average to read leaving d out
            assert "--exclude" not in said, said
            continue
        # b's average saved apart: the offer leaves d (and w) out and reads b's, run here
        # (review-32-attack-r125 M1: an --exclude of the doubted key lifts the refusal)
        offer = said.split("no --ema-name reads it as an average; ")[1].split(" (ema_name=")[0]
        assert "--exclude 'model/sub/d'" in offer, said
        result = _export(d, out, *offer.replace("'", "").split())
        assert result.exit_code == 0, (offer, result.output)
        _same(out, {"model/b": fast.average(m.b).numpy()})
        out.unlink()


def test_a_sub_module_holding_a_reference_beside_its_own_weight_is_refused(tf, tmp_path):
    """review-32-attack-r123 F1: ``m.sub`` keeps a reference to ``m.w`` (a tied weight) and
    its own weight ``d`` named ``w/fast``; an EMA truly named ``fast`` averages ``u`` only.
    914f0e6 read d as w's average because an object tracking d also tracks w: the split
    refusal's ``--exclude model/u`` offer exported d's value as w's average, exit 0. Only the
    object w's own (first) path runs through counts: refused."""
    m = tf.Module()
    m.w = tf.Variable([1.0, 2.0], name="r123_w")
    m.u = tf.Variable([3.0, 4.0], name="r123_u")
    m.sub = tf.Module()
    m.sub.w = m.w  # a second reference, not w's own path
    m.sub.d = tf.Variable([7.0, 7.0], name="r123_w/r123f")
    fast = tf.train.ExponentialMovingAverage(0.5, name="r123f")
    fast.apply([m.u])
    m.u.assign([5.0, 6.0])
    fast.apply([m.u])
    tf.train.Checkpoint(model=m, ema=[fast.average(m.u)]).write(str(tmp_path / "ck" / "ckpt"))
    out = tmp_path / "x.npz"
    for args in ([], ["--exclude", "model/u"], ["--allow-missing"]):
        result = _export(tmp_path / "ck", out, "--ema-name", "r123f", *args)
        said = " ".join(result.stderr.split())
        assert result.exit_code == 6 and not out.exists(), (args, said)  # was 0: w = [7, 7]
        assert "a variable the model itself tracks" in said, said


def test_a_tied_weight_referenced_above_its_module_lets_the_other_averages_be_read(
        tf, tmp_path):
    """review-32-attack-r125 M1: ``m.head = m.enc.w`` (a tied weight referenced at the top, so
    w's first path is model/head), ``m.enc.w_avg = fast.average(m.enc.w)``, ``m.enc.u_avg =
    fast.average(m.enc.u)``. TF records w as one object with two parents, so the file is byte
    for byte a module keeping a reference to the top weight beside its own variable named
    ``tw/fast`` (r123 F1): w_avg stays refused. But the first refusal offered ``--ema-name``
    alone, which was then refused as "no --ema-name reads it", and no ``--exclude`` of w_avg
    could lift that, so u's average, beside u's own path, was unreadable too. Each offer is
    probed and run here; truth is ``fast.average(v)``."""
    m = tf.Module()
    m.enc = tf.Module()
    m.enc.w = tf.Variable([1.0, 2.0], name="s33a_tw")
    m.enc.u = tf.Variable([3.0, 4.0], name="s33a_tu")
    m.head = m.enc.w
    fast = tf.train.ExponentialMovingAverage(0.5, name="s33af")
    fast.apply([m.enc.w, m.enc.u])
    m.enc.w.assign([5.0, 6.0])
    m.enc.u.assign([7.0, 8.0])
    fast.apply([m.enc.w, m.enc.u])
    m.enc.w_avg, m.enc.u_avg = fast.average(m.enc.w), fast.average(m.enc.u)
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m).write(str(d / "ckpt"))
    u_avg, w_raw = fast.average(m.enc.u).numpy(), m.enc.w.numpy()

    def run_offer(said: str, after: str, *mine: str) -> None:
        offer = said.split(after)[1].split(" (ema_name=")[0]
        assert "--exclude 'model/enc/w_avg'" in offer, said  # was: --ema-name s33af alone
        result = _export(d, out, *mine, *offer.replace("'", "").split())
        assert result.exit_code == 0, (offer, result.output)
        _same(out, {"model/enc/u": u_avg})  # w and w_avg left out, never read as w's average
        out.unlink()

    result = _export(d, out)
    said = " ".join(result.stderr.split())
    assert result.exit_code == 6 and not out.exists(), said
    run_offer(said, "so it is read as a weight: pass ")
    for mine in ([], ["--exclude", "model/head"]):
        result = _export(d, out, "--ema-name", "s33af", *mine)
        said = " ".join(result.stderr.split())
        assert result.exit_code == 6 and not out.exists(), said
        # named by the path beside it, not only by the reference path
        assert "tracks model/head only on a second path (model/enc/w)" in said, said
        run_offer(said, "no --ema-name reads it as an average; ", *mine)
    result = _export(d, out, "--ema-name", "s33af", "--exclude", "model/enc/w_avg",
                     "--allow-missing")
    assert result.exit_code == 0, result.output
    _same(out, {"model/enc/u": u_avg, "model/head": w_raw})  # w raw, as stated


def test_a_sub_module_weight_also_referenced_beside_w_is_never_its_average(tf, tmp_path):
    """review-33-attack-r127 C1: ``m.sub.d``, a sub-module's own weight named ``w/fast``, ALSO
    referenced at the top (``m.a_d = m.sub.d``, a tied weight or convenience alias, so d's
    first path, model/a_d, is beside model/w); an EMA truly named ``fast`` averages u only.
    5e8b66f's rule (an object tracking d also tracks w, on d's first path) read d as w's
    average under ``--ema-name fast`` (exit 0, w = d's raw value). A sub-module also tracks
    d, as in r118 F3 without the alias: every object tracking d must hold w beside it."""
    m = tf.Module()
    m.w = tf.Variable([1.0, 2.0], name="r127_w")
    m.u = tf.Variable([3.0, 4.0], name="r127_u")
    m.sub = tf.Module()
    m.sub.d = tf.Variable([7.0, 7.0], name="r127_w/r127f")
    m.a_d = m.sub.d
    fast = tf.train.ExponentialMovingAverage(0.5, name="r127f")
    fast.apply([m.u])
    m.u.assign([5.0, 6.0])
    fast.apply([m.u])
    bare, apart, out = tmp_path / "bare", tmp_path / "apart", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m).write(str(bare / "ckpt"))
    tf.train.Checkpoint(model=m, ema=[fast.average(m.u)]).write(str(apart / "ckpt"))
    for d, args in ((bare, ["--allow-missing"]), (apart, ["--exclude", "model/u"]),
                    (apart, [])):
        result = _export(d, out, "--ema-name", "r127f", *args)
        said = " ".join(result.stderr.split())
        assert result.exit_code == 6 and not out.exists(), (d.name, args, said)  # was 0
        assert "a variable the model itself tracks" in said, said
