"""TF1 with its ``.meta``: a hand-written momentum optimizer that keeps its momentum in EMA form,
``assign_moving_average(m, accum.read_value(), 0.9)`` (slot ``W/MyMomentum``), over gradients
accumulated in variables ``W/accum`` (review-14-attack-r28 F3, CRITICAL). Its
``AssignMovingAvg`` ops write ``W/MyMomentum``, yet average ``W/accum``, not ``W``: they
prove nothing about ``W``'s average. Before the fix, with the real EMA's averages not saved,
``export --strict`` and ``restore-ema`` exit 0 with the momentum buffers as the averages;
without any EMA the refusal called MyMomentum "TF's default EMA name" and offered
``--ema-name MyMomentum``, which exported the buffers (exit 0, ``--strict``); with the
averages saved it offered MyMomentum as a second EMA object's name.

Truth: ``sess.run(ema.average(v))`` and ``sess.run(v)`` at save time (:func:`tf1_ema_run`)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import tf1_ema_run

import ckpt_tools

E = "ExponentialMovingAverage"
M = "MyMomentum"
VARS = ("W", "V", "b")


def _without_averages(tf):
    """A Saver built as if before ``ema.apply()``: every variable but the averages."""
    def keys(ema, variables, gs):
        return [v for v in tf.compat.v1.global_variables() if not v.op.name.endswith("/" + E)]
    return keys


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_momentum_form")
    cases = {"early": (True, _without_averages(tf)), "late": (True, lambda e, vs, gs: None),
             "none": (False, lambda e, vs, gs: None)}
    return out, {c: tf1_ema_run(tf, out / c, keys, momentum=M, ema=ema)[1]
                 for c, (ema, keys) in cases.items()}


def _check_differs(truth):
    for n in VARS:  # the buffers are no average, and the average no raw weight
        assert not np.array_equal(truth[f"raw:{n}/{M}"], truth[f"raw:{n}"])
        if f"ema:{n}" in truth:
            assert not np.array_equal(truth[f"ema:{n}"], truth[f"raw:{n}"])
            assert not np.array_equal(truth[f"ema:{n}"], truth[f"raw:{n}/{M}"])


def test_averages_not_saved_are_refused_not_replaced_by_the_momentum(made, tmp_path):
    out, truths = made
    run, truth = out / "early", truths["early"]
    _check_differs(truth)
    code, text, err = run_cli(["list", str(run), "--json"])
    assert code == 0, err
    rows = {v["key"]: v for v in json.loads(text)["variables"]}
    for n in VARS:
        assert rows[f"{n}/{M}"]["role"] == "optimizer_slot", rows[f"{n}/{M}"]
        assert rows[n]["ema"] is None, rows[n]
    for args in (["export", "--strict", "--out", str(tmp_path / "x.npz")],
                 ["export", "--out", str(tmp_path / "x.npz")],
                 ["restore-ema", "--out", str(tmp_path / "re")]):
        code, _, err = run_cli([args[0], str(run), *args[1:]])
        assert code == 6, (args, code, err)
        assert not (tmp_path / "x.npz").exists() and not (tmp_path / "re").exists()
    code, _, err = run_cli(["export", str(run), "--raw", "--out", str(tmp_path / "r.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as got:
        assert sorted(got.files) == sorted(VARS)
        for n in VARS:
            assert got[n].tobytes() == truth[f"raw:{n}"].tobytes(), n


def test_saved_averages_export_exact_and_momentum_is_not_offered(made, tmp_path):
    out, truths = made
    run, truth = out / "late", truths["late"]
    _check_differs(truth)
    for extra in ([], ["--ema-name", E]):
        dest = tmp_path / f"e{len(extra)}.npz"
        code, _, err = run_cli(["export", str(run), "--strict", *extra, "--out", str(dest)])
        assert code == 0, err
        with np.load(dest) as got:
            for n in VARS:
                assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), (extra, n)
    code, text, err = run_cli(["map", str(run), "--json"])
    assert code == 0, err
    assert {k: v for k, v in json.loads(text).items() if v in VARS} == {
        f"{n}/{E}": n for n in VARS}


@pytest.mark.parametrize("case", ["early", "late", "none"])
def test_stated_momentum_name_is_refused(made, tmp_path, case):
    out, _ = made
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out / case), "--ema-name", M, "--strict",
                            "--out", str(dest)])
    assert code == 6, err
    assert "accum" in err and "no average of" in err and "--ema-name" in err, err
    assert not dest.exists()


def test_no_ema_is_no_default_name_and_momentum_is_not_offered(made, tmp_path):
    out, _ = made
    code, _, err = run_cli(["export", str(out / "none"), "--strict", "--out",
                            str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "TF's default" not in err and f"--ema-name {M}" not in err, err
    # W/accum, written by assign_add, is no average either: every weight lacks one (r38 F9)
    m = ckpt_tools.ema_map(str(out / "none"))
    assert set(m.missing) == set(VARS) and not m.averaged, m


def test_name_proof_asks_which_variable_the_op_averages(made, tmp_path, monkeypatch):
    """Where the roles still read ``W/MyMomentum`` as ``W``'s average (the graph's slots not
    recognised), the name proof alone must not take its ``AssignMovingAvg`` ops, which average
    ``W/accum``, as ema.apply()'s."""
    from ckpt_tools import meta_shadows
    from ckpt_tools.checkpoint import open_checkpoint
    from ckpt_tools.ema_proof import proven_ema_names

    out, _ = made
    run = tmp_path / "early"
    shutil.copytree(out / "early", run)
    monkeypatch.setattr(meta_shadows, "update_op_slots", lambda *a: {})
    ckpt = open_checkpoint(str(run))
    assert {v.name: v.ema_of for v in ckpt.variables_unwarned()
            if v.role == "ema" and v.name.endswith(M)} == {f"{n}/{M}": n for n in VARS}
    assert proven_ema_names(ckpt, {M}) == set()
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(tmp_path / "x.npz")])
    assert code == 6 and "--ema-name" in err, err
