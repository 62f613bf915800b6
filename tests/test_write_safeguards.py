"""The writer discipline, second round (review-12-attack, review-user-12-15-16): the Keras
output of ``restore-ema``, copies of ``.meta``/``saved_model.pb``/assets on a full disk,
SIGTERM on every writer, an ``--out`` that is a mount point, odd ``--out``/``--name`` values,
the run's other checkpoints under ``export --force``, concurrent ``--force`` writers, stale
temporaries of killed writers, and ``ckpt average``'s peak memory.

Inputs are hashed before and after every test that writes beside them.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _corpus import tree_hashes
from _in_process import ckpt
from helpers import start_paused

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mknod, mount)")


def _cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckpt_tools", *argv], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **(env or {})})


def _hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


@pytest.fixture()
def keras_dir(tmp_path):
    d = tmp_path / "kd"
    d.mkdir()
    shutil.copy(FIX / "keras_ema" / "model.keras", d / "model.keras")
    before = tree_hashes(d)
    yield d
    assert tree_hashes(d) == before, "an input file was modified"


@pytest.fixture()
def towers(tmp_path):
    d = tmp_path / "X"
    shutil.copytree(FIX / "towers_bn", d)
    before = tree_hashes(d)
    yield d
    assert tree_hashes(d) == before, "an input file was modified"


@pytest.fixture()
def tmpfs(tmp_path):
    """Mounts a tmpfs of the given size (root only); unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []

    def mount(size: str, *options: str) -> Path:
        mnt = tmp_path / f"mnt{len(mounted)}"
        mnt.mkdir()
        opts = ",".join([f"size={size}", *options])
        if subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)],
                          capture_output=True).returncode != 0:
            pytest.skip("cannot mount a tmpfs here")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in reversed(mounted):
        subprocess.run(["umount", str(mnt)], check=True)


