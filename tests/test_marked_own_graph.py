"""Marks of averages whose inputs' OWN graph shows their names mislead, and own graphs that
are not the one an output was written with (review-29-attack-r107).

F1: ``ckpt average`` of a swapping Saver's run saved with a ``.meta`` at every save (TF's
default) wrote no ``_CKPT_TOOLS_RECORD``; its ``.index`` + ``.data`` copied exported the mean
of the raw weights as "EMA values", exit 0. Truth: ``sess.run`` of ``ema.average(v)`` and
``v`` at each save of a real TF1 swapping Saver (``_sibling_runs.RUN``)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from _sibling_runs import RUN
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from test_marked_outputs import KEY, NAMES, _copy

SCRIPT = RUN + '''
run("swap", True)
run("every", True, every=True)

# the model's eval graph: its variables under their own names, restored by
# Saver(ema.variables_to_restore()) (the usual way to load averages for serving)
with tf.Graph().as_default():
    with tf1.variable_scope("model"):
        w = tf1.get_variable("W", [4, 2])
        v = tf1.get_variable("V", [2])
    ema = tf1.train.ExponentialMovingAverage(0.9)
    tf1.train.Saver(ema.variables_to_restore())
    tf1.train.export_meta_graph(f"{out}/eval.meta")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("marked_own_graph")
    truth = run_tf1_script(SCRIPT, out)
    return out, truth


def _mean(truth, run: str, kind: str, key: str) -> np.ndarray:
    return np.mean([truth[f"{run}:{i}:{kind}:{key}"].astype(np.float64) for i in (2, 3)],
                   axis=0)


def test_average_of_a_run_with_its_own_swapping_graph_is_marked(made, tmp_path):
    """F1: in place (its own .meta beside it) the averages; copied as .index + .data only,
    refused (exit 6) naming the mark, not the mean of the raw weights as the averages."""
    out, truth = made
    code, _, err = run_cli(["average", str(out / "every/model.ckpt-3"),
                            str(out / "every/model.ckpt-2"), "--out", str(tmp_path / "avg")])
    assert code == 0 and (tmp_path / "avg/model.ckpt-3.meta").exists(), err
    code, _, err = run_cli(["export", str(tmp_path / "avg/model.ckpt-3"),
                            "--out", str(tmp_path / "a.npz")])
    assert code == 0, err
    with np.load(tmp_path / "a.npz") as z:  # its own graph: the averages' mean
        for key in NAMES:
            np.testing.assert_allclose(z[key], _mean(truth, "every", "avg", key), rtol=1e-5)
    for dest, stem in (("copy", None), ("best", "best")):
        ckpt = _copy(tmp_path / "avg", "model.ckpt-3", tmp_path / dest, stem,
                     only=(".index", ".data"))
        for cmd in (["export", str(ckpt), "--out", str(tmp_path / f"{dest}.npz")],
                    ["restore-ema", str(ckpt), "--out", str(tmp_path / f"{dest}-ema")],
                    # a real swap's doubt: no evaluation re-save's statement lifts it (r112 F2)
                    ["export", str(ckpt), "--averages-only",
                     "--out", str(tmp_path / f"{dest}.npz")]):
            code, _, err = run_cli(cmd)
            line = " ".join(err.split())
            assert code == 6, (cmd, err)  # was 0: the raw weights' mean as "EMA values"
            assert KEY in line and "model.ckpt-3.meta" in line and "--not-swapped" in line, err
        assert not (tmp_path / f"{dest}.npz").exists()


def test_a_graph_placed_beside_a_marked_average_is_not_its_graph(made, tmp_path):
    """F2: the model's eval graph (Saver(ema.variables_to_restore())) as the own .meta of a
    marked average (renamed copy, and in place) read the raw weights' mean as the averages,
    exit 0; refused (exit 6) naming that file and --not-swapped. The options that decide
    for the mark (--not-swapped, --raw --no-meta) still do."""
    import shutil

    out, truth = made
    code, _, err = run_cli(["average", str(out / "swap/model.ckpt-3"),
                            str(out / "swap/model.ckpt-2"), "--out", str(tmp_path / "avg")])
    assert code == 0 and not (tmp_path / "avg/model.ckpt-3.meta").exists(), err
    best = _copy(tmp_path / "avg", "model.ckpt-3", tmp_path / "best", "best",
                 only=(".index", ".data"))
    shutil.copy(out / "eval.meta", tmp_path / "best/best.meta")
    shutil.copy(out / "eval.meta", tmp_path / "avg/model.ckpt-3.meta")
    for ckpt, meta in ((best, "best.meta"), (tmp_path / "avg/model.ckpt-3", "model.ckpt-3.meta")):
        for cmd in (["export", str(ckpt), "--out", str(tmp_path / "e.npz")],
                    ["restore-ema", str(ckpt), "--out", str(tmp_path / "ema")],
                    ["map", str(ckpt), "--json"]):
            code, _, err = run_cli(cmd)
            line = " ".join(err.split())
            assert code == 6, (cmd, err)  # was 0: the raw weights' mean as the averages
            assert KEY in line and meta in line and "--not-swapped" in line, err
        assert not (tmp_path / "e.npz").exists() and not (tmp_path / "ema").exists()
    code, _, err = run_cli(["export", str(best), "--raw", "--no-meta",
                            "--out", str(tmp_path / "s.npz")])
    assert code == 0, err
    with np.load(tmp_path / "s.npz") as z:  # the keys as stored: the averages' mean
        for key in NAMES:
            np.testing.assert_allclose(z[key], _mean(truth, "swap", "avg", key), rtol=1e-5)


def test_no_meta_does_not_lift_the_marks_doubt_for_ema(made, tmp_path):
    """F4: average --ema --bake --no-meta of renamed marked averages baked the mean of the
    raw weights into the plain names, exit 0 (the original inputs are refused): refused
    (exit 6) naming the mark and --not-swapped."""
    out, _ = made
    code, _, err = run_cli(["average", str(out / "swap/model.ckpt-3"),
                            str(out / "swap/model.ckpt-2"), "--out", str(tmp_path / "a3")])
    assert code == 0, err
    b3 = _copy(tmp_path / "a3", "model.ckpt-3", tmp_path / "m", "best3", only=(".index", ".data"))
    b2 = _copy(tmp_path / "a3", "model.ckpt-3", tmp_path / "m", "best2", only=(".index", ".data"))
    for extra in ([], ["--bake", "--no-meta"]):
        code, _, err = run_cli(["average", str(b3), str(b2), "--newest", str(b3), "--ema",
                                *extra, "--out", str(tmp_path / "b")])
        line = " ".join(err.split())
        assert code == 6 and KEY in line and "--not-swapped" in line, (extra, err)
        # said only where --no-meta was given (it was said without it: r110 F3 wording)
        assert ("--no-meta does not decide" in line) == bool(extra), (extra, err)
        assert not (tmp_path / "b").exists()


def test_restore_ema_of_a_marked_average_beside_its_graph_keeps_the_graphs_digest(made, tmp_path):
    """s29h "Seen": restore-ema of the F1-marked average in place (its graph beside it) wrote
    its graph beside the output but the mark without graph_sha256, so every read of the
    output was refused though its plain names hold the averages. The digest is kept where the
    graph is written beside the output: read in place, the averages' mean. Every key of it
    then holds the averages (restore-ema wrote each shadow's too), so its .index + .data
    copy reads them as well, no mark left (review-31-attack-r114 F1)."""
    out, truth = made
    code, _, err = run_cli(["average", str(out / "every/model.ckpt-3"),
                            str(out / "every/model.ckpt-2"), "--out", str(tmp_path / "avg")])
    assert code == 0, err
    code, _, err = run_cli(["restore-ema", str(tmp_path / "avg/model.ckpt-3"),
                            "--out", str(tmp_path / "r")])
    assert code == 0 and (tmp_path / "r/model.ckpt-3.meta").exists(), err
    code, _, err = run_cli(["export", str(tmp_path / "r/model.ckpt-3"),
                            "--out", str(tmp_path / "r.npz")])
    assert code == 0, err  # was 6: the mark without the digest of the graph beside it
    with np.load(tmp_path / "r.npz") as z:
        for key in NAMES:
            np.testing.assert_allclose(z[key], _mean(truth, "every", "avg", key), rtol=1e-5)
    copy = _copy(tmp_path / "r", "model.ckpt-3", tmp_path / "copy", only=(".index", ".data"))
    code, _, err = run_cli(["export", str(copy), "--out", str(tmp_path / "c.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as z, np.load(tmp_path / "c.npz") as c:
        for key in NAMES:
            np.testing.assert_array_equal(c[key], z[key])


def _averaged(truth, steps) -> dict:
    """What each key of ``average`` over ``every``'s ``steps`` holds for it, in float32 as
    the average writes it: the mean of ``sess.run(ema.average(v))``."""
    return {k: (sum(truth[f"every:{i}:avg:{k}"].astype(np.float64) for i in steps)
                / len(steps)).astype(np.float32) for k in NAMES}


def test_bakes_of_marked_averages_that_write_every_key_averaged_carry_no_mark(made, tmp_path):
    """review-31-attack-r114 F1: restore-ema --strip-scope/--add-scope of the F1-marked
    average (no graph fits the renamed keys, so none is written) and average --ema --bake of
    two such averages write the averages under every key, yet kept the carried names_doubted:
    every read of the output (or of its .index+.data copy) was refused (exit 6) saying a graph
    was renamed or copied away. No mark now; each reads the averages' mean."""
    out, truth = made
    for a, b in (("a3", 3), ("a2", 2)):
        code, _, err = run_cli(["average", str(out / f"every/model.ckpt-{b}"),
                                str(out / f"every/model.ckpt-{b - 1}"),
                                "--out", str(tmp_path / a)])
        assert code == 0, err
    a3 = tmp_path / "a3/model.ckpt-3"
    one = _averaged(truth, (3, 2))
    for opts, names in ((["--strip-scope", "model/"], {k: k[6:] for k in NAMES}),
                        (["--add-scope", "net/"], {k: f"net/{k}" for k in NAMES})):
        code, _, err = run_cli(["restore-ema", str(a3), *opts, "--out", str(tmp_path / "r")])
        assert code == 0 and not (tmp_path / "r/model.ckpt-3.meta").exists(), err
        code, listed, _ = run_cli(["list", str(tmp_path / "r/model.ckpt-3")])
        assert KEY not in listed
        code, _, err = run_cli(["export", str(tmp_path / "r/model.ckpt-3"),
                                "--out", str(tmp_path / "r.npz")])
        assert code == 0, (opts, err)  # was 6: "no such graph is beside it now"
        with np.load(tmp_path / "r.npz") as z:
            for key, name in names.items():
                np.testing.assert_array_equal(z[name], one[key])
        shutil.rmtree(tmp_path / "r")
        (tmp_path / "r.npz").unlink()
    code, _, err = run_cli(["average", str(a3), str(tmp_path / "a2/model.ckpt-2"), "--ema",
                            "--bake", "--out", str(tmp_path / "eb")])
    assert code == 0, err
    copy = _copy(tmp_path / "eb", "model.ckpt-3", tmp_path / "c", only=(".index", ".data"))
    code, _, err = run_cli(["export", str(copy), "--out", str(tmp_path / "c.npz")])
    assert code == 0, err  # was 6: the carried doubt, with no graph beside the copy
    b = _averaged(truth, (2, 1))  # the mean of the two averages' float32 values
    with np.load(tmp_path / "c.npz") as z:
        for key in NAMES:
            want = ((one[key].astype(np.float64) + b[key]) / 2).astype(np.float32)
            np.testing.assert_array_equal(z[key], want)


def test_an_average_of_marked_copies_is_refused_for_their_marks(made, tmp_path):
    """review-30-attack-r110 F4: the average of a marked average's .index + .data copies wrote
    a carried.json whose refusal said their other graphs could not be known ("no listing over
    http(s), or more graphs ... than the 16 read over a URL") and offered only --no-meta (the
    raw weights' mean paired as the averages): local, listed inputs refused for their MARK.
    The output is refused for the mark it carries, naming what decides it."""
    out, truth = made
    code, _, err = run_cli(["average", str(out / "swap/model.ckpt-3"),
                            str(out / "swap/model.ckpt-2"), "--out", str(tmp_path / "a3")])
    assert code == 0, err
    b3 = _copy(tmp_path / "a3", "model.ckpt-3", tmp_path / "m", "best3", only=(".index", ".data"))
    b2 = _copy(tmp_path / "a3", "model.ckpt-3", tmp_path / "m", "best2", only=(".index", ".data"))
    code, _, err = run_cli(["average", str(b3), str(b2), "--newest", str(b3),
                            "--out", str(tmp_path / "o")])
    assert code == 0, err
    assert not (tmp_path / "o/best3.carried.json").exists()
    code, _, err = run_cli(["export", str(tmp_path / "o/best3"), "--out", str(tmp_path / "e.npz")])
    line = " ".join(err.split())
    assert code == 6 and KEY in line and "--not-swapped" in line, err
    assert "no listing" not in line and "read over a URL" not in line, err
    code, _, err = run_cli(["export", str(tmp_path / "o/best3"), "--raw", "--no-meta",
                            "--out", str(tmp_path / "r.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as z:  # the keys as stored: the averages' mean
        for key in NAMES:
            np.testing.assert_allclose(z[key], _mean(truth, "swap", "avg", key), rtol=1e-5)
