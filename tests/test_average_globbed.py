"""``ckpt average run/model.ckpt-* --out avg/``: a shell glob gives each checkpoint's
``.data-*``, ``.index`` and ``.meta``; those are that checkpoint, averaged once
(review-27-user-u29 F2). A checkpoint named twice otherwise is still refused (exit 6)."""

from __future__ import annotations

import json
import shutil

import numpy as np
from _corpus import run_cli
from _in_process import run_in_process
from helpers import FIXTURES

from ckpt_tools import EmaError, average_checkpoints

RUN = FIXTURES / "towers_bn"  # a TF1 Saver's run: model.ckpt-20 and -30, each with its .meta


def _tf_values(tf, prefix: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(prefix)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


def _glob(directory, pattern: str) -> list[str]:
    """What the shell gives for ``directory/pattern`` (sorted, as bash sorts here)."""
    return sorted(str(p) for p in directory.glob(pattern))


def test_a_glob_of_the_runs_files_averages_each_checkpoint_once(tmp_path, tf):
    files = _glob(RUN, "model.ckpt-*")
    assert len(files) == 6 and any(f.endswith(".meta") for f in files)
    proc = run_in_process(["average", *files, "--out", str(tmp_path / "avg"), "--json"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    old, new = str(RUN / "model.ckpt-20"), str(RUN / "model.ckpt-30")
    assert doc["inputs"] == [old, new] and doc["newest"] == new
    assert "6 paths name 2 checkpoints" in proc.stderr
    # Each float is the mean of the two checkpoints TensorFlow reads (not of six inputs).
    truth = [_tf_values(tf, p) for p in (old, new)]
    out = _tf_values(tf, str(tmp_path / "avg" / "model.ckpt-30"))
    assert set(out) == set(truth[1])
    for key, value in out.items():
        if key in doc["copied"]:
            np.testing.assert_array_equal(value, truth[1][key], err_msg=key)
        else:
            acc = (truth[0][key].astype(np.float64) + truth[1][key]) / 2
            np.testing.assert_array_equal(value, acc.astype(value.dtype), err_msg=key)
    assert "global_step" in doc["copied"] and int(out["global_step"]) == 30
    # The library takes the same list (glob.glob in Python).
    result = average_checkpoints(files, tmp_path / "lib")
    assert list(result.inputs) == [old, new]
    assert result.merged == [files[:3], files[3:]]  # each group, as given
    for key, value in _tf_values(tf, result.prefix).items():
        np.testing.assert_array_equal(value, out[key], err_msg=key)


def test_a_glob_of_sharded_v1_files_is_one_checkpoint_each(tmp_path, tf):
    src = FIXTURES / "sharded_v1"
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in src.glob("model.ckpt-7*"):
        shutil.copy(f, copy / f.name)
    files = _glob(src, "model.ckpt-7*") + _glob(copy, "model.ckpt-7*")
    assert sum("-of-00002" in f for f in files) == 4
    result = average_checkpoints(files, tmp_path / "avg", newest=copy)
    assert len(result.inputs) == 2
    truth = _tf_values(tf, str(src / "model.ckpt-7-?????-of-00002"))
    out = _tf_values(tf, result.prefix)
    for key, value in truth.items():  # two equal checkpoints: the mean is each
        np.testing.assert_array_equal(out[key], value, err_msg=key)


def test_a_checkpoint_named_twice_otherwise_is_exit_6_naming_both(tmp_path):
    old, new = str(RUN / "model.ckpt-20"), str(RUN / "model.ckpt-30")
    cases = {
        "prefix and file": ([old, old + ".index", new], f"(as {old} and {old}.index)"),
        "one file twice": ([old + ".index", old + ".data-00000-of-00001", old + ".index",
                            new], f"(as {old}.index twice)"),
        "directory and a file of its latest": ([str(RUN), new + ".meta", old],
                                               f"(as {RUN} and {new}.meta)"),
    }
    for what, (paths, said) in cases.items():
        out = tmp_path / what.replace(" ", "_")
        proc = run_in_process(["average", *paths, "--out", str(out)])
        assert proc.returncode == 6, (what, proc.stderr)
        assert "given twice " + said in proc.stderr and "count it twice" in proc.stderr, \
            (what, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists(), what
    try:
        average_checkpoints([old, old + ".index", new], tmp_path / "lib")
    except EmaError as exc:
        assert "given twice" in str(exc)
    else:
        raise AssertionError("the prefix and its .index were averaged as two checkpoints")


def test_files_of_one_checkpoint_alone_a_lone_meta_or_a_stray_file_are_clear_errors(tmp_path):
    one = _glob(RUN, "model.ckpt-20.*")
    proc = run_in_process(["average", *one, "--out", str(tmp_path / "one")])
    assert proc.returncode == 2 and "are files of one checkpoint" in proc.stderr, proc.stderr
    assert "--last N" in proc.stderr and not (tmp_path / "one").exists()
    # A .meta whose checkpoint is gone (a run's leftover graph) matched by the glob.
    shutil.copy(RUN / "model.ckpt-20.meta", tmp_path / "model.ckpt-0.meta")
    lone = run_in_process(["average", str(tmp_path / "model.ckpt-0.meta"),
                           *_glob(RUN, "model.ckpt-*"), "--out", str(tmp_path / "lone")])
    assert lone.returncode == 3 and "no checkpoint beside this graph" in lone.stderr, lone.stderr
    (tmp_path / "model.ckpt-1.txt").write_text("notes\n")
    stray = run_in_process(["average", *_glob(RUN, "model.ckpt-*"),
                            str(tmp_path / "model.ckpt-1.txt"), "--out", str(tmp_path / "s")])
    assert stray.returncode == 4 and "model.ckpt-1.txt: not a TensorFlow checkpoint" in \
        stray.stderr, stray.stderr
    assert not (tmp_path / "lone").exists() and not (tmp_path / "s").exists()


def test_the_cli_takes_the_grouping_from_the_library_each_path_located_once(
        tmp_path, capsys, monkeypatch, tf):
    """``ckpt average`` groups its inputs once, in the library (note27 "Inputs grouped
    twice"): each path given is resolved once, and the note, the summary and the progress
    bar's total (each checkpoint's tensors once) come from that one grouping."""
    import ckpt_tools.average_inputs as grouping
    from ckpt_tools.cli._progress import ByteProgress

    files = _glob(RUN, "model.ckpt-*")
    located: list[str] = []
    real_locate, real_update = grouping.locate, ByteProgress.update

    def counted(path):
        located.append(path)
        return real_locate(path)

    totals: list[int | None] = []

    def update(self, done, total=None):
        totals.append(total)
        return real_update(self, done, total)

    monkeypatch.setattr(grouping, "locate", counted)
    monkeypatch.setattr(ByteProgress, "update", update)
    code, text, err = run_cli(["average", *files, "--out", str(tmp_path / "avg"), "--json"],
                              capsys)
    assert code == 0, err
    assert sorted(located) == files, located  # once each, not once more by the CLI
    assert "6 paths name 2 checkpoints" in err, err
    reader = tf.train.load_checkpoint(str(RUN / "model.ckpt-30"))
    one = sum(reader.get_tensor(k).nbytes for k in reader.get_variable_to_shape_map())
    assert totals == [2 * one], totals
    assert json.loads(text)["inputs"] == [str(RUN / "model.ckpt-20"), str(RUN / "model.ckpt-30")]
