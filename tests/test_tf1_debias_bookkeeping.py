"""TF1 with its ``.meta``: a moving mean kept by ``assign_moving_average(..., zero_debias=True)``
inside ``variable_scope("bn")`` (tf_slim's ``batch_norm(zero_debias_moving_mean=True)``) stores
its bookkeeping as ``bn/bn/moving_mean/biased`` and ``bn/bn/moving_mean/local_step``: the
scope doubles the name, so no stored ``bn/bn/moving_mean`` sits above them. ``local_step`` (a
float scalar outside ``trainable_variables``) was read as a frozen model weight: listed as a
weight and written into every export, ``--ema`` and ``--raw`` (review-14-attack-r28 F6). Both are
the average's state, never a weight.

Truth: ``sess.run(ema.average(v))`` and ``sess.run(v)`` at save time (:func:`tf1_ema_run`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import tf1_ema_run

VARS = ("W", "V", "b")
STATE = ("bn/bn/moving_mean/biased", "bn/bn/moving_mean/local_step")


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_debias") / "run"
    return out, tf1_ema_run(tf, out, lambda e, vs, gs: None, debiased=True)[1]


def test_debias_state_is_no_weight(made, tmp_path):
    run, truth = made
    code, text, err = run_cli(["list", str(run), "--json"])
    assert code == 0, err
    rows = {v["key"]: v for v in json.loads(text)["variables"]}
    for k in STATE:
        assert rows[k]["role"] == "other", rows[k]
    for extra, kind in (([], "ema"), (["--raw"], "raw")):
        dest = tmp_path / f"{kind}.npz"
        code, _, err = run_cli(["export", str(run), *extra, "--out", str(dest)])
        assert code == 0, err
        with np.load(dest) as got:
            assert sorted(got.files) == sorted([*VARS, "bn/moving_mean"]), got.files
            for n in VARS:
                assert got[n].tobytes() == truth[f"{kind}:{n}"].tobytes(), (kind, n)
            assert got["bn/moving_mean"].tobytes() == truth["raw:bn/moving_mean"].tobytes()


def test_debias_state_without_meta_is_no_weight(made, tmp_path):
    """The same checkpoint copied without its .meta (as a downloaded one often is): the
    helpers were weights with no EMA shadow, export refused blaming frozen variables, and
    --allow-missing wrote them as model weights (review-25-user-u27 F2). Read by TF's layout
    (<scope>/<scope>/moving_mean/biased beside a scalar local_step of the stored
    <scope>/moving_mean's dtype): role other, as the .meta says, and left out."""
    import shutil

    run, truth = made
    ckpt = max(run.glob("model.ckpt-*.index")).with_suffix("")
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in run.glob(ckpt.name + ".*"):
        if f.suffix != ".meta":
            shutil.copy(f, bare / f.name)
    code, text, err = run_cli(["list", str(bare / ckpt.name), "--json"])
    assert code == 0, err
    rows = {v["key"]: v for v in json.loads(text)["variables"]}
    for k in STATE:
        assert rows[k]["role"] == "other", rows[k]
    dest = tmp_path / "ema.npz"
    code, _, err = run_cli(["export", str(bare / ckpt.name), "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert sorted(got.files) == sorted([*VARS, "bn/moving_mean"]), got.files
        for n in VARS:
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
        assert got["bn/moving_mean"].tobytes() == truth["raw:bn/moving_mean"].tobytes()
