"""Outputs that cannot mislead when their sidecar records are lost (review-28-attack-r105 F1-F5).

``ckpt average`` of a swapping run's meta-less checkpoints and ``ckpt restore-ema
--averages-only`` kept what their output's names cannot say in sidecar files
(``<name>.carried.json`` and the carried graph, ``<name>.restored.json``). Renamed (F1, F4),
copied to ``s3://`` without the graph (F2), symlinked (F3), copied as ``.index`` + ``.data``
only, or written to ``s3://`` by restore-ema (F5), the output read as proven averages: the raw
weights exported as "EMA values", exit 0. The record now lives inside the bundle, the key
``_CKPT_TOOLS_RECORD`` (:mod:`ckpt_tools.tools_mark`): a doubted average is refused (exit 6,
``--not-swapped``) wherever no graph beside it doubts it, an ``--averages-only`` output repeats
its warning wherever it is read, and TensorFlow itself (a TF1 ``Saver``, ``load_checkpoint``)
reads the output as before. Truth: ``sess.run`` of ``ema.average(v)`` and ``v`` at each save
of real TF1 Savers (a swapping Saver; a training ``Saver(ema.variables_to_restore())``)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from _sibling_runs import RUN
from helpers import run_cli
from helpers_tf1 import run_tf1_script

KEY = "_CKPT_TOOLS_RECORD"
NAMES = ("model/W", "model/V")
SCRIPT = RUN + '''
run("swap", True)

# a training graph saved by Saver(ema.variables_to_restore()): the keys named as averages
# (W/ExponentialMovingAverage) hold the RAW weights
with tf.Graph().as_default():
    gs = tf1.train.get_or_create_global_step()
    W = tf1.get_variable("W", [3, 2])
    V = tf1.get_variable("V", [2], initializer=tf1.constant_initializer(0.3))
    loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([4, 3]), W) + V - 1.0))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        step = ema.apply([W, V])
    saver = tf1.train.Saver(ema.variables_to_restore())
    with trained(tf, step, 3) as s:
        saver.save(s, f"{out}/vtr/model.ckpt", global_step=3)
        for x in (W, V):
            truth[f"vtr:avg:{x.op.name}"] = s.run(ema.average(x))
            truth[f"vtr:raw:{x.op.name}"] = s.run(x)
'''

# TensorFlow reads our marked outputs: a TF1 Saver restores the keys it names (the mark is
# not one of them) and load_checkpoint lists the mark.
CHECK = '''
avg, restored = sys.argv[2], sys.argv[3]
for prefix, names in ((avg, {"model/W": [4, 2], "model/V": [2]}),
                      (restored, {"W": [3, 2], "V": [2]})):
    with tf.Graph().as_default():
        vs = {n: tf1.get_variable(n, shape) for n, shape in names.items()}
        with tf1.Session() as s:
            tf1.train.Saver(vs).restore(s, prefix)
            for n, v in vs.items():
                truth[f"{os.path.basename(os.path.dirname(prefix))}:{n}"] = s.run(v)
    reader = tf.train.load_checkpoint(prefix)
    assert "_CKPT_TOOLS_RECORD" in reader.get_variable_to_dtype_map()
    truth[f"{os.path.basename(os.path.dirname(prefix))}:mark"] = np.array(
        reader.get_tensor("_CKPT_TOOLS_RECORD"))
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("marked_outputs")
    truth = run_tf1_script(SCRIPT, out)
    code, _, err = run_cli(["average", str(out / "swap/model.ckpt-3"),
                            str(out / "swap/model.ckpt-2"), "--out", str(out / "avg")])
    assert code == 0 and (out / "avg/model.ckpt-1.meta").exists(), err
    code, _, err = run_cli(["restore-ema", str(out / "vtr"), "--averages-only",
                            "--out", str(out / "r")])
    assert code == 0 and (out / "r/model.ckpt-3.restored.json").exists(), err
    return out, truth


def _mean(truth, kind: str, key: str) -> np.ndarray:
    return np.mean([truth[f"swap:{i}:{kind}:{key}"].astype(np.float64) for i in (2, 3)], axis=0)


def _copy(src_dir, stem: str, dest, new_stem: str | None = None, *, only=None, link=False):
    """Copies (or symlinks) ``src_dir/stem.*`` (``only``: those suffixes) to ``dest``, each
    renamed to ``new_stem.*``; returns the copy's prefix."""
    dest.mkdir(exist_ok=True)
    new_stem = new_stem or stem
    for f in sorted(src_dir.glob(stem + ".*")):
        suffix = f.name[len(stem):]
        if only is not None and not suffix.startswith(only):
            continue
        target = dest / (new_stem + suffix)
        if link:
            os.symlink(f, target)
        else:
            shutil.copy(f, target)
    return dest / new_stem