# -- 1. restore-ema on a Keras file follows the writer discipline ---------------------------
@ROOT_ONLY
def test_keras_output_never_replaces_a_device_fifo_or_symlink(keras_dir, tmp_path):
    d = tmp_path / "D"
    d.mkdir()
    os.mknod(d / "full.keras", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    os.mkfifo(d / "fifo.keras")
    (d / "link.keras").symlink_to(tmp_path / "elsewhere.keras")
    for name, kind in (("full.keras", "a device"), ("fifo.keras", "a FIFO"),
                       ("link.keras", "a symbolic link")):
        r = _cli("restore-ema", "--not-swapped",
                 str(keras_dir / "model.keras"), "--out", str(d / name),
                 "--force")
        assert r.returncode == 7 and f"is {kind}, not a regular file" in r.stderr, r.stderr
    assert stat.S_ISCHR(os.lstat(d / "full.keras").st_mode)
    assert stat.S_ISFIFO(os.lstat(d / "fifo.keras").st_mode)
    assert (d / "link.keras").is_symlink() and not (tmp_path / "elsewhere.keras").exists()


@pytest.mark.parametrize("name", ["../../escaped.keras", "a/b.keras", "..", "a\nb.keras",
                                  "x\x1b[2Jy.keras"])
def test_keras_name_is_a_plain_file_name(keras_dir, tmp_path, name):
    out = tmp_path / "ko"
    r = ckpt("restore-ema", "--not-swapped",
             str(keras_dir / "model.keras"), "--out", str(out), "--name", name)
    assert r.returncode == 7 and "invalid --name" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr  # control characters escaped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kd"]


def test_keras_output_never_goes_into_the_input_directory(keras_dir, tmp_path):
    r = ckpt("restore-ema", "--not-swapped",
             str(keras_dir / "model.keras"), "--out", str(keras_dir), "--name",
             "other.keras")
    assert r.returncode == 7 and "holds the input" in r.stderr, r.stderr
    assert sorted(p.name for p in keras_dir.iterdir()) == ["model.keras"]


def test_keras_output_quiet_and_parents_created(keras_dir, tmp_path):
    out = tmp_path / "a" / "b"
    r = ckpt("restore-ema", "--not-swapped",
             str(keras_dir / "model.keras"), "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""  # -q: nothing but data (and there is none)
    assert (out / "model.keras").is_file()
    assert _hidden(out) == []
    assert ckpt("verify", str(out / "model.keras")).returncode == 0


def test_keras_two_writers_exactly_one_wins(keras_dir, tmp_path):
    out = tmp_path / "kc" / "o.keras"
    out.parent.mkdir()
    argv = ["restore-ema", "--not-swapped", str(keras_dir / "model.keras"), "--out", str(out)]
    first, what = start_paused(argv, 1, tmp_path / "flag")
    assert what is not None and str(out) in what, what
    second = _cli(*argv)  # publishes while the first waits before its own rename
    (tmp_path / "flag").unlink()
    _, err = first.communicate(timeout=60)
    assert second.returncode == 0, second.stderr
    assert first.returncode == 7, err
    assert "already exists" in err and str(out) in err and ".tmp-" not in err, err
    assert sorted(p.name for p in out.parent.iterdir()) == ["o.keras"]


def test_keras_sigterm_exits_130_and_removes_its_temporary(keras_dir, tmp_path):
    out = tmp_path / "deep" / "er" / "o.keras"
    argv = ["restore-ema", "--not-swapped", str(keras_dir / "model.keras"), "--out", str(out)]
    proc, what = start_paused(argv, 1, tmp_path / "flag")
    assert what is not None
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip().splitlines() == ["error: interrupted"], err
    # The temporary is gone, and so are the directories this run created.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flag", "kd"]


def test_keras_disk_full_and_read_only_name_the_output(keras_dir, tmpfs):
    full = tmpfs("20k")
    r = ckpt("restore-ema", "--not-swapped",
             str(keras_dir / "model.keras"), "--out", str(full / "k.keras"))
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == (f"error: {full / 'k.keras'}: No space left on device while "
                                "writing (nothing was left behind)"), r.stderr
    assert os.listdir(full) == []
    ro = tmpfs("1m", "ro")
    for out in (ro / "k.keras", ro / "sub"):
        r = ckpt("restore-ema", "--not-swapped", str(keras_dir / "model.keras"), "--out", str(out))
        assert r.returncode == 7, r.stderr
        assert str(ro) in r.stderr and ".tmp-" not in r.stderr, r.stderr
        assert "Read-only file system" in r.stderr or "not writable" in r.stderr, r.stderr


# -- 2. disk full while copying .meta / saved_model.pb / assets names the OUTPUT -------------
@pytest.mark.parametrize("argv", [
    ["restore-ema", "{X}", "--out", "{mnt}/o"],
    ["average", "{X}/model.ckpt-20", "{X}/model.ckpt-30", "--out", "{mnt}/av"],
], ids=["restore-ema", "average"])
def test_disk_full_while_copying_the_meta_names_the_output(towers, tmpfs, argv):
    mnt = tmpfs("64k")  # the data and index fit, the 185 KiB .meta does not
    argv = [a.format(X=towers, mnt=mnt) for a in argv]
    r = ckpt(*argv)
    assert r.returncode == 1, r.stderr
    out = argv[-1]
    assert r.stderr.strip() == (f"error: {out}/model.ckpt-30.meta: No space left on device "
                                "while writing (nothing was left behind)"), r.stderr
    assert os.listdir(mnt) == []


def test_disk_full_while_copying_saved_model_assets_names_the_output(tmp_path, tmpfs):
    sm = tmp_path / "SMA"
    shutil.copytree(FIX / "savedmodel_keras", sm)
    (sm / "assets").mkdir(exist_ok=True)
    (sm / "assets" / "vocab.txt").write_bytes(os.urandom(3 << 20))
    mnt = tmpfs("2m")
    r = ckpt("restore-ema", str(sm), "--out", str(mnt / "sm"))
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip()
    assert line.startswith(f"error: {mnt / 'sm'}/"), line
    assert ".tmp-" not in line and "[(" not in line, line
    assert line.endswith("No space left on device while writing (nothing was left behind)"), \
        line
    assert os.listdir(mnt) == []


# -- 3. SIGTERM on export and average: 130, "error: interrupted", temporaries removed -------
@pytest.mark.parametrize("argv", [
    ["export", "{X}", "--out", "{out}/m.npz"],
    ["average", "{X}/model.ckpt-20", "{X}/model.ckpt-30", "--out", "{out}/sub/av"],
], ids=["export", "average"])
def test_sigterm_on_export_and_average(towers, tmp_path, argv):
    out = tmp_path / "outs"
    out.mkdir()
    argv = [a.format(X=towers, out=out) for a in argv]
    proc, what = start_paused(argv, 1, tmp_path / "flag")
    assert what is not None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["error: interrupted"], err
    assert os.listdir(out) == []  # the temporaries and the parent this run made are gone


# -- 4. an existing --out that is a mount point: refused before anything is staged ---------
@pytest.mark.parametrize("cmd", ["restore-ema", "average"])
def test_mount_point_out_is_refused_up_front(towers, tmp_path, tmpfs, cmd):
    mnt = tmpfs("1m")
    inputs = ([str(towers)] if cmd == "restore-ema"
              else [str(towers / "model.ckpt-20"), str(towers / "model.ckpt-30")])
    for force in ([], ["--force"]):
        r = ckpt(cmd, *inputs, "--out", str(mnt), *force)
        assert r.returncode == 7, r.stderr
        assert f"{mnt}: is a mount point" in r.stderr and "--out" in r.stderr, r.stderr
    assert _hidden(mnt.parent) == [] and os.listdir(mnt) == []
    # What the message suggests works: a new directory inside the mount.
    r = ckpt(cmd, *inputs, "--out", str(mnt / "ckpt"))
    assert r.returncode == 0, r.stderr
    assert ckpt("verify", str(mnt / "ckpt")).returncode == 0


# -- 5. minor ones ------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["restore-ema", "average"])
def test_name_with_control_characters_is_refused(towers, tmp_path, cmd):
    inputs = ([str(towers)] if cmd == "restore-ema"
              else [str(towers / "model.ckpt-20"), str(towers / "model.ckpt-30")])
    r = ckpt(cmd, *inputs, "--out", str(tmp_path / "o"), "--name", "a\nb")
    assert r.returncode == 7 and "invalid --name 'a\\nb'" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_dot_dot_after_a_symlink_is_checked_where_it_is_written(towers, tmp_path):
    deep = tmp_path / "elsewhere" / "deep"
    deep.mkdir(parents=True)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "shm").symlink_to(deep)
    run = lambda *a: ckpt(*a, cwd=cwd)  # noqa: E731
    r = run("export", str(towers), "--out", "shm/../m.npz")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "elsewhere" / "m.npz").is_file() and not (cwd / "m.npz").exists()
    r = run("restore-ema", str(towers), "--out", "shm/../o2")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "elsewhere" / "o2" / "checkpoint").is_file()
    assert not (cwd / "o2").exists()
    # A symlink into the input's directory, then "..": still the input's directory.
    sub = tmp_path / "X2" / "sub"
    shutil.copytree(FIX / "towers_bn", sub.parent)
    sub.mkdir()
    (cwd / "L").symlink_to(sub)
    before = tree_hashes(sub.parent)
    r = run("restore-ema", str(sub.parent), "--format", "h5", "--out", "L/../evil.h5")
    assert r.returncode == 7 and "holds the input" in r.stderr, r.stderr
    assert tree_hashes(sub.parent) == before


