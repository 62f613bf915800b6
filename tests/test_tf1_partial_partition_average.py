"""TF1 with its ``.meta``: a partitioned variable ``W`` (two parts) of which ``ema.apply()``
averaged only ``W/part_0`` (a filter over the trainable variables left ``W/part_1`` out). TF's
Saver writes ``W/ExponentialMovingAverage`` with one of its two slices: a valid checkpoint that
TF restores, whose whole average cannot be read. Before the fix every command (``list``,
``show``, ``export --raw``, ``--allow-missing``, ``verify``) called it corrupt, exit 4
(review-15-attack-r29 F3). Now it opens, ``W`` is missing its (whole) average: ``export``
refuses (exit 6) saying only some parts are averaged, ``--allow-missing`` writes ``W`` raw.

Truth: ``sess.run(ema.average(v))`` and ``sess.run(v)`` at save time (:func:`tf1_ema_run`)."""

from __future__ import annotations

import numpy as np
from helpers import run_cli
from helpers_tf1 import tf1_ema_run


def test_partly_averaged_partitioned_variable_opens(tf, tmp_path):
    run = tmp_path / "run"
    _, truth = tf1_ema_run(tf, run, lambda e, vs, gs: None, partitioned=True, skip_part=True)
    assert "ema:W/part_0" in truth and "ema:W/part_1" not in truth
    raw_w = np.concatenate([truth["raw:W/part_0"], truth["raw:W/part_1"]])
    for args in (["list"], ["show", str(run), "V"], ["stats"], ["verify"]):
        code, _, err = run_cli([args[0], str(run), *args[1:]] if len(args) == 1 else args)
        assert code == 0, (args, err)
    code, _, err = run_cli(["export", str(run), "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "only some of its parts" in err and "--allow-missing" in err, err
    assert "not in the checkpoint" not in err and "var_list left it out" not in err, err
    code, _, err = run_cli(["export", str(run), "--allow-missing",
                            "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as got:
        assert got["W"].tobytes() == raw_w.tobytes()
        for n in ("V", "b"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
    code, _, err = run_cli(["export", str(run), "--raw", "--out", str(tmp_path / "r.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as got:
        assert got["W"].tobytes() == raw_w.tobytes()
        for n in ("V", "b"):
            assert got[n].tobytes() == truth[f"raw:{n}"].tobytes(), n


def test_restore_ema_says_the_partial_average_is_not_written(tf, tmp_path):
    run = tmp_path / "run"
    _, truth = tf1_ema_run(tf, run, lambda e, vs, gs: None, partitioned=True, skip_part=True)
    code, _, err = run_cli(["restore-ema", str(run), "--allow-missing",
                            "--out", str(tmp_path / "re")])
    assert code == 0, err
    assert "W/ExponentialMovingAverage" in err and "was not written" in err, err
    assert not list((tmp_path / "re").glob("*.meta"))  # its Saver would miss the key
    code, _, err = run_cli(["export", str(tmp_path / "re"), "--raw",
                            "--out", str(tmp_path / "r.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as got:
        assert got["W"].tobytes() == np.concatenate(
            [truth["raw:W/part_0"], truth["raw:W/part_1"]]).tobytes()
        for n in ("V", "b"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n


def test_average_refuses_rather_than_drop_the_partial_average(tf, tmp_path):
    for step, run in ((3, tmp_path / "a"), (4, tmp_path / "b")):
        tf1_ema_run(tf, run, lambda e, vs, gs: None, partitioned=True, skip_part=True,
                    steps=step)
    code, _, err = run_cli(["average", str(tmp_path / "a"), str(tmp_path / "b"),
                            "--out", str(tmp_path / "av")])
    assert code == 5, err
    assert "W/ExponentialMovingAverage" in err and "only some parts" in err, err
    assert not (tmp_path / "av").exists()
