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
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _corpus import tf_corpus, tree_hashes
from _in_process import ckpt
from helpers import start_paused

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


# == The writer discipline (issue 12): one test per promise, inputs hashed around every test ==
# The README promises exactly what these tests check: "inputs are never modified" (every test
# below hashes its inputs before and after, through the ``run`` fixture) and "an interrupted
# write leaves the old or the new, never a mix" (test_kill_9_at_every_rename_*).

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def _cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckpt_tools", *argv], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def _hashes(directory: Path) -> dict[str, str]:
    """Visible regular files of ``directory`` -> sha256 (hidden staging names excluded)."""
    if not directory.is_dir():
        return {}
    return {k[len(str(directory)) + 1:]: v for k, v in tree_hashes(directory).items()
            if not Path(k).name.startswith(".") and Path(k).parent == directory}


@pytest.fixture()
def run(tmp_path):
    """A copy of the linear_v2 fixture as a training directory; its files are hashed before
    the test and checked unchanged after it."""
    src = tmp_path / "run"
    shutil.copytree(FIX / "linear_v2", src)
    before = tree_hashes(src)
    yield src
    assert tree_hashes(src) == before, "an input file was modified"


@pytest.mark.parametrize("to", ["npz", "safetensors", "h5"])
def test_export_never_replaces_an_input_even_with_force(run, tmp_path, to):
    # The state file that was read, the index, a data shard: all inputs, in every format.
    for target in ("checkpoint", "model.ckpt.index", "model.ckpt.data-00000-of-00001",
                   "model.ckpt.meta"):
        r = ckpt("export", str(run), "--out", str(run / target), "--to", to, "--force")
        # A checkpoint file's name contradicts --to: exit 2 naming both, before anything is
        # read or written (the input checks below refuse what such a name does not).
        assert r.returncode == 2, r.stderr
        assert f"--format {to}" in r.stderr and str(run / target) in r.stderr, r.stderr
    # ... also through a symlink and a hard link elsewhere.
    (tmp_path / "sym").symlink_to(run / "checkpoint")
    os.link(run / "model.ckpt.index", tmp_path / "hard")
    for target in ("sym", "hard"):
        r = ckpt("export", str(run), "--out", str(tmp_path / target), "--to", to, "--force")
        assert r.returncode == 7 and "is input" in r.stderr, r.stderr


def test_restore_ema_never_writes_where_the_state_file_it_read_lives(tmp_path):
    # run/checkpoint points into run/sub/: "run" holds an input (the state file).
    run = tmp_path / "run"
    shutil.copytree(FIX / "linear_v2", run / "sub")
    (run / "checkpoint").write_text('model_checkpoint_path: "sub/model.ckpt"\n')
    before = tree_hashes(run)
    for argv in (["--out", str(run), "--force"], ["--out", str(run / "sub"), "--force"],
                 ["--out", str(run), "--format", "h5"],
                 ["--out", str(run / "sub" / "w.h5"), "--format", "h5", "--force"]):
        r = ckpt("restore-ema", str(run), *argv)
        assert r.returncode == 7, (argv, r.stderr)
        assert "holds the input" in r.stderr, r.stderr
    assert tree_hashes(run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging left behind


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_export_force_refuses_to_replace_a_device(run, tmp_path):
    dev = tmp_path / "full"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # a copy of /dev/full
    r = ckpt("export", str(run), "--out", str(dev), "--to", "npz", "--force")
    assert r.returncode == 7 and "is a device, not a regular file" in r.stderr, r.stderr
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_outputs_are_regular_files_or_new_directories(run, tmp_path):
    fifo = tmp_path / "w.npz"
    os.mkfifo(fifo)
    link = tmp_path / "l.npz"
    link.symlink_to(tmp_path / "elsewhere.npz")
    (tmp_path / "d.npz").mkdir()
    for target, kind in ((fifo, "a FIFO"), (link, "a symbolic link"),
                         (tmp_path / "d.npz", "a directory")):
        r = _cli("export", str(run), "--out", str(target), "--force")
        assert r.returncode == 7 and f"is {kind}, not a regular file" in r.stderr, r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "model.ckpt.index")
    r = _cli("restore-ema", str(run), "--out", str(out), "--force")
    assert r.returncode == 7 and "is a FIFO" in r.stderr, r.stderr
    assert stat.S_ISFIFO(os.lstat(out / "model.ckpt.index").st_mode)