def test_empty_and_trailing_slash_out_are_refused_up_front(towers, tmp_path):
    for argv in (["restore-ema", str(towers), "--out", ""],
                 ["restore-ema", str(towers), "--format", "h5", "--out", ""],
                 ["export", str(towers), "--out", "", "--format", "npz"],
                 ["average", str(towers / "model.ckpt-20"), str(towers / "model.ckpt-30"),
                  "--out", ""]):
        r = ckpt(*argv)
        assert r.returncode == 7 and "--out is empty" in r.stderr, (argv, r.stderr)
    r = ckpt("export", str(towers), "--out", str(tmp_path / "newx") + "/", "--format", "npz")
    assert r.returncode == 7 and "ends in '/'" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X"]


def test_failed_run_removes_the_parents_it_created(towers, tmp_path):
    # Interrupted just before publishing, after its parent directories were made.
    out = tmp_path / "n1" / "n2" / "w.h5"
    proc, what = start_paused(["restore-ema", str(towers), "--format", "h5", "--out",
                                str(out)], 1, tmp_path / "flag")
    assert what is not None
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X", "flag"]


def test_export_force_never_replaces_the_runs_other_checkpoints(towers):
    # X's state file lists model.ckpt-20 and -30: the run's history, inputs of every command
    # that reads the run, even through a prefix that names only one checkpoint.
    for src in (towers, towers / "model.ckpt-30"):
        for target in ("model.ckpt-20.index", "model.ckpt-20.data-00000-of-00001",
                       "model.ckpt-20.meta", "checkpoint"):
            before = {p.name: p.read_bytes() for p in towers.iterdir() if p.is_file()}
            r = ckpt("export", str(src), "--out", str(towers / target), "--format",
                     "safetensors", "--force")
            # Named like a checkpoint file, contradicting --format: exit 2 naming both,
            # before the input checks (which refuse it as well: exit 7 for a .safetensors
            # name of an input's, test_file_url_outputs_never_replace_inputs).
            assert r.returncode == 2, (src, target, r.stderr)
            assert "--format safetensors" in r.stderr and target in r.stderr, r.stderr
            assert {p.name: p.read_bytes() for p in towers.iterdir() if p.is_file()} == before


def test_concurrent_export_force_exactly_one_wins(towers, tmp_path):
    out = tmp_path / "rc.npz"
    out.write_bytes(b"old")
    argv = ["export", str(towers), "--out", str(out), "--force"]
    first, what = start_paused(argv, 1, tmp_path / "flag")
    assert what is not None
    second = _cli(*argv)
    (tmp_path / "flag").unlink()
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert second.returncode == 7, second.stderr
    assert "another process is writing it" in second.stderr and str(out) in second.stderr
    assert _hidden(tmp_path) == []


