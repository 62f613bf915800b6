"""TF2 EMA of an EMA, both default-named (review-17-attack-r37 F7, the all-default form): ``ema``
over the weights, a second default-named EMA over ``ema``'s averages, saved ``ema=[...]``,
``ema2=[...]`` (or one list). ``export`` and ``restore-ema`` take ``ema``'s averages (right),
but warned that the second EMA's averages "belong to variables this checkpoint does not store
... the model's object graph did not track them", while the tensors they average
(``net/w/ExponentialMovingAverage``) are stored, as ``ema``'s averages. They now say what the
file shows: averages of stored averages. Real TensorFlow; truth is ``ema.average(v)`` at save
time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module", params=["two", "apart"])
def saved(request, tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    d = tmp_path_factory.mktemp("defemaofema")
    m = tf.Module()
    with tf.name_scope("net"):
        m.w = tf.Variable(tf.random.stateless_normal([3, 3], [1, 2]), name="w")
        m.b = tf.Variable(tf.random.stateless_normal([3], [1, 3]), name="b")
    tv = [m.b, m.w]
    ema1 = tf.train.ExponentialMovingAverage(0.5)
    ema2 = tf.train.ExponentialMovingAverage(0.9)
    for i in range(3):
        for j, v in enumerate(tv):
            v.assign_add(tf.ones_like(v) * (j + 1) * (i + 1))
        ema1.apply(tv)
        ema2.apply([ema1.average(v) for v in tv])
    a = [ema1.average(v) for v in tv]
    b = [ema2.average(x) for x in a]
    # net/w/ExponentialMovingAverage/ExponentialMovingAverage (_1 in a second fixture)
    assert b[1].name.startswith(a[1].name[:-2] + "/ExponentialMovingAverage"), b[1].name
    if request.param == "two":
        tf.train.Checkpoint(model=m, ema=a, ema2=b).write(str(d / "ckpt"))
    else:
        tf.train.Checkpoint(model=m, ema=a + b).write(str(d / "ckpt"))
    truth = {"model/b": a[0].numpy(), "model/w": a[1].numpy()}
    assert not np.array_equal(truth["model/w"], m.w.numpy())
    assert not np.array_equal(truth["model/w"], b[1].numpy())
    return d, truth, a[1].name[:-2]


def _said(err: str, stored: str) -> str:
    said = " ".join(err.split())
    assert "does not store" not in said and "did not track" not in said, said
    assert "2 averages are averages of tensors this checkpoint stores as averages" in said
    assert f"{stored} (ema/1)" in said, said
    return said


def test_export_says_the_second_averages_average_stored_averages(saved, tmp_path):
    d, truth, stored = saved
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(d), "--out", str(out)])
    assert code == 0, err
    _said(err, stored)
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for k, want in truth.items():
            assert z[k].tobytes() == want.tobytes(), k


def test_restore_ema_says_so_too(saved, tmp_path):
    d, _, stored = saved
    code, _, err = run_cli(["restore-ema", str(d), "--out", str(tmp_path / "r")])
    assert code == 0, err
    _said(err, stored)


def test_both_lists_on_the_model_refused_naming_both_readings(tf, tmp_path):
    """The same two default-named EMAs with both lists ON the model (``m.ema``, ``m.ema2``):
    ``net/w/ExponentialMovingAverage`` beside its own average ``.../ExponentialMovingAverage``
    in one model reads as a variable (a delta named so, r38 F2), and the refusal offered
    ``--ema-name ExponentialMovingAverage`` "only if that is the name you gave", which gave
    the same refusal (a loop), said "created after ema.apply()", and ``--raw`` wrote the
    first EMA's averages with no warning. It now names both readings, offers no statement
    it refuses, and ``--raw`` warns."""
    m = tf.Module()
    with tf.name_scope("net"):
        m.w = tf.Variable(tf.random.stateless_normal([3, 3], [1, 2]), name="w")
        m.b = tf.Variable(tf.random.stateless_normal([3], [1, 3]), name="b")
    tv = [m.b, m.w]
    ema1 = tf.train.ExponentialMovingAverage(0.5)
    ema2 = tf.train.ExponentialMovingAverage(0.9)
    for i in range(3):
        for j, v in enumerate(tv):
            v.assign_add(tf.ones_like(v) * (j + 1) * (i + 1))
        ema1.apply(tv)
        ema2.apply([ema1.average(v) for v in tv])
    a = [ema1.average(v) for v in tv]
    m.ema, m.ema2 = a, [ema2.average(x) for x in a]
    tf.train.Checkpoint(model=m).write(str(tmp_path / "in" / "ckpt"))
    d, out = tmp_path / "in", tmp_path / "x.npz"
    for extra in ([], ["--ema-name", "ExponentialMovingAverage"]):
        code, _, err = run_cli(["export", str(d), "--out", str(out), *extra])
        said = " ".join(err.split())
        assert code == 6 and not out.exists(), err
        assert "(an EMA of an EMA)" in said and "(a trainable delta)" in said, said
        assert "created after ema.apply()" not in said, said
        assert "ema_name='ExponentialMovingAverage'" not in said, said  # no loop
        assert "--ema-name ExponentialMovingAverage is refused" in said, said
    code, _, err = run_cli(["export", str(d), "--raw", "--out", str(out)])
    said = " ".join(err.split())
    assert code == 0, err
    assert "may be model weights or averages" in said and "model/ema/0" in said, said
    with np.load(out) as z:  # the first EMA's averages, as stored
        assert z["model/ema/0"].tobytes() == a[0].numpy().tobytes()
        assert z["model/w"].tobytes() == m.w.numpy().tobytes()
