"""The one writer discipline every ckpt_tools writer follows (``restore-ema``, ``export``).

This module holds single files; :mod:`.write_checks` the names and inputs (imported here
too); :mod:`.staged_dir` the checkpoint directories (:class:`StagedDir`); :mod:`.write_locks`
the locks that tell a live writer's temporaries from a killed one's.

Promises, and how they are kept:

- **Inputs are never modified.** :class:`Inputs` records every file a command read (index,
  data shards, ``.meta``, the ``checkpoint`` state file, Keras files) by device and inode, so
  symlinks and hard links to them are recognised (``os.path.samefile`` semantics). An output
  that *is* one of them is refused (exit 7) in every format, ``--force`` or not; a checkpoint
  output never goes into a directory holding an input file.
- **Outputs are regular files or new directories.** An existing device, FIFO, socket, symlink
  or directory under an output file name is refused, never replaced (:func:`check_file_output`).
- **A whole output appears or changes atomically.** A single file is written under a hidden
  temporary name, fsynced, then published with one ``rename`` (:func:`atomic_file`). A
  checkpoint *directory* is staged as a hidden sibling directory (``.<out>.tmp-XXXXXXXX``) and
  published with one ``renameat2`` (:class:`StagedDir`): ``RENAME_NOREPLACE`` for a new
  ``--out``, ``RENAME_EXCHANGE`` to swap an existing one (its other files are hard-linked into
  the stage first, so they stay). A reader of ``--out`` therefore sees the old complete
  checkpoint or the new complete one, even after ``kill -9`` at any point; a ``kill -9`` can
  leave a hidden ``.<out>.tmp-*`` sibling behind (never under the output name), which may be
  deleted.
- **Concurrent writers to one output: exactly one wins.** New names are claimed with
  ``RENAME_NOREPLACE`` (or ``link``, which fails on an existing name); an existing ``--out``
  directory is locked with ``flock`` on the directory itself (released by the kernel when a
  process dies, so nothing stale is left). Losers exit 7 "already exists", naming the user's
  path.
- **The umask is honoured**: directories come from ``mkdir`` and files from ``open`` with the
  default modes, never ``mkdtemp``'s 0700.
- **Names are validated** before becoming file or member names (:func:`check_file_name`,
  :func:`check_member_name`).
- **OS errors name the output path and the operation** (:class:`~ckpt_tools.errors.WriteError`,
  exit 1): ``out/m.ckpt.data-00000-of-00001: No space left on device while writing (nothing was
  left behind)``.

Tests pause a writer at each rename with :func:`pause_point` (environment variables
``CKPT_TOOLS_PAUSE_AT`` = the 1-based number of the rename, ``CKPT_TOOLS_PAUSE_FLAG`` = a file
the writer creates there, then waits until it is removed).
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import OutputError, WriteError
from .write_checks import (  # noqa: F401 (the names section is imported from here too)
    SAFETENSORS_RESERVED,
    Inputs,
    check_file_name,
    check_member_name,
    checkpoint_file_kind,
    file_kind,
    inode_key,
    member_name_ok,
    shadowed_checkpoint,
)
from .write_locks import hold, physical, release, sweep_stale

PAUSE_AT_ENV = "CKPT_TOOLS_PAUSE_AT"
PAUSE_FLAG_ENV = "CKPT_TOOLS_PAUSE_FLAG"
_pauses = [0]

_RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100
# Errnos meaning "renameat2 or this flag is not available here": fall back.
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, getattr(errno, "ENOTSUP", errno.EINVAL)}
# Errnos meaning "this location cannot be written" (exit 7) rather than "writing failed".
LOCATION_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR}


def pause_point(what: str) -> None:
    """Test hook called before every rename a writer does, and where a remote write starts
    uploading or streaming (a no-op unless the env asks).

    When this is the ``CKPT_TOOLS_PAUSE_AT``-th call of the process, creates the
    ``CKPT_TOOLS_PAUSE_FLAG`` file (only if it does not exist yet, never through a symlink),
    writes ``what`` to it and waits (at most 10 minutes) until that file is removed.
    """
    at = os.environ.get(PAUSE_AT_ENV)
    if not at:
        return
    _pauses[0] += 1
    flag = os.environ.get(PAUSE_FLAG_ENV)
    if str(_pauses[0]) != at or not flag:
        return
    try:  # a new file only, never through a symlink: the hook cannot truncate anything
        fd = os.open(flag, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(what)
    deadline = time.monotonic() + 600
    while os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.01)


# -- renames -------------------------------------------------------------------------------
def renameat2(src: str, dst: str, flags: int) -> bool:
    """Calls ``renameat2``; returns False when it (or ``flags``) is not supported here.

    Raises:
        OSError: any other failure (``EEXIST``/``ENOTEMPTY`` when ``dst`` exists).
    """
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), src, None, dst)


def rename_noreplace(src: str, dst: str) -> None:
    """Renames ``src`` to ``dst`` only if ``dst`` does not exist (atomically where possible).

    Uses ``renameat2(RENAME_NOREPLACE)``; else ``link`` + ``unlink`` for a file; else (a
    directory on a system without renameat2) a check then ``rename``, which a non-empty
    ``dst`` still makes fail.

    Raises:
        FileExistsError: ``dst`` exists.
    """
    pause_point(f"rename {src} -> {dst}")
    if renameat2(src, dst, _RENAME_NOREPLACE):
        return
    if not os.path.isdir(src):
        os.link(src, dst)
        os.unlink(src)
        return
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    os.rename(src, dst)


def replace(src: str, dst: str) -> None:
    """``os.replace`` behind the test pause hook (every writer rename goes through here)."""
    pause_point(f"replace {src} -> {dst}")
    os.replace(src, dst)


def fsync_path(path: str, directory: bool = False) -> None:
    """fsyncs a file or directory by name (directories: so renames in it are durable)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):  # some filesystems refuse dir fsync
            raise
    finally:
        os.close(fd)