def test_stale_temporaries_of_killed_writers_are_removed(towers, tmp_path):
    out = tmp_path / "kout"
    argv = ["restore-ema", str(towers), "--out", str(out)]
    proc, what = start_paused(argv, 1, tmp_path / "flag")
    assert what is not None
    proc.kill()
    proc.wait(timeout=30)
    stale = _hidden(tmp_path)
    assert stale and all(n.startswith(".kout.tmp-") for n in stale), stale
    for n in stale:  # older than a just-made stage
        os.utime(tmp_path / n, (time.time() - 3600, time.time() - 3600))
    # A live writer's stage is never touched: start one and hold it paused.
    (tmp_path / "flag").unlink()
    live, what = start_paused(argv, 1, tmp_path / "flag2")
    assert what is not None
    live_stage = [n for n in _hidden(tmp_path) if n not in stale]
    assert len(live_stage) == 1 and not any((tmp_path / n).exists() for n in stale)
    os.utime(tmp_path / live_stage[0], (time.time() - 3600, time.time() - 3600))
    r = _cli(*argv)  # the live writer's stage is seen: refused up front, naming it
    assert r.returncode == 7, r.stderr
    assert f"another process is writing it (pid {live.pid}" in r.stderr, r.stderr
    assert _hidden(tmp_path) == live_stage
    (tmp_path / "flag2").unlink()
    _, err = live.communicate(timeout=60)
    assert live.returncode == 0, err
    assert _hidden(tmp_path) == []


# -- 6. ckpt average streams: peak memory is not the total size of the inputs ---------------
def test_average_peak_memory_does_not_grow_with_the_inputs(tmp_path):
    big = tmp_path / "big"
    subprocess.run([sys.executable, str(ROOT / "bench" / "make_ckpt.py"), str(big), "--size",
                    "200M", "--no-meta"], check=True, capture_output=True, timeout=300)
    index = next(big.glob("*.index"))
    prefix = str(index)[: -len(".index")]
    name = os.path.basename(prefix)
    inputs = []
    for i in range(3):  # three checkpoints of 200 MB (hard links: no extra disk)
        d = tmp_path / f"c{i}"
        d.mkdir()
        for f in big.iterdir():
            if f.name.startswith(name + "."):
                os.link(f, d / f.name)
        inputs.append(str(d / name))
    probe = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run([sys.executable, '-m', 'ckpt_tools', 'average', *sys.argv[1:]])\n"
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    r = subprocess.run([sys.executable, "-c", probe, *inputs, "--out", str(tmp_path / "avg"),
                        "--newest", inputs[-1], "-q"],  # equal steps: --newest decides
                       capture_output=True, text=True, timeout=600)
    code, peak_kib = map(int, r.stdout.split())
    assert code == 0, r.stderr
    # Before streaming: 734 MB (every input page stayed mapped). Now: one piece per input,
    # one tensor's accumulator, plus the interpreter and NumPy (~100 MB).
    assert peak_kib < 350 * 1024, f"peak RSS {peak_kib / 1024:.0f} MB"


def test_another_users_out_is_refused_when_not_root(towers, tmp_path, monkeypatch):
    """Replacing an existing --out as a whole would make it the caller's: refused for a
    directory (or a kept file) of another user unless running as root, before staging."""
    from ckpt_tools.bake_outputs import checkpoint_names
    from ckpt_tools.errors import OutputError
    from ckpt_tools.formats._write import Inputs
    from ckpt_tools.formats.staged_dir import StagedDir

    out = tmp_path / "shared"
    out.mkdir()
    owner = out.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # someone else
    stage = StagedDir(str(out), Inputs([]), checkpoint_names("m"), overwrite=True)
    with pytest.raises(OutputError, match="belongs to another user"):
        stage.check()
    if owner == 0 and os.getuid() == 0:  # as root: make "us" uid 4242, the file 4243's
        os.chown(out, 4242, -1)
        (out / "notes.txt").write_text("theirs")
        os.chown(out / "notes.txt", 4243, -1)
        monkeypatch.setattr(os, "geteuid", lambda: 4242)
        with pytest.raises(OutputError, match="notes.txt: belongs to another user"):
            StagedDir(str(out), Inputs([]), checkpoint_names("m"), overwrite=True).check()
    assert _hidden(tmp_path) == []


def test_pause_hook_never_writes_through_a_symlink(tmp_path, monkeypatch):
    from ckpt_tools.formats import _write

    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "flag").symlink_to(victim)
    monkeypatch.setenv(_write.PAUSE_AT_ENV, "1")
    monkeypatch.setenv(_write.PAUSE_FLAG_ENV, str(tmp_path / "flag"))
    monkeypatch.setattr(_write, "_pauses", [0])
    _write.pause_point("rename a -> b")
    assert victim.read_text() == "precious"