def _refused(ckpt, tmp_path) -> None:
    """Every command handing values back refuses ``ckpt`` naming the mark, exit 6."""
    for cmd in (["export", str(ckpt), "--out", str(tmp_path / "d.npz")],
                ["restore-ema", str(ckpt), "--out", str(tmp_path / "ema")],
                ["map", str(ckpt), "--json"]):
        code, _, err = run_cli(cmd)
        line = " ".join(err.split())
        assert code == 6, (cmd, err)  # was 0: the mean of the raw weights as the averages
        assert KEY in line and "model.ckpt-1.meta" in line and "--not-swapped" in line, err
        assert str(ckpt) in line, err
    assert not (tmp_path / "d.npz").exists() and not (tmp_path / "ema").exists()


def test_tensorflow_restores_the_outputs_and_lists_the_mark(made, tmp_path):
    out, truth = made
    got = run_tf1_script(CHECK, tmp_path, str(out / "avg/model.ckpt-3"),
                         str(out / "r/model.ckpt-3"))
    for key in NAMES:  # the swapping Saver's plain keys hold the averages: their mean
        np.testing.assert_allclose(got[f"avg:{key}"], _mean(truth, "avg", key), rtol=1e-6)
    for key in ("W", "V"):  # restore-ema wrote the keys --averages-only stated: the raw ones
        np.testing.assert_array_equal(got[f"r:{key}"], truth[f"vtr:raw:{key}"])
    doubted = json.loads(got["avg:mark"].item())["names_doubted"]
    assert doubted["graphs"] == ["model.ckpt-1.meta"]
    assert "averages_only" in json.loads(got["r:mark"].item())["stated"]


def test_the_mark_is_no_variable(made):
    out, _ = made
    for ckpt in (out / "avg/model.ckpt-3", out / "r/model.ckpt-3"):
        code, text, err = run_cli(["list", str(ckpt), "--json"])
        assert code == 0, err
        assert KEY not in [v["name"] for v in json.loads(text)["variables"]]


def test_renamed_with_all_its_files_is_refused(made, tmp_path):
    """F1: best.index, best.data, best.carried.json and model.ckpt-1.meta beside them."""
    out, _ = made
    ckpt = _copy(out / "avg", "model.ckpt-3", tmp_path / "best", "best")
    shutil.copy(out / "avg/model.ckpt-1.meta", tmp_path / "best")
    _refused(ckpt, tmp_path)


def test_index_and_data_only_is_refused(made, tmp_path):
    out, _ = made
    ckpt = _copy(out / "avg", "model.ckpt-3", tmp_path / "dest", only=(".index", ".data"))
    _refused(ckpt, tmp_path)


def test_symlinked_is_refused(made, tmp_path):
    """F3: ln -s avg/model.ckpt-3.* dest/ (the record a symlink too)."""
    out, _ = made
    ckpt = _copy(out / "avg", "model.ckpt-3", tmp_path / "dest", link=True)
    _refused(ckpt, tmp_path)


def test_s3_copy_without_the_graph_is_refused(made, s3, tmp_path):
    """F2: the s3:// output's model.ckpt-3.* copied (record kept, graph left behind)."""
    from conftest import BUCKET
    from helpers import s3_keys

    out, _ = made
    code, _, err = run_cli(["average", str(out / "swap/model.ckpt-3"),
                            str(out / "swap/model.ckpt-2"), "--out", f"s3://{BUCKET}/m_avg"])
    assert code == 0, err
    for key in s3_keys(s3, "m_avg/"):
        if os.path.basename(key).startswith("model.ckpt-3."):
            s3["client"].copy_object(Bucket=BUCKET, Key="m_dest/" + os.path.basename(key),
                                     CopySource={"Bucket": BUCKET, "Key": key})
    code, _, err = run_cli(["export", f"s3://{BUCKET}/m_dest/model.ckpt-3",
                            "--out", str(tmp_path / "d.npz")])
    line = " ".join(err.split())
    assert code == 6 and KEY in line and "--not-swapped" in line, err
    assert not (tmp_path / "d.npz").exists()