def check_out_value(path: str, *, directory: bool) -> None:
    """Refuses an ``--out`` value that names no place (before anything is read or staged).

    Raises:
        OutputError: empty; or, for a single-file output, ending in ``/``.
    """
    if not path:
        raise OutputError("--out is empty: give a file or directory name")
    if not directory and path.endswith(("/", os.sep)):
        raise OutputError(f"{path}: ends in '/', so it names a directory; give the output "
                          "file's name")


def temp_sibling(path: str, kind: str = "tmp") -> str:
    """Returns a hidden, unique name beside ``path`` (same directory: renames stay atomic)."""
    d, base = os.path.split(physical(path))
    return os.path.join(d, f".{base}.{kind}-{uuid.uuid4().hex[:8]}")


def make_parents(directory: str) -> list[str]:
    """Creates ``directory`` and its missing parents (umask modes); returns those created,
    deepest first, for :func:`remove_parents` to undo after a failed write.

    Raises:
        OutputError: a parent cannot be created (naming it).
    """
    created = []
    d = os.path.abspath(directory)
    while not os.path.isdir(d):
        created.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    for d in reversed(created):
        try:
            os.mkdir(d)
        except FileExistsError:
            if not os.path.isdir(d):
                raise OutputError(f"{d}: exists and is not a directory") from None
        except OSError as exc:
            remove_parents(created)
            raise OutputError(f"{d}: cannot create the output's directory there "
                              f"({_reason(exc)})") from None
    return created


def remove_parents(created: list[str]) -> None:
    """Removes the directories :func:`make_parents` created (only if still empty)."""
    for d in created:
        try:
            os.rmdir(d)
        except OSError:
            break


def copy_file(src: str, dst: str, shown: str, inputs: Inputs | None = None) -> None:
    """Copies the input file ``src`` to the new file ``dst`` in 1 MiB pieces.

    Errors reading ``src`` propagate as they are (they name the input); errors writing
    ``dst`` (disk full, ``ulimit -f``) become a :class:`WriteError` naming ``shown``, the
    output's name, and "writing" (``shutil.copyfile``'s ``sendfile`` path names the source
    for both, which blamed the input for a full output disk).

    Raises:
        OSError: reading ``src``.
        WriteError: writing ``dst``.
    """
    with open(src, "rb") as fin:
        with os_errors(shown, "writing"):
            fout = open(dst, "wb")
        with fout:
            while True:
                piece = fin.read(1 << 20)
                if not piece:
                    break
                with os_errors(shown, "writing"):
                    fout.write(piece)
            with os_errors(shown, "writing"):
                fout.flush()


def copy_tree(src: str, dst: str, shown: Callable[[str], str]) -> list[str]:
    """Copies directory ``src`` to the new ``dst`` (symbolic links stay links, never
    followed); returns the files written. Errors as :func:`copy_file`, naming
    ``shown(path)`` for the output path."""
    files = []
    with os_errors(shown(dst), "writing"):
        os.mkdir(dst)
    for name in sorted(os.listdir(src)):
        s, t = os.path.join(src, name), os.path.join(dst, name)
        if os.path.islink(s):
            with os_errors(shown(t), "writing"):
                os.symlink(os.readlink(s), t)
        elif os.path.isdir(s):
            files += copy_tree(s, t, shown)
        else:
            copy_file(s, t, shown(t))
            files.append(t)
    return files


@contextmanager
def os_errors(path: str, operation: str, inputs: Inputs | None = None) -> Iterator[None]:
    """Turns an ``OSError`` into a :class:`WriteError` naming the output ``path``.

    An OS error naming one of ``inputs`` (a file being read) passes through unchanged.
    """
    try:
        yield
    except WriteError:
        raise
    except OSError as exc:
        if inputs is not None and exc.filename and inputs.which(str(exc.filename)):
            raise
        raise WriteError(path, _reason(exc), operation) from None


