"""Interrupted writes: killing ``ckpt restore-ema --out`` mid-write leaves no partial checkpoint.

The child process is paused at a chosen point of the write (by wrapping a writer function so it
signals "I am here" through a flag file and sleeps), then killed. Pausing instead of racing a
timer makes the test deterministic: the signal always lands exactly there.

- ``data``: while tensor bytes are being copied into the temporary data file;
- ``rename``: after the data file is complete, just before the index is renamed into place
  (the last moment at which an interruption can still leave a half-written checkpoint).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _corpus import tf_corpus, tree_hashes

CHILD = textwrap.dedent("""
    import os, sys, time
    import ckpt_tools.formats.bundle_writer as writer
    flag, point = sys.argv[1], sys.argv[2]

    def pause():
        open(flag, "w").close()
        time.sleep(120)

    if point == "data":
        original, calls = writer.BundleWriter.add_stream, []
        def add_stream(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                pause()
            return original(self, *args, **kwargs)
        writer.BundleWriter.add_stream = add_stream
    else:
        real_replace = os.replace
        def replace(src, dst):
            if str(dst).endswith(".index"):
                pause()
            return real_replace(src, dst)
        os.replace = replace
    from ckpt_tools.cli import main
    main(sys.argv[3:])
""")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return tf_corpus(tmp_path_factory.getbasetemp())


def _interrupt(src: Path, out: Path, point: str, sig: int) -> subprocess.CompletedProcess:
    flag = out.parent / f"paused-{point}-{sig}"
    argv = ["restore-ema", str(src), "--allow-missing", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(flag), point, *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not flag.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out_, err = proc.communicate()
            pytest.fail(f"child never reached the pause point {point!r}:\n{err}")
        time.sleep(0.01)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _visible(out: Path) -> list[str]:
    """Files under the output name (temporary files are hidden dot-files)."""
    return sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) \
        if out.is_dir() else []


@pytest.mark.parametrize("point", ["data", "rename"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_interrupted_restore_ema_leaves_no_partial_checkpoint(corpus, tmp_path, point, sig):
    out = tmp_path / "baked"
    _interrupt(corpus / "v2", out, point, sig)
    assert _visible(out) == [], f"partial output after {signal.Signals(sig).name} at {point}"


@pytest.mark.parametrize("point", ["data", "rename"])
def test_sigterm_exits_130_and_removes_temporary_files(corpus, tmp_path, point):
    src = corpus / "v2"
    before = tree_hashes(src)
    out = tmp_path / "baked"
    result = _interrupt(src, out, point, signal.SIGTERM)
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip().splitlines() == ["error: interrupted"]
    # The output is staged in a hidden sibling directory: SIGTERM removes it, and nothing
    # ever appeared under the output name.
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    assert not out.exists()
    assert tree_hashes(src) == before


def test_sigkill_leaves_input_untouched_and_no_index(corpus, tmp_path):
    """Even a SIGKILL (no cleanup possible) never leaves an index naming half-written data."""
    src = corpus / "v2"
    before = tree_hashes(src)
    out = tmp_path / "baked"
    result = _interrupt(src, out, "rename", signal.SIGKILL)
    assert result.returncode == -signal.SIGKILL
    assert not (out / "model.ckpt-2.index").exists() and not (out / "checkpoint").exists()
    assert tree_hashes(src) == before


def test_uninterrupted_restore_ema_writes_everything(corpus, tmp_path):
    """Control for the test above: without a signal the same command completes."""
    out = tmp_path / "baked"
    env = {k: v for k, v in os.environ.items() if k != "CKPT_DEBUG"}
    proc = subprocess.run([sys.executable, "-m", "ckpt_tools", "restore-ema", str(corpus / "v2"),
                           "--allow-missing", "--out", str(out)], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert {"model.ckpt-2.index", "model.ckpt-2.data-00000-of-00001",
            "checkpoint"} <= set(_visible(out))