def test_in_place_and_the_options_that_decide_behave_as_before(made, tmp_path):
    out, truth = made
    code, _, err = run_cli(["export", str(out / "avg/model.ckpt-3"),
                            "--out", str(tmp_path / "a.npz")])
    assert code == 6 and KEY not in err and "--not-swapped" in err, err  # the graph's doubt
    ckpt = _copy(out / "avg", "model.ckpt-3", tmp_path / "best", "best")
    code, _, err = run_cli(["export", str(ckpt), "--raw", "--no-meta",
                            "--out", str(tmp_path / "s.npz")])
    assert code == 0, err
    with np.load(tmp_path / "s.npz") as z:  # the keys as stored: the averages' mean
        assert KEY not in z.files
        for key in NAMES:
            np.testing.assert_allclose(z[key], _mean(truth, "avg", key), rtol=1e-6)
    code, _, err = run_cli(["export", str(ckpt), "--not-swapped",
                            "--out", str(tmp_path / "n.npz")])
    assert code == 0, err  # the user's statement decides, as for the input


def test_raw_no_meta_records_the_keys_as_stored(made, tmp_path):
    """review-33-attack-r128 F4: ``--raw --no-meta``, the keys as stored (the way out the swap
    refusals offer), recorded ``{"values": "raw"}`` over the averages a swapping Saver wrote
    there, which the input's own graph (left unread) or the copy's mark shows: ``"stored"``,
    as documented for keys that are the averages if a swapping Saver wrote them."""
    out, truth = made
    copied = _copy(out / "avg", "model.ckpt-3", tmp_path / "best", "best")
    for src, want in ((out / "swap/model.ckpt-1", lambda k: truth[f"swap:1:avg:{k}"]),
                      (copied, lambda k: _mean(truth, "avg", k))):
        dest = tmp_path / f"{src.name}.npz"
        code, said, err = run_cli(["export", str(src), "--raw", "--no-meta", "--out",
                                   str(dest)])
        assert code == 0, err
        assert _record(dest) == {"values": "stored"}, src  # was "raw"
        assert "as stored (the averages where a swapping Saver wrote them" in said, said
        line = " ".join(err.split())
        # m2: the copy's warning said "with --no-meta nothing read shows which of them hold
        # the averages" right after its mark, which says so, was read
        assert "nothing read shows" not in line, line
        assert src != copied or f"{KEY} key says ckpt average wrote it from inputs" in line, line
        with np.load(dest) as z:
            for key in NAMES:
                np.testing.assert_allclose(z[key], want(key), rtol=1e-6)


def test_outputs_of_a_marked_input_keep_its_doubt(made, tmp_path):
    """An average of the renamed output (nothing doubts it but its mark) is refused alike."""
    out, _ = made
    one = _copy(out / "avg", "model.ckpt-3", tmp_path / "one", "best")
    ckpt = _copy(out / "avg", "model.ckpt-3", tmp_path / "two", "best")
    code, _, err = run_cli(["average", str(one), str(ckpt), "--newest", str(ckpt),
                            "--out", str(tmp_path / "again")])
    assert code == 0, err
    moved = _copy(tmp_path / "again", "best", tmp_path / "moved", "final", only=(".index",
                                                                               ".data"))
    code, _, err = run_cli(["export", str(moved), "--out", str(tmp_path / "d.npz")])
    assert code == 6 and KEY in err, err
    # s32f: it named the carried doubt's own writer as moved's ("ckpt average wrote it from
    # inputs (swap/model.ckpt-2, ...)"): the average of one and two read no such input
    line = " ".join(err.split())
    assert "key says ckpt average wrote it from" not in line, err
    assert f"key says ckpt average wrote {one} and {ckpt} from inputs (" in line, err
    assert "doubts, and ckpt average carried that doubt into it" in line, err
    # ... and said its graph was lost "(renamed, or copied without it)", even where it lies
    # where it was written: that average wrote no graph beside it (s32f)
    for where in (moved, tmp_path / "again/best"):
        code, _, err = run_cli(["export", str(where), "--out", str(tmp_path / "d.npz")])
        line = " ".join(err.split())
        assert code == 6 and "ckpt average wrote no such graph beside it" in line, err
        assert "renamed, or copied without it" not in line, err


