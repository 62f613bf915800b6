"""TF1 with its ``.meta``: ``ExponentialMovingAverage(name="Momentum")`` beside a
``MomentumOptimizer`` (slots ``W/Momentum``, averages ``W/Momentum_1``), the EMA's ``apply()``
run inside a ``tf.cond``: its update ops live in a branch function of the ``.meta``'s graph
library (control flow v2), which the update-op reading follows (review-17-attack-r36 F10), so
the averages are proven and exported. Under ``--no-meta`` nothing tells which tensor is the
average and ``export`` refuses (exit 6); before review-15-attack-r29 F4's fix the refusal told the
user to "put the .meta written with the checkpoint beside it".

Truth: ``sess.run(ema.average(v))`` at save time (:func:`tf1_ema_run`)."""

from __future__ import annotations

from helpers import run_cli
from helpers_tf1 import tf1_ema_run


def test_ema_apply_in_a_cond_is_proven_by_its_branch_ops(tf, tmp_path):
    import numpy as np

    prefix, truth = tf1_ema_run(tf, tmp_path / "run", lambda e, vs, gs: None,
                                momentum_cond="ema")
    assert "ema:W" in truth
    code, _, err = run_cli(["export", str(tmp_path / "run"), "--strict",
                            "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as got:
        for n in ("W", "V", "b"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
            assert got[n].tobytes() != truth[f"raw:{n}"].tobytes(), n
    code, _, err = run_cli(["export", str(tmp_path / "run"), "--no-meta",
                            "--out", str(tmp_path / "y.npz")])
    assert code == 6, err
    assert "Momentum_1" in err, err
    assert "put the .meta written with the checkpoint beside it" not in err, err
    assert "--no-meta leaves unread" in err, err
    assert not (tmp_path / "y.npz").exists()


def test_ema_named_like_the_optimizer_beside_its_cond_exports_the_averages(tf, tmp_path):
    """The optimizer's update in the tf.cond, the EMA's outside: the EMA's scope is
    ``Momentum`` (its NoOp too), its averages ``W/Momentum_1``; the .meta proves them."""
    import numpy as np

    _, truth = tf1_ema_run(tf, tmp_path / "run", lambda e, vs, gs: None,
                           momentum_cond="optimizer")
    code, _, err = run_cli(["export", str(tmp_path / "run"), "--strict",
                            "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as got:
        for n in ("W", "V", "b"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
            assert got[n].tobytes() != truth[f"raw:{n}"].tobytes(), n