def _reason(exc: OSError) -> str:
    """The OS's words for ``exc`` (HDF5 hides them inside a long message of its own)."""
    text = " ".join(str(exc.strerror or exc).split())
    m = re.search(r"error message = '([^']+)'", text)
    return m.group(1) if m else (text or type(exc).__name__)


# -- single files --------------------------------------------------------------------------
def check_file_output(path: str, inputs: Inputs, overwrite: bool, *,
                      create_parents: bool = False) -> None:
    """Checks that ``path`` may be written as a single output file.

    Raises:
        OutputError: ``path`` is empty or ends in ``/``, is an input, exists and is not a
            regular file, exists and ``overwrite`` is false, or its directory does not exist
            (and ``create_parents`` is false) or is not writable.
    """
    check_out_value(path, directory=False)
    src = inputs.which(path)
    if src is not None:
        what = "the input" if os.path.abspath(src) == os.path.abspath(path) else f"input {src}"
        raise OutputError(f"{path}: is {what}; refusing to overwrite it (--force never "
                          "replaces inputs)")
    real = physical(path)
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write there ({exc.strerror})") from None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{path}: is {file_kind(st.st_mode)}, not a regular file; refusing "
                              "to replace it")
        if not overwrite:
            raise OutputError(f"{path}: already exists (pass --force to replace it; "
                              "Python: overwrite=True)")
    directory = os.path.dirname(real)
    if create_parents and not os.path.lexists(directory):
        d = directory
        while not os.path.lexists(d):
            d = os.path.dirname(d)
        if not os.path.isdir(d):
            raise OutputError(f"{d}: is not a directory, so {path} cannot be created")
        if not os.access(d, os.W_OK):
            raise OutputError(f"{d}: is not writable, so {path}'s directory cannot be created")
        return
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise OutputError(f"{directory}: output directory does not exist or is not writable")


def _lock_existing(path: str, real: str) -> int | None:
    """Locks the existing output file ``real`` (``--force``): a second ``--force`` writer
    of the same file then exits 7 instead of racing, so exactly one wins."""
    import fcntl

    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError:
        return None  # unreadable: the rename still replaces it atomically
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if inode_key(os.fstat(fd)) != inode_key(os.lstat(real)):
            raise BlockingIOError  # replaced by another writer between open and flock
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        raise OutputError(f"{path}: already exists (another process is writing it)") from None
    return fd


@contextmanager
def atomic_file(path: str, inputs: Inputs, *, overwrite: bool,
                create_parents: bool = False) -> Iterator[str]:
    """Yields a temporary path to write; publishes it as ``path`` with one rename on success.

    The temporary file is fsynced, then renamed over ``path`` (``overwrite``; the existing
    file is ``flock``-ed meanwhile, so a concurrent ``--force`` writer exits 7) or linked to
    it only if ``path`` does not exist yet (concurrent writers: one wins). On any failure the
    temporary file (and any directory ``create_parents`` made) is removed and nothing appears
    under ``path``. Temporaries left by killed writers of ``path`` are removed first.

    Raises:
        OutputError: see :func:`check_file_output`; or another writer created ``path`` first.
        WriteError: an OS error while writing, syncing or renaming.
    """
    check_file_output(path, inputs, overwrite, create_parents=create_parents)
    real = physical(path)
    created = make_parents(os.path.dirname(real)) if create_parents else []
    lock = _lock_existing(path, real) if overwrite else None
    existed = lock is not None or os.path.lexists(real)
    sweep_stale(real)
    tmp = temp_sibling(real)
    held = None
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                         0o666)
            os.close(fd)
        except OSError as exc:
            if exc.errno in LOCATION_ERRNOS:  # the location refuses new files: exit 7, like a check
                raise OutputError(f"{path}: cannot write there ({_reason(exc)})") from None
            raise WriteError(path, _reason(exc), "creating it") from None
        held = hold(tmp)
        with os_errors(path, "writing", inputs):
            yield tmp
        with os_errors(path, "syncing"):
            fsync_path(tmp)
        check_file_output(path, inputs, overwrite)  # again: it may have changed meanwhile
        with os_errors(path, "renaming into place"):
            if overwrite and existed:
                replace(tmp, real)
            else:
                try:
                    rename_noreplace(tmp, real)
                except FileExistsError:
                    raise OutputError(f"{path}: already exists (another process wrote it "
                                      "first)") from None
            fsync_path(os.path.dirname(real), directory=True)
    except BaseException as exc:
        _remove(tmp)
        remove_parents(created)
        if isinstance(exc, WriteError):
            exc.clean = True
        raise
    finally:
        release(held)
        release(lock)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
