"""A bad ``--out`` fails before any tensor is read (``average``, ``export``, ``restore-ema``):
an output that exists, holds an input, is locked by another writer, sits in a missing bucket
or contradicts the format is refused in seconds, not after averaging gigabytes; and an output
named like a checkpoint file contradicting ``--format`` is a usage error (exit 2) naming both."""

from __future__ import annotations

import fcntl
import os
import shutil

import pytest
from helpers import FIXTURES, run_cli

from ckpt_tools.checkpoint import Checkpoint


@pytest.fixture()
def run(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(FIXTURES / "towers_bn", d)
    return d


@pytest.fixture()
def no_tensor_reads(monkeypatch):
    """Fails the test if any tensor is read."""
    def refuse(self, *args, **kwargs):
        raise AssertionError(f"a tensor was read before --out was checked: {args[:1]}")

    for method in ("tensor", "chunks"):
        monkeypatch.setattr(Checkpoint, method, refuse)


def _one_error(code: int, err: str, want_code: int, *words: str) -> None:
    assert code == want_code, err
    assert "Traceback" not in err and "a tensor was read" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_an_out_that_is_a_file_fails_before_reading(run, tmp_path, no_tensor_reads):
    out = tmp_path / "afile"
    out.write_text("x")
    code, _, err = run_cli(["average", str(run / "model.ckpt-20"), str(run / "model.ckpt-30"),
                            "--out", str(out)])
    _one_error(code, err, 7, str(out), "not a directory")


def test_an_out_holding_an_input_fails_before_reading(run, no_tensor_reads):
    before = sorted(p.name for p in run.iterdir())
    code, _, err = run_cli(["average", str(run / "model.ckpt-20"), str(run / "model.ckpt-30"),
                            "--out", str(run), "--force"])
    _one_error(code, err, 7, "holds the input")
    assert sorted(p.name for p in run.iterdir()) == before


def test_an_out_being_written_by_another_process_fails_before_reading(run, tmp_path,
                                                                      no_tensor_reads):
    out = tmp_path / "busy"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a live writer holds
        code, _, err = run_cli(["average", str(run), "--last", "2", "--out", str(out)])
    finally:
        os.close(fd)
    _one_error(code, err, 7, str(out), "another process")


def test_an_existing_output_checkpoint_fails_before_reading(run, tmp_path, no_tensor_reads):
    out = tmp_path / "old"
    out.mkdir()
    (out / "model.ckpt-30.index").write_bytes(b"old")
    code, _, err = run_cli(["average", str(run), "--last", "2", "--out", str(out)])
    _one_error(code, err, 7, "model.ckpt-30.index", "already exists")


@pytest.mark.parametrize("out,fmt", [("x.index", "npz"), ("x.meta", "safetensors"),
                                     ("x.data-00000-of-00001", "h5"), ("checkpoint", "npz")])
def test_export_format_contradicting_a_checkpoint_name_is_a_usage_error(run, tmp_path, out,
                                                                        fmt, no_tensor_reads):
    code, _, err = run_cli(["export", str(run), "--out", str(tmp_path / out), "--format", fmt])
    _one_error(code, err, 2, f"--format {fmt}", out)
    assert not (tmp_path / out).exists()


@pytest.mark.parametrize("cmd", [["average", "{run}", "--last", "2"],
                                 ["restore-ema", "{run}"]])
@pytest.mark.parametrize("out", ["x.npz", "x.h5", "model.ckpt-30.index", "m.meta"])
def test_checkpoint_outputs_named_like_files_are_usage_errors(run, tmp_path, cmd, out,
                                                              no_tensor_reads):
    argv = [a.format(run=run) for a in cmd] + ["--out", str(tmp_path / out)]
    code, _, err = run_cli(argv)
    _one_error(code, err, 2, out)
    assert not (tmp_path / out).exists()


def test_a_restored_file_beside_its_input_says_why_it_is_refused(tmp_path):
    """review-16-attack-r32 F13: ``restore-ema model.keras --out model_ema.keras`` beside the
    input was refused (exit 7) without a reason; it names it and the way out."""
    import shutil

    from helpers import FIXTURES, run_cli

    src = tmp_path / "run" / "model.keras"
    src.parent.mkdir()
    shutil.copy(FIXTURES / "keras_ema" / "adam.keras", src)
    out = tmp_path / "run" / "model_ema.keras"
    code, _, err = run_cli(["restore-ema", str(src), "--out", str(out), "--not-swapped"])
    assert code == 7 and "two candidate checkpoints" in err and "choose another --out" in err, err
    assert not out.exists()