def _warned(ckpt, tmp_path, *cmds: str) -> None:
    """Every read of ``ckpt`` repeats --averages-only's warning, text and --json."""
    code, text, err = run_cli(["export", str(ckpt), "--json", "--force",
                               "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    warnings = " ".join(json.loads(text)["warnings"])
    assert "--averages-only" in warnings and "raw weights" in warnings, text
    for cmd in cmds:
        code, _, err = run_cli([cmd, str(ckpt)])
        said = " ".join(err.split())
        assert code == 0 and "warning:" in said and "--averages-only" in said, (cmd, err)


@pytest.mark.parametrize("case", ["renamed", "meta_less", "index_and_data"])
def test_averages_only_output_moved_repeats_the_warning(made, tmp_path, case):
    """F4: renamed with all its files, copied without its .meta, or .index + .data only."""
    out, _ = made
    if case == "renamed":
        ckpt = _copy(out / "r", "model.ckpt-3", tmp_path / "rn", "best")
    elif case == "meta_less":
        ckpt = _copy(out / "r", "model.ckpt-3", tmp_path / "nm",
                     only=(".index", ".data", ".restored.json"))
    else:
        ckpt = _copy(out / "r", "model.ckpt-3", tmp_path / "id", only=(".index", ".data"))
    _warned(ckpt, tmp_path, "list", "map")
    # ... and so does what restore-ema writes from it (the mark travels on)
    code, _, err = run_cli(["restore-ema", str(ckpt), "--out", str(tmp_path / "again")])
    assert code == 0 and "--averages-only" in err, err
    _warned(tmp_path / "again" / ckpt.name, tmp_path)


def test_averages_only_into_s3_repeats_the_warning(made, s3, tmp_path):
    """F5: restore-ema --averages-only into s3:// (no sidecar record there)."""
    from conftest import BUCKET

    out, _ = made
    code, _, err = run_cli(["restore-ema", str(out / "vtr"), "--averages-only",
                            "--out", f"s3://{BUCKET}/m_r"])
    assert code == 0, err
    code, text, err = run_cli(["export", f"s3://{BUCKET}/m_r/model.ckpt-3", "--json",
                               "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    warnings = " ".join(json.loads(text)["warnings"])
    assert "--averages-only" in warnings and KEY in warnings, text


def test_a_baked_average_repeats_the_statement_it_was_written_under(made, tmp_path):
    """average --ema --bake --not-swapped of the doubted inputs: no graph is carried (the
    statement decided), so every read of the output repeats that statement, --json too."""
    out, _ = made
    code, _, err = run_cli(["average", str(out / "swap/model.ckpt-3"),
                            str(out / "swap/model.ckpt-2"), "--ema", "--bake", "--not-swapped",
                            "--out", str(tmp_path / "ns")])
    assert code == 0 and not (tmp_path / "ns/model.ckpt-1.meta").exists(), err
    ckpt = _copy(tmp_path / "ns", "model.ckpt-3", tmp_path / "moved", "best")
    code, text, err = run_cli(["export", str(ckpt), "--json", "--out", str(tmp_path / "e.npz")])
    doc = json.loads(text)
    assert code == 0 and doc["written_under"] == {"not_swapped": True}, text
    assert any("--not-swapped" in n and KEY in n for n in doc["notes"]), text
    code, _, err = run_cli(["list", str(ckpt)])
    assert code == 0 and "--not-swapped" in err and KEY in " ".join(err.split()), err


def test_a_carried_statement_names_who_made_it_and_who_carried_it(made, tmp_path):
    """review-30-attack-r112 F1: an output written from a marked input said its own writer
    read its input under the statement ("ckpt restore-ema wrote <restore-ema's output> from
    an input read under --not-swapped"), though ckpt average made it over another output;
    now the note names the command that made it, over which output, and who carried it."""
    out, _ = made
    made_by = tmp_path / "ns/model.ckpt-3"
    code, _, err = run_cli(["average", str(out / "swap/model.ckpt-3"),
                            str(out / "swap/model.ckpt-2"), "--ema", "--bake", "--not-swapped",
                            "--out", str(made_by.parent)])
    assert code == 0, err
    code, _, err = run_cli(["restore-ema", str(made_by), "--out", str(tmp_path / "r")])
    assert code == 0, err
    again = _copy(tmp_path / "r", "model.ckpt-3", tmp_path / "two", "best")
    code, _, err = run_cli(["average", str(tmp_path / "r/model.ckpt-3"), str(again),
                            "--newest", str(again), "--out", str(tmp_path / "a")])
    assert code == 0, err
    for ckpt, carrier in ((tmp_path / "r/model.ckpt-3", "ckpt restore-ema"),
                          (tmp_path / "a/best", "ckpt average")):
        code, text, err = run_cli(["export", str(ckpt), "--json",
                                   "--out", str(tmp_path / "e.npz"), "--force"])
        doc = json.loads(text)
        assert code == 0 and doc["written_under"] == {"not_swapped": True}, text
        (note,) = [n for n in doc["notes"] if "--not-swapped" in n]
        note = " ".join(note.split())
        assert note.startswith(f"ckpt average wrote {made_by} from an input read under "
                               "--not-swapped"), note  # was: "<carrier> wrote <ckpt> ..."
        assert f"and {carrier} carried that statement into {ckpt}" in note, note


def test_a_carried_averages_only_caveat_names_who_made_it_and_who_carried_it(made, tmp_path):
    """s32f: ``ckpt average`` of restore-ema's ``--averages-only`` output (and a copy) said
    "ckpt restore-ema wrote <the average>'s variables from keys its input's --averages-only
    stated hold averages": restore-ema wrote no such file. The caveat names the command that
    made the statement, over which output, and the command that carried it."""
    out, _ = made
    made_by = out / "r/model.ckpt-3"
    again = _copy(out / "r", "model.ckpt-3", tmp_path / "two", "best", only=(".index", ".data"))
    code, _, err = run_cli(["average", str(made_by), str(again), "--newest", str(again),
                            "--out", str(tmp_path / "a")])
    assert code == 0, err
    ckpt = tmp_path / "a/best"
    code, text, err = run_cli(["export", str(ckpt), "--json", "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    (said,) = [" ".join(w.split()) for w in json.loads(text)["warnings"] if KEY in w]
    assert f"ckpt restore-ema wrote {ckpt}'s" not in said, said  # was: restore-ema wrote it
    assert said.startswith(f"ckpt restore-ema wrote the variables of {made_by} and {again} "
                           "from keys"), said
    assert f"--averages-only stated hold averages, and ckpt average carried that statement " \
           f"into {ckpt}" in said, said


def _record(path) -> dict:
    """What the export at ``path`` records of its values (export_record), in any format."""
    if path.suffix == ".npz":
        import zipfile

        with zipfile.ZipFile(path) as z:
            return json.loads(z.comment)["ckpt_tools"]
    if path.suffix == ".h5":
        import h5py

        with h5py.File(path, "r") as f:
            return json.loads(f.attrs["ckpt_tools"])
    import struct

    data = path.read_bytes()
    meta = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])["__metadata__"]
    return {k: v if k == "values" else json.loads(v) for k, v in meta.items()
            if k not in ("format", "source")}  # strings: lists and booleans as JSON


@pytest.mark.parametrize("fmt", ["npz", "safetensors", "h5"])
def test_exports_record_the_averages_only_statement(made, tmp_path, fmt):
    """review-33-attack-r128 F2: an export whose averages rest on ``--averages-only`` (given,
    or carried by restore-ema's mark) recorded ``{"values": "ema"}`` and nothing stated: its
    file called the training run's RAW weights the averages once it left the terminal."""
    out, truth = made
    one = ["--include", "W"] if fmt == "h5" else []  # (an .h5 layer: one weight by position)
    for src, opts, name in ((out / "vtr", ["--averages-only"], "given"),
                            (out / "r/model.ckpt-3", [], "carried"),
                            (out / "r/model.ckpt-3", ["--raw"], "raw")):
        dest = tmp_path / f"{name}.{fmt}"
        code, _, err = run_cli(["export", str(src), *opts, *one, "--out", str(dest)])
        assert code == 0, (name, err)
        want = {"values": "stored", "weights_are_averages": True} if name == "raw" \
            else {"values": "ema"}
        assert _record(dest) == {**want, "stated": ["averages_only"]}, name  # was no "stated"
        if fmt == "npz":
            with np.load(dest) as z:  # what the statement read: the raw weights (truth)
                for key in ("W", "V"):
                    np.testing.assert_array_equal(z[key], truth[f"vtr:raw:{key}"])