# -- kill -9 at every rename: the old complete output or the new one, never a mix ----------
def _kill_at_every_rename(argv, out: Path, old: dict, new: dict, tmp_path) -> list[str]:
    points = []
    for n in range(1, 40):
        flag = tmp_path / f"flag-{n}"
        proc, what = start_paused(argv, n, flag)
        if what is None:
            out_, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            assert (_hashes(out) if out.is_dir() else tree_hashes(out)) == new
            return points
        points.append(what)
        proc.kill()
        proc.wait(timeout=30)
        got = _hashes(out) if out.is_dir() else tree_hashes(out)
        assert got in (old, new), f"a mix after kill -9 at {what!r}: {sorted(got)}"
        # Restore the old state for the next round (a real user would just rerun).
        for p in out.parent.iterdir():
            if p.name.startswith("."):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    raise AssertionError("more renames than expected")


def test_kill_9_at_every_rename_of_restore_ema_into_a_new_directory(run, tmp_path):
    ref, out = tmp_path / "ref", tmp_path / "parent" / "out"
    out.parent.mkdir()
    argv = ["restore-ema", str(run), "--out", str(out)]
    assert ckpt("restore-ema", str(run), "--out", str(ref)).returncode == 0
    new = _hashes(ref)

    def reset():
        shutil.rmtree(out, ignore_errors=True)

    points = []
    for n in range(1, 40):
        reset()
        flag = tmp_path / f"flag-{n}"
        proc, what = start_paused(argv, n, flag)
        if what is None:
            proc.communicate(timeout=60)
            assert proc.returncode == 0 and _hashes(out) == new
            break
        points.append(what)
        proc.kill()
        proc.wait(timeout=30)
        assert _hashes(out) in ({}, new), f"a mix after kill -9 at {what!r}"
    assert len(points) >= 5, points  # data, index, meta, state file, the directory itself
    assert any(str(out) in p for p in points)


def test_kill_9_at_every_rename_of_restore_ema_force_over_an_old_checkpoint(run, tmp_path):
    out = tmp_path / "parent" / "out"
    # The old output: another checkpoint under the same name, plus a user's file that stays.
    assert ckpt("restore-ema", str(FIX / "custom_ema_name"), "--out", str(out), "--name",
                "model.ckpt", "--ema-name", "avg").returncode == 0
    (out / "notes.txt").write_text("keep me")
    old = _hashes(out)
    ref = tmp_path / "ref"
    assert ckpt("restore-ema", str(run), "--out", str(ref)).returncode == 0
    new = {**_hashes(ref), "notes.txt": old["notes.txt"]}
    assert old != new
    argv = ["restore-ema", str(run), "--out", str(out), "--force"]
    points = _kill_at_every_rename(argv, out, old, new, tmp_path)
    assert any("exchange" in p for p in points), points
    assert (out / "notes.txt").read_text() == "keep me"
    assert ckpt("verify", str(out)).returncode == 0


@pytest.mark.parametrize("to", ["npz", "safetensors", "h5"])
def test_kill_9_at_every_rename_of_export_force(run, tmp_path, to):
    out = tmp_path / "parent" / f"w.{to}"
    out.parent.mkdir()
    out.write_bytes(b"old weights")
    old = tree_hashes(out)
    ref = tmp_path / f"ref.{to}"
    assert ckpt("export", str(run), "--out", str(ref)).returncode == 0
    new = {str(out): tree_hashes(ref)[str(ref)]}
    points = _kill_at_every_rename(["export", str(run), "--out", str(out), "--force"], out,
                                   old, new, tmp_path)
    assert points, "no rename was paused"


# -- concurrent writers to one --out: exactly one wins ---------------------------------------
def _publish_call(argv, out: Path, tmp_path) -> int:
    """The 1-based number of the writers' test hook call (``_write.pause_point``, wherever
    it was imported) at the rename that publishes ``out``, counted by the same command run
    in-process into a copy of ``out``'s situation (an empty directory there or nothing)."""
    from ckpt_tools.formats import _write, remote_stream, remote_write, staged_dir

    dry = tmp_path / "dry" / out.parent.name / out.name
    dry.parent.mkdir(parents=True)
    if out.is_dir():
        dry.mkdir()
    calls: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for module in (_write, remote_stream, remote_write, staged_dir):
            patch.setattr(module, "pause_point", calls.append)
        r = ckpt(*[str(dry) if a == str(out) else a for a in argv])
    assert r.returncode == 0, r.stderr
    shutil.rmtree(tmp_path / "dry")
    return next(i for i, what in enumerate(calls, 1) if f"> {dry}" in what or "exchange" in what)


