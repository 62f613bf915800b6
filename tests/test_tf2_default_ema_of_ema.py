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
    assert "2 average(s) are averages of tensors this checkpoint stores as averages" in said
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
