"""TF2 EMA names that read like TF's ``_N`` counter (review-14-attack-r25 F2b, F2c).

b) One ``ExponentialMovingAverage(name="ema_2")`` over same-named variables writes
``w/ema_2``, ``w/ema_2_1``…: ``--ema-name ema_2 --apply-order trainable`` pairs them (it was
refused as if ``w/ema_2`` were another EMA object's ``ema``).
c) Two objects named ``ema`` and ``ema_1``: the first writes ``w/ema``, ``w/ema_1``, the second
``w/ema_1_1``, ``w/ema_1_2``. Saved as ``fast=[...]``, ``slow=[...]``, ``--ema-name fast`` (or
``slow``) with ``--apply-order trainable`` takes that object's averages; ``fast``'s were
unreachable. Checkpoints are made here by real TensorFlow; truth is ``ema.average(v)``.
"""

from __future__ import annotations

import json

import numpy as np
from helpers import train_ema
from typer.testing import CliRunner

from ckpt_tools import apply_ema
from ckpt_tools.cli import app

runner = CliRunner()


def _module(tf, name: str, n: int):
    """A tf.Module holding ``n`` variables of one name, dtype and shape in a list."""

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.vs = [tf.Variable(tf.random.normal([3]) + i, name=name) for i in range(n)]

    return M()


def _export(d, out, *args):
    return runner.invoke(app, ["export", str(d), "--apply-order", "trainable",
                               "--out", str(out), *args])


def test_ema_name_with_digits_is_one_object(tf, tmp_path):
    m = _module(tf, "s15d_b", 4)
    ema = tf.train.ExponentialMovingAverage(0.5, name="ema_2")
    train_ema(tf, m.trainable_variables, ema)
    names = [ema.average(v).name for v in m.vs]
    assert names == ["s15d_b/ema_2:0"] + [f"s15d_b/ema_2_{i}:0" for i in (1, 2, 3)], names
    truth = [ema.average(v).numpy() for v in m.vs]
    d = tmp_path / "ck"
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in m.vs]).write(str(d / "ckpt"))
    result = _export(d, tmp_path / "x.npz", "--ema-name", "ema_2")
    assert result.exit_code == 0, result.output
    assert "another EMA" not in result.output
    with np.load(tmp_path / "x.npz") as z:
        for i, t in enumerate(truth):
            assert z[f"model/vs/{i}"].tobytes() == t.tobytes(), i


def test_objects_named_ema_and_ema_1_are_each_reachable(tf, tmp_path):
    m = _module(tf, "s15d_c", 2)
    fast = tf.train.ExponentialMovingAverage(0.5, name="ema")
    slow = tf.train.ExponentialMovingAverage(0.9, name="ema_1")
    train_ema(tf, m.trainable_variables, fast, slow)
    assert [fast.average(v).name for v in m.vs] == ["s15d_c/ema:0", "s15d_c/ema_1:0"]
    assert [slow.average(v).name for v in m.vs] == ["s15d_c/ema_1_1:0", "s15d_c/ema_1_2:0"]
    d = tmp_path / "ck"
    tf.train.Checkpoint(model=m, fast=[fast.average(v) for v in m.vs],
                        slow=[slow.average(v) for v in m.vs]).write(str(d / "ckpt"))
    refused = _export(d, tmp_path / "r.npz")
    assert refused.exit_code == 6 and "--ema-name fast" in " ".join(refused.output.split())
    raw = [v.numpy() for v in m.vs]
    for ema, attr in ((fast, "fast"), (slow, "slow")):
        truth = [ema.average(v).numpy() for v in m.vs]
        out = tmp_path / f"{attr}.npz"
        result = _export(d, out, "--ema-name", attr, "--json")
        assert result.exit_code == 0, result.output
        stated = json.loads(result.stdout)["stated_apply_order"]["pairs"]  # this object's
        assert sorted(stated) == [f"{attr}/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in (0, 1)]
        with np.load(out) as z:
            for i, t in enumerate(truth):
                assert z[f"model/vs/{i}"].tobytes() == t.tobytes(), (attr, i)
        apply_ema(m, str(d), apply_order="trainable", ema_name=attr)  # the live module
        for i, t in enumerate(truth):
            assert m.vs[i].numpy().tobytes() == t.tobytes(), (attr, i)
            m.vs[i].assign(raw[i])


def test_a_numbered_name_uneven_across_variables_is_refused(tf, tmp_path):
    """review-32-attack-r118 F6: two objects both named ``s32i_ema`` (e1, e2) saved in one
    list, where TF's per-variable counters came out uneven: a notebook's earlier object of
    that name averaged ``w`` (``e0``), or e1 averaged ``w`` before e2 and ``b`` after it.
    ``--ema-name s32i_ema_1`` took e1's average of one variable and e2's of the other, exit 0;
    it is now refused (exit 6), and the refusal without it holds too. Variable and EMA names
    are this test's own: TF2 counts them across the process."""

    def build(case: str):
        w = tf.Variable(tf.zeros([3]), name=f"s32i_{case}_w")
        b = tf.Variable(tf.zeros([3]), name=f"s32i_{case}_b")
        e0, e1, e2 = (tf.train.ExponentialMovingAverage(d, name="s32i_ema")
                      for d in (0.3, 0.5, 0.9))
        if case == "notebook":
            e0.apply([w])
            e1.apply([w, b])
            e2.apply([w, b])
        else:  # one object applied in two calls
            e1.apply([w])
            e2.apply([w, b])
            e1.apply([b])
        train_ema(tf, [w, b], e1, e2)
        return w, b, e1, e2

    for case, names in (("notebook", [["s32i_ema_1", "s32i_ema"], ["s32i_ema_2", "s32i_ema_1"]]),
                        ("crossed", [["s32i_ema", "s32i_ema_1"], ["s32i_ema_1", "s32i_ema"]])):
        w, b, e1, e2 = build(case)
        assert [[e.average(v).name[:-2].rpartition("/")[2] for v in (w, b)]
                for e in (e1, e2)] == names, case
        # each variable's s32i_ema_1 is a different object's: nothing in the file says whose
        by_name = {e.average(v).name: i for i, e in enumerate((e1, e2)) for v in (w, b)}
        assert len({i for n, i in by_name.items() if n.endswith("/s32i_ema_1:0")}) == 2, case
        m = tf.Module()
        m.w, m.b = w, b
        d = tmp_path / case
        tf.train.Checkpoint(model=m, ema=[e.average(v) for e in (e1, e2) for v in (w, b)]).write(
            str(d / "ckpt"))
        out = tmp_path / f"{case}.npz"
        for args in ([], ["--ema-name", "s32i_ema_1"], ["--ema-name", "s32i_ema_2",
                                                        "--allow-missing"]):
            result = runner.invoke(app, ["export", str(d), "--out", str(out), *args])
            assert result.exit_code == 6, (case, args, result.output)
            assert not out.exists(), (case, args)
