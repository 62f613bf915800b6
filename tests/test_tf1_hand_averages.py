"""TF1 with its ``.meta``: weight averages kept by hand with
``moving_averages.assign_moving_average(<v>/<name>, v, decay)`` at the graph's root, no
``ExponentialMovingAverage`` behind them (review-15-attack-r29 F1 CRITICAL, F2): a Lookahead's
slow weights written branch-free (saved right after a sync step they ARE the raw weights) and an
SWA running mean. Their ``AssignMovingAvg`` ops average ``W`` into ``W/slow``, yet outside any
``apply()`` name scope (no ``NoOp`` of the EMA's name groups them) and, without an EMA, with
``moving_average_variables`` empty. Before the fix ``export --strict``, ``restore-ema`` and
``restore_ema()`` exit 0 with them as "EMA values"; with a real default EMA whose averages were
not saved (Saver built before ``ema.apply()``) too, without saying the averages are missing;
beside a real, saved EMA the refusal offered ``--ema-name `` (empty) as an EMA object's name.

Truth: ``sess.run(v)``, ``sess.run(<v>/<name>)`` and ``sess.run(ema.average(v))`` at save time
(:func:`tf1_ema_run`)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import tf1_ema_run

import ckpt_tools

E = "ExponentialMovingAverage"
VARS = ("W", "V", "b")


def _without_averages(tf):
    """A Saver built as if before ``ema.apply()``: every variable but the averages."""
    def keys(ema, variables, gs):
        return [v for v in tf.compat.v1.global_variables() if not v.op.name.endswith("/" + E)]
    return keys


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_hand_averages")
    late = lambda e, vs, gs: None  # noqa: E731
    cases = {"look": dict(ema=False, slow="slow", keys=late),
             "early": dict(ema=True, slow="slow", keys=_without_averages(tf)),
             "swa_only": dict(ema=False, slow="swa", swa=True, keys=late),
             "swa": dict(ema=True, slow="swa", swa=True, keys=late),
             # in apply()'s idiom (name scope, NoOp, collection): only the decay differs
             "idiom": dict(ema=False, slow="slow", idiom=True, keys=late),
             "idiom_early": dict(ema=True, slow="slow", idiom=True, keys=_without_averages(tf))}
    return out, {c: tf1_ema_run(tf, out / c, kw.pop("keys"), **kw)[1]
                 for c, kw in cases.items()}


@pytest.mark.parametrize("case", ["look", "early", "swa_only", "idiom", "idiom_early"])
def test_hand_kept_averages_are_no_ema(made, tmp_path, case):
    out, truths = made
    run, truth = out / case, truths[case]
    name = "swa" if case.startswith("swa") else "slow"
    if case != "swa_only":  # saved right after a sync step: the slow weights are the raw ones
        for n in VARS:
            assert truth[f"raw:{n}/{name}"].tobytes() == truth[f"raw:{n}"].tobytes()
    for args in (["export", "--strict", "--out", str(tmp_path / "x.npz")],
                 ["export", "--out", str(tmp_path / "x.npz")],
                 ["restore-ema", "--strict", "--out", str(tmp_path / "re")]):
        code, _, err = run_cli([args[0], str(run), *args[1:]])
        assert code == 6, (args, code, err)
        assert "--ema-name" in err, err
        assert not (tmp_path / "x.npz").exists() and not (tmp_path / "re").exists()
        if case in ("early", "idiom_early"):
            assert "averages were not saved" in err and "W/ExponentialMovingAverage" in err
            assert "--raw" in err, err
    with pytest.raises(ckpt_tools.UnprovenPairingError):
        ckpt_tools.ema_map(str(run))
    code, _, err = run_cli(["export", str(run), "--raw", "--out", str(tmp_path / "r.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as got:
        for n in VARS:
            assert got[n].tobytes() == truth[f"raw:{n}"].tobytes(), n


def test_hand_average_beside_a_saved_ema_offers_only_its_name(made, tmp_path):
    out, truths = made
    run, truth = out / "swa", truths["swa"]
    code, _, err = run_cli(["export", str(run), "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "--ema-name ," not in err and "--ema-name  " not in err, err
    assert f"--ema-name {E} decides" in err, err
    code, _, err = run_cli(["export", str(run), "--ema-name", E, "--strict",
                            "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as got:
        for n in VARS:
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
            assert got[n].tobytes() != truth[f"raw:{n}/swa"].tobytes(), n
