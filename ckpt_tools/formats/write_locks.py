"""Writer liveness: the locks that tell a live writer's temporaries from a killed one's.

A writer locks each hidden temporary it creates (:func:`hold`) for as long as it writes; the
kernel drops the lock when the process dies, ``kill -9`` included. Later writers remove only
unlocked, old temporaries (:func:`sweep_stale`, :func:`sweep_stages`) and refuse to write where
a live one is staging (:func:`live_stage`). Part of the writer discipline of
:mod:`ckpt_tools.formats._write`.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager


def physical(path: str) -> str:
    """Returns ``path`` with its directory resolved the way the kernel resolves it (symlinks
    first, then ``..``), so that checks and writes use one location: ``link/../x`` is checked
    and written where ``open`` would put it, not where ``abspath`` says."""
    d, base = os.path.split(path)
    return os.path.join(os.path.realpath(d or "."), base)


_STALE_FILE_S = 600  # a temporary file untouched this long, and unlocked, is a dead writer's
_STALE_DIR_S = 30  # a stage directory is locked within microseconds of its mkdir


def _try_lock(fd: int, directory: bool) -> bool:
    """Takes an exclusive, non-blocking lock on ``fd``: ``flock`` for a directory, a POSIX
    record lock for a file (HDF5 ``flock``-s the files it writes, which must not conflict)."""
    import fcntl

    try:
        if directory:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def hold(path: str) -> int | None:
    """Locks the temporary file or directory ``path`` for as long as the returned descriptor
    stays open: :func:`sweep_stale` then knows its writer is alive. The kernel drops the lock
    when the process dies, ``kill -9`` included."""
    directory = os.path.isdir(path)
    try:
        fd = os.open(path, (os.O_RDONLY if directory else os.O_RDWR)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    _try_lock(fd, directory)
    return fd


def release(fd: int | None) -> None:
    """Closes a descriptor from :func:`hold` (dropping its lock)."""
    if fd is not None:
        os.close(fd)


def sweep_stale(path: str) -> list[str]:
    """Removes the hidden ``.<name>.tmp-*`` / ``.<name>.old-*`` siblings of ``path`` that a
    killed writer left behind, and returns their names.

    A live writer locks its temporary (:func:`hold`), so only unlocked ones older than 30 s
    are removed (files: untouched for 10 minutes, as closing any descriptor of a file drops a
    process's record locks on it); this works across PID namespaces and never removes a
    running writer's stage.
    """
    import shutil

    d, base = os.path.split(physical(path))
    removed = []
    try:
        names = os.listdir(d)
    except OSError:
        return removed
    for name in names:
        if not name.startswith((f".{base}.tmp-", f".{base}.old-")):
            continue
        full = os.path.join(d, name)
        try:
            st = os.lstat(full)
            directory = stat.S_ISDIR(st.st_mode)
            age = time.time() - st.st_mtime
            if directory and age < _STALE_DIR_S:
                continue  # just made: its writer may not hold its lock yet
            if not directory and (not stat.S_ISREG(st.st_mode) or age < _STALE_FILE_S):
                continue
            fd = os.open(full, (os.O_RDONLY if directory else os.O_RDWR) | os.O_NOFOLLOW
                         | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            if not _try_lock(fd, directory):
                continue  # a live writer holds it
            if directory:
                shutil.rmtree(full, ignore_errors=True)
            else:
                os.remove(full)
            removed.append(name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def live_stage(path: str) -> tuple[str, int | None] | None:
    """Returns a hidden ``.<name>.tmp-*`` stage directory beside ``path`` that a live writer
    holds (:func:`hold`), with that writer's pid when the kernel shows it, or None.

    The kernel's lock table (``/proc/locks``) is read, never a lock taken: probing with
    ``flock`` could steal the lock a writer takes right after its ``mkdir``. Where that table
    is missing, a stage at least a second old is probed instead (its writer locked it within
    microseconds).
    """
    d, base = os.path.split(physical(path))
    try:
        names = sorted(n for n in os.listdir(d) if n.startswith(f".{base}.tmp-"))
    except OSError:
        return None
    if not names:
        return None
    held = _flocks()
    for name in names:
        full = os.path.join(d, name)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue
        if held is not None:
            key = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
            if key in held:
                return full, held[key]
            continue
        if time.time() - st.st_mtime < 1:
            continue
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            if not _try_lock(fd, True):
                return full, None
        finally:
            os.close(fd)
    return None


def _flocks() -> dict[tuple[int, int, int], int | None] | None:
    """The ``flock`` locks the kernel lists (``/proc/locks``): (major, minor, inode) -> the
    holder's pid (None where this pid namespace cannot see it); None without that table."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    held: dict[tuple[int, int, int], int | None] = {}
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or "->" in fields:
            continue
        try:
            pid = int(fields[4])
            major, minor, ino = fields[5].split(":")
            held[(int(major, 16), int(minor, 16), int(ino))] = pid if pid > 0 else None
        except ValueError:
            continue
    return held


#: Name prefix of the private directories in $TMPDIR where an output is built before it is
#: uploaded (:func:`local_stage`): ``ckpt-stage-<pid>-<kind>-<random>``.
STAGE_PREFIX = "ckpt-stage-"
_STAGE_NAME = re.compile(re.escape(STAGE_PREFIX) + r"(\d+)-")


@contextmanager
def local_stage(kind: str) -> Iterator[str]:
    """Yields a new private directory in ``$TMPDIR`` (``ckpt-stage-<pid>-<kind>-…``) to build
    an output in before it is uploaded; it is removed afterwards, and locked (:func:`hold`)
    meanwhile, so that a later run removes the stages of writers killed before they could
    (:func:`sweep_stages`, run first)."""
    import shutil
    import tempfile

    sweep_stages(tempfile.gettempdir())
    path = tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-{kind}-")
    held = hold(path)
    try:
        yield path
    finally:
        release(held)
        shutil.rmtree(path, ignore_errors=True)


def sweep_stages(directory: str) -> list[str]:
    """Removes the :func:`local_stage` directories in ``directory`` whose writer is gone (no
    process holds its lock, and its pid no longer runs here or it is older than 30 s: a live
    writer locks its stage within microseconds); returns their names. Other users' stages
    and everything else in ``directory`` are left alone."""
    import shutil

    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = _STAGE_NAME.match(name)
        if not m:
            continue
        full = os.path.join(directory, name)
        try:
            st = os.lstat(full)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            if _pid_runs(int(m.group(1))) and time.time() - st.st_mtime < _STALE_DIR_S:
                continue
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            if _try_lock(fd, True):  # no live writer holds it
                shutil.rmtree(full, ignore_errors=True)
                removed.append(name)
        finally:
            os.close(fd)
    return removed


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: another user's live process
    return True