def _paused_at_publish(argv, out: Path, tmp_path) -> subprocess.Popen:
    # one child, paused at the call the in-process run counted (not one child per rename
    # before it, each started, paused and killed)
    flag = tmp_path / "pub"
    proc, what = start_paused(argv, _publish_call(argv, out, tmp_path), flag)
    assert what is not None, "never reached the publishing rename"
    assert f"> {out}" in what or "exchange" in what, what
    proc.flag = flag  # type: ignore[attr-defined]
    return proc


@pytest.mark.parametrize("existing", [False, True], ids=["new-out", "existing-empty-out"])
def test_two_writers_to_one_out_exactly_one_wins(run, tmp_path, existing):
    out = tmp_path / "parent" / "out"
    out.parent.mkdir()
    if existing:
        out.mkdir()
    argv = ["restore-ema", str(run), "--out", str(out)]
    first = _paused_at_publish(argv, out, tmp_path)
    second = _cli(*argv)  # runs to the end while the first is about to publish
    first.flag.unlink()  # let the first one finish
    _, err = first.communicate(timeout=60)
    results = sorted([(first.returncode, err), (second.returncode, second.stderr)])
    assert [c for c, _ in results] == [0, 7], results
    loser = results[1][1]
    # Refused up front while the first stages it (naming its pid), or when publishing.
    assert ("already exists" in loser or f"another process is writing it (pid {first.pid})"
            in loser) and str(out) in loser and ".tmp-" not in loser, loser
    assert ckpt("verify", str(out)).returncode == 0
    assert [p.name for p in out.parent.iterdir()] == ["out"]


def test_two_racing_writers_exactly_one_wins(run, tmp_path):
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "ckpt_tools", "restore-ema", str(run), "--out", str(out)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = sorted((p.wait(timeout=120), p.stderr.read()) for p in procs)
    assert [c for c, _ in results] == [0, 7], results
    loser = results[1][1]
    assert ("already exists" in loser or "another process is writing it" in loser) and \
        ".tmp-" not in loser, loser


