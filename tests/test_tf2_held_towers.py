"""Two towers of one ``tf.Module`` class, each keeping its own averages of a NAMED EMA as
attributes (``enc.w_avg = fast.average(enc.w)``; review-16-attack-r35 F2). Each ``block/w/fast``
is named like the average of ``enc/w`` or ``dec/w`` (both ``block/w``) and sits in its own
tower: the model's own variable unless ``--ema-name fast`` says otherwise. Refused "no
averages are stored ... save the averages" (false) and no statement worked. Now: without the
statement the refusal says they are named like averages under 'fast'; with it the apply
order is asked, and ``--ema-name fast --apply-order trainable:dec,enc`` (the order
``ema.apply()`` got) reads them, as for the same averages in a list. Real TensorFlow; truth is
``ema.average(v)`` at save time."""

from __future__ import annotations

import numpy as np
import pytest
from _holder_offers import printed_offers
from helpers import run_cli

from ckpt_tools.errors import UnprovenPairingError


def _towers(tf, seed_shift=0):
    class Block(tf.Module):
        def __init__(self, seed):
            super().__init__(name="block")
            with self.name_scope:
                self.w = tf.Variable(tf.random.stateless_normal([3, 3], [seed + seed_shift, 1]),
                                     name="w")
                self.b = tf.Variable(tf.random.stateless_normal([3], [seed + seed_shift, 2]),
                                     name="b")

    return Block(1), Block(2)


def _saved(tf, d):
    enc, dec = _towers(tf)
    ema = tf.train.ExponentialMovingAverage(0.5, name="fast")
    order = list(dec.trainable_variables) + list(enc.trainable_variables)
    for i in range(3):
        for j, v in enumerate(order):
            v.assign_add(tf.ones_like(v) * (j + 1) * (i + 1))
        ema.apply(order)
    for m in (enc, dec):
        m.w_avg, m.b_avg = ema.average(m.w), ema.average(m.b)
    tf.train.Checkpoint(enc=enc, dec=dec).write(str(d / "ckpt"))
    return {f"{n}/{a}": ema.average(getattr(m, a)).numpy()
            for n, m in (("enc", enc), ("dec", dec)) for a in ("w", "b")}


def test_towers_keeping_named_averages_as_attributes(tmp_path):
    tf = pytest.importorskip("tensorflow")
    truth = _saved(tf, tmp_path)
    ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "x.npz")
    code, _, err = run_cli(["export", ckpt, "--strict", "--out", out])
    assert code == 6, err
    assert "no averages are stored" not in err and "save the averages" not in err, err
    assert "named like the average of one of" in err and "--ema-name fast" in err, err
    code, _, err = run_cli(["export", ckpt, "--strict", "--ema-name", "fast", "--out", out])
    assert code == 6, err
    assert "--apply-order trainable:PATH" in err, err
    code, _, err = run_cli(["export", ckpt, "--strict", "--ema-name", "fast",
                            "--apply-order", "trainable:dec,enc", "--out", out])
    # each tower holds its own: two objects both named 'fast' write exactly these keys, and
    # --ema-name fast (needed to read them) states no one object (review-31-attack-r113 F4)
    assert code == 6, err
    line = " ".join(err.split())
    assert "dec holds the averages of" in line and "enc holds the averages of" in line, line
    offers = printed_offers(line)
    assert len(offers) == 2, line
    for i, args in enumerate(offers):  # typed into the refused command, as printed
        got = str(tmp_path / f"o{i}.npz")
        code, _, err = run_cli(["export", ckpt, "--strict", "--apply-order",
                                "trainable:dec,enc", "--out", got, *args])
        assert code == 0, (args, err)
        with np.load(got) as z:
            assert sorted(z.files) in (["dec/b", "dec/w"], ["enc/b", "enc/w"]), z.files
            for k in z.files:
                assert z[k].tobytes() == truth[k].tobytes(), k


def test_towers_python_apply_ema_with_the_statement(tmp_path):
    tf = pytest.importorskip("tensorflow")
    from ckpt_tools import apply_ema

    truth = _saved(tf, tmp_path)
    enc, dec = _towers(tf, seed_shift=10)
    for m in (enc, dec):
        m.w_avg, m.b_avg = tf.Variable(tf.zeros_like(m.w)), tf.Variable(tf.zeros_like(m.b))
    raw = {n: m.w.numpy() for n, m in (("enc", enc), ("dec", dec))}
    with pytest.raises(UnprovenPairingError, match="tracked under 2 different objects"):
        apply_ema(tf.train.Checkpoint(enc=enc, dec=dec), str(tmp_path / "ckpt"), strict=True,
                  ema_name="fast", apply_order="trainable:dec,enc")  # r113 F4: one tower each
    apply_ema(tf.train.Checkpoint(enc=enc, dec=dec), str(tmp_path / "ckpt"), strict=True,
              ema_name="fast", apply_order="trainable:dec,enc", exclude=["dec/*"])
    for a in ("w", "b"):
        assert getattr(enc, a).numpy().tobytes() == truth[f"enc/{a}"].tobytes(), a
    # dec excluded: restored as the checkpoint stores it (its raw weight), never its average
    stored = tf.train.load_checkpoint(str(tmp_path / "ckpt")).get_tensor(
        "dec/w/.ATTRIBUTES/VARIABLE_VALUE")
    assert dec.w.numpy().tobytes() in (raw["dec"].tobytes(), stored.tobytes())
    assert dec.w.numpy().tobytes() != truth["dec/w"].tobytes()
