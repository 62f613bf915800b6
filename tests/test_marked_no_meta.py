"""``--no-meta`` over a graph that decides or doubts an input's names is recorded in the
output's ``_CKPT_TOOLS_RECORD`` (review-29-attack-r107 F3).

``ckpt restore-ema swap/model.ckpt-3 --no-meta`` of a swapping Saver's run saved without its
own ``.meta`` (refused without a statement: ``model.ckpt-1.meta`` beside it records the swap)
wrote the raw weights under the plain names, exit 0, and recorded nothing: every read of the
output, copied or not, then said "EMA values" with no note. ``--not-swapped`` is recorded and
repeated; ``--no-meta`` now is too (``stated.no_meta``, a note on every read, ``--json``
``written_under``), with a warning when writing. Truth: ``sess.run`` of ``ema.average(v)`` and
``v`` at each save of real TF1 Savers (``_sibling_runs.RUN``: a swapping Saver saving its graph
at the first save, or at every save; a default ``Saver()``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _sibling_runs import RUN
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from test_marked_outputs import KEY, NAMES, _copy

SCRIPT = RUN + '''
run("swap", True)
run("every", True, every=True)
run("plain", False)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("marked_no_meta")
    truth = run_tf1_script(SCRIPT, out)
    return out, truth


def _said_no_meta(ckpt, tmp_path) -> dict[str, np.ndarray]:
    """Exports ``ckpt`` (--json): exit 0, the note and ``written_under`` say --no-meta
    wrote it; returns the exported arrays."""
    target = tmp_path / "e.npz"
    code, text, err = run_cli(["export", str(ckpt), "--out", str(target), "--json", "--force"])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["written_under"] == {"no_meta": True}, doc  # was absent: nothing recorded
    assert any("--no-meta" in n and KEY in n for n in doc["notes"]), doc
    with np.load(target) as z:
        return {k: z[k] for k in z.files}


def test_restore_ema_no_meta_over_a_sibling_graphs_doubt_is_recorded(made, tmp_path):
    """F3: the input refused without a statement; with --no-meta written (the keys named as
    averages: the raw weights), warned, and every read (in place, .index + .data copied)
    says --no-meta wrote it."""
    out, truth = made
    code, _, err = run_cli(["restore-ema", str(out / "swap/model.ckpt-3"),
                            "--out", str(tmp_path / "x")])
    assert code == 6, err
    code, _, err = run_cli(["restore-ema", str(out / "swap/model.ckpt-3"), "--no-meta",
                            "--out", str(tmp_path / "nm")])
    line = " ".join(err.split())
    assert code == 0, err
    assert "--no-meta: not read: model.ckpt-1.meta" in line and KEY in line, err
    copy = _copy(tmp_path / "nm", "model.ckpt-3", tmp_path / "copy", only=(".index", ".data"))
    for ckpt in (tmp_path / "nm/model.ckpt-3", copy):
        got = _said_no_meta(ckpt, tmp_path)
        for key in NAMES:  # what --no-meta took for the averages: the swap's raw weights
            np.testing.assert_array_equal(got[key], truth[f"swap:3:raw:{key}"])


def _refused_by_own_graph(args, prefix) -> None:
    """``ckpt <args>`` exits 6 with the own-graph refusal: the graph named, what its save op
    wrote, and the way past it (leave out --no-meta)."""
    code, _, err = run_cli(args)
    line = " ".join(err.split())
    assert code == 6, err
    assert f"{prefix}: --no-meta pairs its keys by their names, but its own graph " \
           f"{prefix.name}.meta beside it" in line and "a swapping Saver wrote it" in line, err
    assert "drop --no-meta to read the keys through that graph" in line, err


def test_no_meta_beside_its_own_swapping_graph_is_refused(made, tmp_path):
    """review-30-attack-r110 F6: the run saved with a .meta each time, under --no-meta:
    restore-ema (was: exit 0, the raw weights under the plain names), map and export refuse,
    naming its own graph; without --no-meta that graph reads the averages. The .index + .data
    copy without any graph still reads by names (the documented limit of --no-meta)."""
    out, truth = made
    prefix = out / "every/model.ckpt-3"
    _refused_by_own_graph(["restore-ema", str(prefix), "--no-meta", "--out",
                           str(tmp_path / "nm")], prefix)
    assert not (tmp_path / "nm").exists()
    _refused_by_own_graph(["map", str(prefix), "--no-meta"], prefix)
    _refused_by_own_graph(["export", str(prefix), "--no-meta", "--out",
                           str(tmp_path / "e.npz")], prefix)
    code, _, err = run_cli(["export", str(prefix), "--out", str(tmp_path / "g.npz")])
    assert code == 0, err
    with np.load(tmp_path / "g.npz") as z:
        for key in NAMES:  # through the graph: the averages
            np.testing.assert_array_equal(z[key], truth[f"every:3:avg:{key}"])
    # --raw --no-meta (the keys as stored) stays, saying what the graph shows of them
    code, _, err = run_cli(["export", str(prefix), "--no-meta", "--raw", "--out",
                            str(tmp_path / "r.npz")])
    line = " ".join(err.split())
    assert code == 0, err
    assert "these are the averages" not in line and "its own graph model.ckpt-3.meta" in line \
        and "hold averages, not raw weights" in line, err
    with np.load(tmp_path / "r.npz") as z:
        for key in NAMES:  # the swapping Saver's plain names: the averages
            np.testing.assert_array_equal(z[key], truth[f"every:3:avg:{key}"])
    code, text, err = run_cli(["list", str(prefix), "--no-meta"])
    assert code == 0 and "no option decides" in text + err, text + err  # left open
    copy = _copy(out / "every", "model.ckpt-3", tmp_path / "copy", only=(".index", ".data"))
    code, _, err = run_cli(["restore-ema", str(copy), "--no-meta", "--out",
                            str(tmp_path / "c")])
    assert code == 0, err  # nothing beside it shows the swap: read by names


def test_average_bake_no_meta_over_their_own_graph_is_refused(made, tmp_path):
    """average --ema --bake --no-meta of the run saved with a .meta each time (was: exit 0,
    the mean of the raw weights baked as "EMA shadows") is refused by the inputs' own graph,
    and so is a swapping run's checkpoint averaged with a plain run's, whichever is newest
    (average_graphs reads the inputs' own graphs; the refusal holds under --no-meta)."""
    out, _ = made
    newest = out / "every/model.ckpt-3"
    _refused_by_own_graph(["average", str(newest), str(out / "every/model.ckpt-2"), "--ema",
                           "--bake", "--no-meta", "--out", str(tmp_path / "b")], newest)
    assert not (tmp_path / "b").exists()
    swapping, plain = str(out / "every/model.ckpt-2"), str(out / "plain/model.ckpt-3")
    for last in (swapping, plain):
        code, _, err = run_cli(["average", swapping, plain, "--newest", last, "--ema",
                                "--bake", "--no-meta", "--out", str(tmp_path / "m")])
        assert code == 6, err
        assert not (tmp_path / "m").exists()


def test_no_meta_over_nothing_that_doubts_records_nothing(made, tmp_path):
    """A plain run's checkpoint without a .meta (its prefix's graph agrees with the names):
    --no-meta silences nothing, so nothing is recorded or warned of (unchanged)."""
    out, truth = made
    code, _, err = run_cli(["restore-ema", str(out / "plain/model.ckpt-3"), "--no-meta",
                            "--out", str(tmp_path / "nm")])
    assert code == 0 and "--no-meta" not in err, err
    code, text, err = run_cli(["export", str(tmp_path / "nm/model.ckpt-3"), "--json",
                               "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    assert "written_under" not in json.loads(text)
    with np.load(tmp_path / "e.npz") as z:
        for key in NAMES:
            np.testing.assert_array_equal(z[key], truth[f"plain:3:avg:{key}"])


def test_a_no_meta_output_with_no_graph_is_not_offered_one(made, tmp_path):
    """review-30-attack-r112 F3: restore-ema --no-meta of the .index + .data copy of a swapping
    run's (marked) average writes no graph and records --no-meta beside the doubt; reading it
    is refused without offering to copy "that graph" beside it (none was written with it), and
    export --raw --no-meta does not say "these are the averages" of its plain names, which
    hold the mean of the RAW weights."""
    out, truth = made
    code, _, err = run_cli(["average", str(out / "every/model.ckpt-3"),
                            str(out / "every/model.ckpt-2"), "--out", str(tmp_path / "a")])
    assert code == 0, err
    copy = _copy(tmp_path / "a", "model.ckpt-3", tmp_path / "copy", only=(".index", ".data"))
    code, _, err = run_cli(["restore-ema", str(copy), "--no-meta", "--out",
                            str(tmp_path / "nm")])
    assert code == 0, err
    written = tmp_path / "nm/model.ckpt-3"
    code, _, err = run_cli(["export", str(written), "--out", str(tmp_path / "e.npz")])
    line = " ".join(err.split())
    assert code == 6, err
    assert "Copy it with that graph" not in line and "written under --no-meta, with no " \
        "graph beside it" in line and "without --no-meta" in line, err
    code, _, err = run_cli(["export", str(written), "--raw", "--no-meta", "--out",
                            str(tmp_path / "r.npz")])
    line = " ".join(err.split())
    assert code == 0, err
    assert "these are the averages" not in line and "not proven averages" in line, err
    with np.load(tmp_path / "r.npz") as z:
        for key in NAMES:  # the mean of the swapping Saver's keys named as averages: RAW
            want = (truth[f"every:3:raw:{key}"].astype(np.float64)
                    + truth[f"every:2:raw:{key}"]) / 2
            np.testing.assert_allclose(z[key], want, rtol=1e-6)


def test_no_meta_reading_a_marked_copy_by_names_alone_is_refused(made, tmp_path):
    """s32l: the .index + .data copy of ckpt average's output of the swapping run saved with
    a .meta each time carries the mark doubting its names; export / map --no-meta (and the
    Python API with use_meta=False) read the names alone and exported its keys named as
    averages -- the mean of the swapping Saver's RAW weights -- as the EMA values, exit 0, no
    warning. Refused (exit 6) naming the mark and --not-swapped; export --raw --no-meta (the
    keys as stored) and restore-ema --no-meta (whose v2 output records it) still write, an
    .h5 output (no mark) is refused, and so is reading restore-ema's --no-meta output so."""
    from ckpt_tools import ema_map, export_weights
    from ckpt_tools.errors import UnprovenPairingError

    out, truth = made
    code, _, err = run_cli(["average", str(out / "every/model.ckpt-3"),
                            str(out / "every/model.ckpt-2"), "--out", str(tmp_path / "a")])
    assert code == 0, err
    copy = _copy(tmp_path / "a", "model.ckpt-3", tmp_path / "copy", only=(".index", ".data"))
    raw = {k: (truth[f"every:3:raw:{k}"].astype(np.float64) + truth[f"every:2:raw:{k}"]) / 2
           for k in NAMES}  # what the keys named as averages hold: no average at all
    for args in (["export", str(copy), "--no-meta", "--out", str(tmp_path / "e.npz")],
                 ["map", str(copy), "--no-meta"],
                 ["restore-ema", str(copy), "--no-meta", "--format", "h5",
                  "--out", str(tmp_path / "h")]):
        code, _, err = run_cli(args)
        line = " ".join(err.split())
        assert code == 6, (args, err)  # was 0: the raw means exported as EMA values
        assert f"{copy}: --no-meta pairs its keys by their names alone, but its {KEY} key " \
               "says ckpt average wrote it" in line and "pass --not-swapped" in line \
               and "ckpt export --raw --no-meta" in line, err
    assert not (tmp_path / "e.npz").exists() and not (tmp_path / "h").exists()
    for call in (lambda: ema_map(str(copy), use_meta=False),
                 lambda: export_weights(str(copy), str(tmp_path / "p.npz"), use_meta=False)):
        with pytest.raises(UnprovenPairingError, match="--not-swapped"):
            call()
    code, _, err = run_cli(["export", str(copy), "--raw", "--no-meta", "--out",
                            str(tmp_path / "r.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as z:  # the swapping Saver's plain names: the averages
        for key in NAMES:
            want = (truth[f"every:3:avg:{key}"].astype(np.float64)
                    + truth[f"every:2:avg:{key}"]) / 2
            np.testing.assert_allclose(z[key], want, rtol=1e-6)
            assert not np.allclose(want, raw[key])
    code, _, err = run_cli(["restore-ema", str(copy), "--no-meta", "--out",
                            str(tmp_path / "nm")])  # the recorded statement (r107 F3): kept
    assert code == 0, err
    code, _, err = run_cli(["export", str(tmp_path / "nm/model.ckpt-3"), "--no-meta",
                            "--out", str(tmp_path / "n.npz")])
    line = " ".join(err.split())
    assert code == 6 and "written under --no-meta" in line, err


def test_no_meta_past_a_graph_of_its_prefix_that_doubts_its_names_warns(made, tmp_path):
    """s33c (s32l "Left"): the swapping run saved its graph at the first save only; read with
    --no-meta, model.ckpt-3 (no .meta of its own, no mark) is paired by its names alone -- the
    documented risk of --no-meta -- and its keys named as averages, the RAW weights, were
    exported as the EMA values with no warning. Still read (exit 0), now with one warning
    line naming the graph left unread (in --json's "warnings"); export, map and diff --ema
    alike, the Python export's warnings too. Nothing warned where no graph doubts the names
    (the plain run), nor for --raw (its own warning)."""
    from ckpt_tools import export_weights

    out, truth = made
    prefix = out / "swap/model.ckpt-3"
    said = f"{prefix}: --no-meta left unread model.ckpt-1.meta beside it, whose save op wrote "
    code, text, err = run_cli(["export", str(prefix), "--no-meta", "--json", "--out",
                               str(tmp_path / "e.npz")])
    assert code == 0, err
    assert " ".join(err.split()).count(said) == 1, err
    assert [w for w in json.loads(text)["warnings"] if w.startswith(said)], text
    with np.load(tmp_path / "e.npz") as z:  # why it warns: the swapping Saver's raw weights
        for key in NAMES:
            np.testing.assert_array_equal(z[key], truth[f"swap:3:raw:{key}"])
    for args in (["map", str(prefix), "--no-meta"], ["diff", str(prefix), "--ema", "--no-meta"]):
        code, _, err = run_cli(args)
        assert code == 0 and " ".join(err.split()).count(said) == 1, (args, err)
    code, text, err = run_cli(["diff", str(prefix), "--ema", "--no-meta", "--json"])
    assert code == 0 and [w for w in json.loads(text)["warnings"] if w.startswith(said)], text
    result = export_weights(str(prefix), str(tmp_path / "p.npz"), use_meta=False)
    assert [w for w in result.warnings if w.startswith(said)], result.warnings
    for args in (["export", str(out / "plain/model.ckpt-3"), "--no-meta", "--out",
                  str(tmp_path / "q.npz")], ["map", str(out / "plain/model.ckpt-3"), "--no-meta"],
                 ["export", str(prefix), "--no-meta", "--raw", "--out", str(tmp_path / "r.npz")]):
        code, _, err = run_cli(args)
        assert code == 0 and "--no-meta left unread" not in err, (args, err)