# -- umask ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask", [0o022, 0o002])
def test_outputs_honour_the_umask(run, tmp_path, mask):
    old = os.umask(mask)
    try:
        from ckpt_tools import bake_ema, export_weights

        bake_ema(run, tmp_path / "new" / "out")
        export_weights(run, tmp_path / "w.npz")
        (tmp_path / "h5").mkdir()
        r = ckpt("restore-ema", str(run), "--format", "h5", "--out", str(tmp_path / "h5" / "d"))
        assert r.returncode == 0, r.stderr
    finally:
        os.umask(old)
    for d in (tmp_path / "new", tmp_path / "new" / "out", tmp_path / "h5" / "d"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o777 & ~mask, d
    for f in [*(tmp_path / "new" / "out").iterdir(), tmp_path / "w.npz",
              tmp_path / "h5" / "d" / "model.ckpt.h5"]:
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask, f


# -- names ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "", "x\\y"])
@pytest.mark.parametrize("fmt", ["v2", "h5"])
def test_name_must_be_a_plain_file_name(run, tmp_path, name, fmt):
    out = tmp_path / "a" / "b" / "out"
    r = ckpt("restore-ema", str(run), "--out", str(out), "--name", name, "--format", fmt)
    assert r.returncode == 7 and "invalid --name" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize(("to", "rule", "message"), [
    ("safetensors", "W=__metadata__", "reserved by safetensors"),
    ("npz", "W=../../W", "cannot be a npz member name"),
    ("h5", "W=a/../W", "cannot be a h5 member name"),
    ("npz", "W=/W", "cannot be a npz member name"),
])
def test_tensor_names_are_checked_before_becoming_member_names(run, tmp_path, to, rule,
                                                                message):
    out = tmp_path / f"w.{to}"
    r = ckpt("export", str(run), "--out", str(out), "--rename", rule)
    assert r.returncode == 7 and message in r.stderr and "--rename" in r.stderr, r.stderr
    assert str(out) in r.stderr, r.stderr  # the line names the file (review-11-user-r9 F7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


# -- OS errors name the path and the operation; exit 1 for every writer ----------------------
@pytest.fixture()
def tiny_fs(tmp_path):
    """A 64 KiB tmpfs (root only): writing a 290 KiB checkpoint there runs out of space."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("argv", [
    ["restore-ema", "--out", "{mnt}/out"],
    ["restore-ema", "--format", "h5", "--out", "{mnt}/w.h5"],
    ["export", "--out", "{mnt}/w.npz"],
    ["export", "--out", "{mnt}/w.safetensors"],
    ["export", "--out", "{mnt}/w.h5"],
], ids=["restore-ema", "restore-ema-h5", "npz", "safetensors", "h5"])
def test_disk_full_names_the_output_and_leaves_nothing(tiny_fs, tmp_path, argv):
    src = tmp_path / "big"
    shutil.copytree(FIX / "trainer_v1", src)
    before = tree_hashes(src)
    argv = [a.format(mnt=tiny_fs) for a in argv]
    r = ckpt(argv[0], str(src), *argv[1:])
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip()
    out = argv[-1]
    shown = f"{out}/model.ckpt-6.data-00000-of-00001" if argv[0:2] == ["restore-ema", "--out"] \
        else out
    assert line.startswith(f"error: {shown}: "), line
    assert "No space left on device" in line
    assert line.endswith("while writing (nothing was left behind)"), line
    assert os.listdir(tiny_fs) == []
    assert tree_hashes(src) == before


# -- slices: every writer checks them ----------------------------------------------------------
def test_out_of_range_slice_is_never_written(tmp_path):
    from _corpus import bundle_index

    from ckpt_tools.formats._protos import BundleEntryProto
    from ckpt_tools.formats.table import Table

    src = tmp_path / "hostile"
    shutil.copytree(FIX / "partitioned", src)
    (src / "model.ckpt.meta").unlink()
    index = src / "model.ckpt.index"
    entries = {}
    for key, value in Table(index.read_bytes(), str(index)).items():
        if key == b"":
            continue
        value = bytes(value)
        if key in (b"emb", b"emb/ExponentialMovingAverage"):  # 3 slices of 4 rows each,
            p = BundleEntryProto.FromString(value)  # but now a tensor of only 8 rows
            p.shape.dim[0].size = 8
            value = p.SerializeToString()
        entries[key] = value
    index.write_bytes(bundle_index(entries))
    before = tree_hashes(src)
    for argv in (["restore-ema", str(src), "--out", str(tmp_path / "o")],
                 ["export", str(src), "--out", str(tmp_path / "w.npz")]):
        r = ckpt(*argv)
        assert r.returncode == 4, r.stderr
        assert "emb" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile"]
    assert tree_hashes(src) == before


def test_two_exports_to_one_new_file_exactly_one_wins(run, tmp_path):
    out = tmp_path / "parent" / "w.npz"
    out.parent.mkdir()
    argv = ["export", str(run), "--out", str(out)]
    first = _paused_at_publish(argv, out, tmp_path)
    second = _cli(*argv)  # publishes while the first waits just before its own rename
    first.flag.unlink()
    _, err = first.communicate(timeout=60)
    assert second.returncode == 0, second.stderr
    assert first.returncode == 7, err
    assert "already exists" in err and str(out) in err and ".tmp-" not in err, err
    assert [p.name for p in out.parent.iterdir()] == ["w.npz"]


def test_average_follows_the_same_discipline(run, tmp_path):
    """``ckpt average`` is a writer too: never into a directory holding an input, umask kept,
    --name checked, and exactly one winner into an existing --out."""
    from ckpt_tools.average import average_checkpoints

    run2 = tmp_path / "run2"
    shutil.copytree(run, run2)
    pair = [str(run), str(run2), "--newest", str(run2)]  # no step recorded: --newest decides
    r = ckpt("average", *pair, "--out", str(run), "--force")
    assert r.returncode == 7 and "holds the input" in r.stderr, r.stderr
    r = ckpt("average", *pair, "--out", str(tmp_path / "a"), "--name", "../x")
    assert r.returncode == 7 and "invalid --name" in r.stderr, r.stderr
    old = os.umask(0o022)
    try:
        result = average_checkpoints([run, run2], tmp_path / "avg", newest=run2)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "avg").stat().st_mode) == 0o755
    assert result.prefix == str(tmp_path / "avg" / "model.ckpt")
    assert ckpt("verify", str(tmp_path / "avg")).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg", "run", "run2"]
