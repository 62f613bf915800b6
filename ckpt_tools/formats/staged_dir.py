"""Checkpoint output directories: staged beside ``--out`` and published in one rename.

:class:`StagedDir` is the directory half of the writer discipline described in
:mod:`ckpt_tools.formats._write`: a new ``--out`` is claimed with ``RENAME_NOREPLACE``, an
existing one swapped as a whole with ``RENAME_EXCHANGE`` (its other files hard-linked into the
stage first), so a reader sees the old complete checkpoint or the new one, even after
``kill -9``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable

from ..errors import OutputError, WriteError
from ._write import (
    LOCATION_ERRNOS,
    RENAME_EXCHANGE,
    Inputs,
    check_out_value,
    file_kind,
    fsync_path,
    inode_key,
    make_parents,
    os_errors,
    pause_point,
    remove_parents,
    rename_noreplace,
    renameat2,
    temp_sibling,
)
from .write_locks import hold, live_stage, release, sweep_stale


class StagedDir:
    """A checkpoint output directory, staged beside ``out`` and published in one rename.

    Args:
        out: the ``--out`` directory (new, or existing: then it is swapped as a whole).
        inputs: the command's input files.
        owned: predicate on a file name: the outputs this write replaces (with ``overwrite``)
            in an existing ``out``; other files there are kept.
        overwrite: replace existing owned names.
        owned_dirs: owned names may be directories, replaced as a whole (a SavedModel output's
            ``variables/`` and ``assets/``); other directories in ``out`` are still refused.

    Use as a context manager: ``path`` is the directory to write into; ``publish()`` makes it
    visible; leaving without publishing (or on an error) removes the stage.

    Raises:
        OutputError: ``out`` is not a directory, holds an input, holds a subdirectory (it is
            swapped as a whole), has an owned name and not ``overwrite``, or another process is
            writing it; or it cannot be created there.
    """

    def __init__(self, out: str, inputs: Inputs, owned: Callable[[str], bool], *,
                 overwrite: bool, owned_dirs: bool = False):
        self.out = out
        self._owned_dirs = owned_dirs
        self._inputs, self._owned, self._overwrite = inputs, owned, overwrite
        check_out_value(out, directory=True)
        self._lock_fd: int | None = None
        self._held: int | None = None
        self._created: list[str] = []
        self._published = False
        self.path = ""
        self.existing = os.path.lexists(out)
        # Resolved once, the way the kernel does (symlinks, then ".."): checked and written
        # at the same place.
        self._real = os.path.realpath(out)

    def check(self) -> None:
        """Checks ``out`` without creating anything (used by ``--dry-run`` as well).

        Raises:
            OutputError: see the class.
        """
        out = self.out
        self._inputs.refuse_shadowing(out)
        self._refuse_live_stage()
        if not self.existing:
            return
        if not os.path.isdir(out):
            raise OutputError(f"{out}: exists and is not a directory")
        self._check_replaceable()
        held = self._inputs.held_by(out)
        if held is not None:
            raise OutputError(
                f"{out}: holds the input {held}; refusing to write a checkpoint there (its "
                "'checkpoint' state file and files would be replaced); choose another --out")
        try:
            names = os.listdir(out)
        except OSError as exc:
            raise OutputError(f"{out}: cannot read the output directory ({exc.strerror})") \
                from None
        for name in sorted(names):
            full = os.path.join(out, name)
            st = os.lstat(full)
            if self._owned(name):
                if not stat.S_ISREG(st.st_mode) and not (self._owned_dirs
                                                         and stat.S_ISDIR(st.st_mode)):
                    raise OutputError(f"{full}: is {file_kind(st.st_mode)}, not a regular file; "
                                      "refusing to replace it")
                if self._inputs.which(full):
                    raise OutputError(f"{full}: is input {self._inputs.which(full)}; refusing "
                                      "to overwrite it (--force never replaces inputs)")
                if not self._overwrite:
                    raise OutputError(f"{full}: already exists (pass --force to replace it; "
                                      "Python: overwrite=True)")
            elif stat.S_ISDIR(st.st_mode):
                raise OutputError(
                    f"{out}: holds the directory {name!r}; a checkpoint output directory is "
                    "replaced as a whole, so it may hold files only: choose another --out")
            elif os.geteuid() != 0 and st.st_uid != os.geteuid():
                raise OutputError(
                    f"{full}: belongs to another user; an existing --out is replaced as a "
                    "whole with its other files hard-linked into the new copy, which the "
                    "system refuses for other users' files: choose a new --out")
        if not os.access(out, os.W_OK) or not os.access(os.path.dirname(self._real), os.W_OK):
            raise OutputError(f"{out}: output directory (or its parent) is not writable")

    def _refuse_live_stage(self) -> None:
        """Refuses ``out`` while another process stages a checkpoint for it (a live
        ``.<out>.tmp-*`` sibling): a new ``out`` has nothing to lock until it is published,
        and the second writer would otherwise run to the end and then replace the first's
        output or fail."""
        live = live_stage(self._real)
        if live is None:
            return
        _, pid = live  # its hidden stage's name is not shown: errors name your path
        who = f" (pid {pid})" if pid is not None else ""
        raise OutputError(f"{self.out}: another process is writing it{who}; refusing to "
                          "write there meanwhile: wait for it to finish or choose another "
                          "--out")

    def check_free(self) -> None:
        """Refuses an existing ``out`` that another process is writing now (it holds the
        lock :meth:`__enter__` takes); holds nothing afterwards.

        Raises:
            OutputError: another process is writing it.
        """
        if self.existing and os.path.isdir(self._real):
            self._lock()
            self._unlock()

    def _check_replaceable(self) -> None:
        """Refuses, before anything is staged, an existing ``out`` that cannot be swapped."""
        out, real = self.out, self._real
        st = os.stat(real)
        parent = os.path.dirname(real)
        if _is_mount_point(real) or (parent != real and os.stat(parent).st_dev != st.st_dev):
            raise OutputError(
                f"{out}: is a mount point; an existing --out is replaced as a whole by a "
                "copy staged beside it, which cannot be done across filesystems (nothing was "
                f"written): write into a new directory inside it, e.g. --out "
                f"{os.path.join(out, 'ckpt')}")
        if os.geteuid() != 0 and st.st_uid != os.geteuid():
            raise OutputError(
                f"{out}: belongs to another user (uid {st.st_uid}); an existing --out is "
                "replaced as a whole, which would make the new one yours: choose a new --out "
                "(e.g. a directory inside it)")

    def __enter__(self) -> StagedDir:
        self.check()
        out = self.out
        if self.existing:
            self._lock()
            self.check()  # again, under the lock
        self._created = make_parents(os.path.dirname(self._real))
        sweep_stale(self._real)  # stages of killed writers (a live one holds its lock)
        self.path = temp_sibling(self._real)
        try:
            os.mkdir(self.path)  # default mode: the umask applies, as for any mkdir
        except OSError as exc:
            self._unlock()
            remove_parents(self._created)
            if exc.errno in LOCATION_ERRNOS:
                raise OutputError(f"{out}: cannot create the output directory there "
                                  f"({exc.strerror or exc})") from None
            raise WriteError(out, exc.strerror or str(exc), "creating it") from None
        self._held = hold(self.path)
        try:
            if self.existing:
                self._adopt()
        except BaseException:
            self._discard()
            raise
        return self

    def _lock(self) -> None:
        import fcntl

        fd = os.open(self._real, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if inode_key(os.fstat(fd)) != inode_key(os.stat(self._real)):
                raise BlockingIOError  # swapped by another writer between open and flock
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            raise OutputError(f"{self.out}: already exists (another process is writing "
                              "it)") from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _adopt(self) -> None:
        """Hard-links the files of the existing ``out`` that this write does not replace."""
        st = os.stat(self._real)
        os.chmod(self.path, stat.S_IMODE(st.st_mode))
        if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
            os.chown(self.path, st.st_uid, st.st_gid)
        for name in os.listdir(self._real):
            if not self._owned(name):
                with os_errors(os.path.join(self.out, name), "linking it into the new output"):
                    os.link(os.path.join(self._real, name), os.path.join(self.path, name),
                            follow_symlinks=False)

    def shown(self, path: str) -> str:
        """Maps a path inside the stage to the name it will have under ``out``."""
        if self.path and path.startswith(self.path + os.sep):
            return os.path.join(self.out, path[len(self.path) + 1:])
        return path

    def publish(self) -> None:
        """Makes the staged directory visible as ``out`` in one rename.

        Raises:
            OutputError: another writer created ``out`` first.
            WriteError: an OS error while publishing.
        """
        with os_errors(self.out, "syncing"):
            for root, dirs, names in os.walk(self.path):
                for name in names:
                    full = os.path.join(root, name)
                    if os.path.isfile(full) and not os.path.islink(full):
                        fsync_path(full)
                for name in dirs:
                    fsync_path(os.path.join(root, name), directory=True)
            fsync_path(self.path, directory=True)
        if not self.existing:
            try:
                with os_errors(self.out, "renaming it into place"):
                    rename_noreplace(self.path, self._real)
            except (FileExistsError, WriteError) as exc:
                if isinstance(exc, FileExistsError) or os.path.lexists(self._real):
                    raise OutputError(f"{self.out}: already exists (another process created "
                                      "it first)") from None
                raise
            self._published = True
        else:
            with os_errors(self.out, "swapping it into place"):
                self._swap()
        with os_errors(self.out, "syncing"):
            fsync_path(os.path.dirname(self._real), directory=True)

    def _swap(self) -> None:
        old = self.path
        pause_point(f"exchange {self.path} <-> {self._real}")
        if not renameat2(self.path, self._real, RENAME_EXCHANGE):
            # No atomic exchange here: move the old directory aside, then the new one in (a
            # reader may briefly find no directory, never a mixed one).
            old = temp_sibling(self._real, "old")
            os.rename(self._real, old)
            pause_point(f"rename {self.path} -> {self._real}")
            os.rename(self.path, self._real)
            _remove_dir(self.path)
        self._published = True
        # ``old`` now holds the previous directory: keep anything created there meanwhile,
        # then delete what this write replaced.
        for name in os.listdir(old):
            full, new = os.path.join(old, name), os.path.join(self._real, name)
            if self._owned(name):
                continue
            try:
                if inode_key(os.lstat(full)) == inode_key(os.lstat(new)):
                    continue  # the link made by _adopt
            except FileNotFoundError:
                pass
            try:
                rename_noreplace(full, new)
            except OSError:
                pass  # keep it in ``old``, which is then not removed
        for name in os.listdir(old):
            full, new = os.path.join(old, name), os.path.join(self._real, name)
            try:
                linked = inode_key(os.lstat(full)) == inode_key(os.lstat(new))
            except FileNotFoundError:
                linked = False
            if self._owned(name) or linked:
                if os.path.isdir(full) and not os.path.islink(full):
                    import shutil

                    shutil.rmtree(full)  # an owned folder (owned_dirs): replaced as a whole
                else:
                    os.remove(full)
        _remove_dir(old)

    def _discard(self) -> None:
        if self.path and not self._published:
            import shutil

            # The stage holds only this write's files and hard links (their originals stay).
            shutil.rmtree(self.path, ignore_errors=True)
            remove_parents(self._created)
        release(self._held)
        self._held = None
        self._unlock()

    def __exit__(self, exc_type, exc, tb) -> None:
        self._discard()
        if isinstance(exc, WriteError) and not self._published:
            exc.clean = True


def _is_mount_point(real: str) -> bool:
    """True when the resolved path ``real`` is a mount point (bind mounts included, which
    ``os.path.ismount`` misses when they come from the same filesystem)."""
    if os.path.ismount(real):
        return True
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split(" ")
                if len(fields) > 4 and re.sub(
                        r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]) == real:
                    return True
    except OSError:
        pass
    return False


def _remove_dir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
