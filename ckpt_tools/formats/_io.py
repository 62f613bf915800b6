"""Safe file access shared by every reader and writer: regular files only, read-only maps.

Why one place: a FIFO or a device passed as a data shard must fail at once instead of
blocking ``open`` forever, and a mapping must not be closed while NumPy views of it are still
alive (``mmap.close`` then raises ``BufferError`` and hides the real error).
"""

from __future__ import annotations

import codecs
import errno
import gc
import mmap
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import CheckpointNotFoundError, CorruptCheckpointError, UnsupportedFormatError


def is_url(path: str) -> bool:
    """Returns whether ``path`` is a URL (``s3://…``, ``gs://…``, ``https://…``) rather than a
    local path: such paths are read through fsspec (:mod:`.remote`), imported only then."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme[:1].isalpha() and all(c.isalnum() or c in "+.-" for c in scheme)


#: Protocols that name the same store as another: one spelling each, so that an output given
#: as ``s3a://b/run`` is recognised as the input ``s3://b/run`` (s3fs serves both).
_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


def canonical_location(path: str | os.PathLike) -> str:
    """Returns ``path`` spelled once per location, before any input/output comparison: a
    ``file:`` URL (``file:///abs``, ``file://localhost/abs``, ``file:/abs``) becomes its local
    path (read and written by the local code, so that the local input checks apply); a URL
    gets its protocol lower-cased and aliases mapped (``s3a://`` -> ``s3://``, ``gcs://`` ->
    ``gs://``). Other paths are returned unchanged.

    Object stores do not resolve ``.``/``..``/empty segments (``s3://b/x/../y`` is the key
    ``x/../y``), so such URLs are refused rather than read or written somewhere other than
    where the checks looked.

    Raises:
        UnsupportedFormatError: a URL without a bucket or host, with ``.``, ``..`` or empty
            segments, or a file URL naming a host other than ``localhost``, a relative path,
            a query string or fragment, or a NUL byte (``%00``).
    """
    text = os.fspath(path)
    if text[:5].lower() == "file:" and text[5:7] != "//":
        # RFC 8089's authority-less form: file:/abs/path is the local /abs/path (it used to be
        # written to a relative directory literally named "file:").
        return _file_path(text, text[5:])
    if not is_url(text):
        return text
    scheme, _, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme == "file":
        if rest[:10].lower() == "localhost/":  # RFC 8089: "localhost" is this machine
            rest = rest[len("localhost"):]
        return _file_path(text, rest)
    scheme = _ALIASES.get(scheme, scheme)
    parts = rest.split("/")
    if not parts[0]:
        raise UnsupportedFormatError(f"{text}: no bucket (or host) in the URL; write it as "
                                     f"{scheme}://BUCKET/path")
    inner = parts[1:-1] if parts[-1] == "" else parts[1:]
    if any(p in ("", ".", "..") for p in inner):
        raise UnsupportedFormatError(
            f"{text}: has an empty, '.' or '..' path segment, which object stores keep as "
            "part of the key (it would not name the location it looks like); write the URL "
            "without them")
    return scheme + "://" + rest


def _file_path(text: str, path: str) -> str:
    """The local path of file URL ``text`` whose path part is ``path`` (percent-decoded, as
    RFC 8089 spells it: ``file:///tmp/a%20b`` is ``/tmp/a b``).

    Raises:
        UnsupportedFormatError: ``path`` is not absolute (a host, or a relative path), has a
            query string or fragment (RFC 3986 puts them outside the path: they were read as
            part of the file name), or decodes to a NUL byte (``%00``: no file name holds one).
    """
    if not path.startswith("/"):
        raise UnsupportedFormatError(
            f"{text}: a file URL must name an absolute local path (file:///dir/... or "
            "file:/dir/...; the only host it may name is localhost); or give the local path "
            "itself")
    if "?" in path or "#" in path:
        raise UnsupportedFormatError(
            f"{text}: a file URL with a query string or fragment (not part of its path); "
            "percent-encode a '?' or '#' of the file name (%3F, %23), or give the local path "
            "itself")
    from urllib.parse import unquote

    path = unquote(path)
    if "\0" in path:
        raise UnsupportedFormatError(
            f"{text}: a file URL whose path holds a NUL byte (%00), which no local file name "
            "can hold")
    return path


def _remote():
    from . import remote  # fsspec is imported only for URLs

    return remote.session()


@contextmanager
def one_remote_session(paths) -> Iterator[None]:
    """With any URL among ``paths``, every URL opened inside shares one remote session
    (:func:`.remote.one_session`: each small object fetched once per command, not once per
    checkpoint opened); a no-op for local paths (fsspec is never imported for them)."""
    if not any(p is not None and is_url(os.fspath(p)) for p in paths):
        yield
        return
    from . import remote

    with remote.one_session():
        yield


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode)
            or stat.S_ISBLK(mode) else "not a regular file")


def _not_regular(path: str, mode: int) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"is {_kind(mode)}, not a regular file", path=path)


def _link_loop(path: str) -> CorruptCheckpointError:
    return CorruptCheckpointError("is a symbolic link loop, not a regular file", path=path)


def open_regular(path: str) -> int:
    """Opens ``path`` read-only and returns the descriptor, refusing anything but a regular file.

    ``O_NONBLOCK`` keeps ``open`` of a FIFO from waiting for a writer; ``fstat`` on the open
    descriptor (not a prior ``stat``) closes the race with a file swapped in between.

    Raises:
        CheckpointNotFoundError: ``path`` does not exist.
        CorruptCheckpointError: ``path`` is a directory, FIFO, socket or device.
        OSError: any other failure to open (permissions...), naming ``path``.
    """
    if is_url(path):
        raise CorruptCheckpointError("is a URL, not a local file", path=path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CorruptCheckpointError("is a directory, not a file", path=path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symbolic link loop is no file at all
            raise _link_loop(path) from None
        # A socket cannot be opened at all (ENXIO): say what it is rather than errno's words.
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _not_regular(path, st.st_mode)
    return fd


def open_binary(path: str):
    """Returns a buffered binary file object for reading a regular file (see :func:`open_regular`).

    Raises:
        CheckpointNotFoundError, CorruptCheckpointError: see :func:`open_regular`.
        RemoteAccessError: a URL that is forbidden or cannot be reached.
    """
    if is_url(path):
        import io

        return io.BytesIO(_remote().fetch(path))
    return os.fdopen(open_regular(path), "rb")


def regular_size(path: str) -> int:
    """Returns the size of ``path``, which must be a regular file (one ``stat``, nothing opened).

    Used to compare an index's extents with its data files' sizes before reading any data.

    Raises:
        CheckpointNotFoundError: ``path`` does not exist.
        CorruptCheckpointError: ``path`` is a directory, FIFO, socket or device.
    """
    if is_url(path):  # from its directory's listing: no request per file
        size = _remote().size(path)
        if size is None:
            raise CheckpointNotFoundError(f"{path}: not found")
        return size
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{path}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_loop(path) from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    return st.st_size


def require_regular(path: str) -> None:
    """Raises CorruptCheckpointError if ``path`` exists but is not a regular file (a FIFO,
    device, socket or directory given where a file is expected); does nothing otherwise."""
    if is_url(path):
        return
    try:
        st = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)


def map_file(path: str):
    """Memory-maps a regular file read-only; an empty file maps to ``b""``.

    Returns:
        an ``mmap.mmap`` (or ``b""``), to be released with :func:`close_map`.

    A URL is fetched whole into ``bytes`` (indexes and graphs are small; data shards go
    through :func:`open_ranged` instead).

    Raises:
        CheckpointNotFoundError, CorruptCheckpointError: see :func:`open_regular`.
    """
    if is_url(path):
        return _remote().fetch(path)
    fd = open_regular(path)
    try:
        if os.fstat(fd).st_size == 0:
            return b""
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


# A remote .meta fetched for its collections (formats.meta), kept for its graph_def
# (formats.graph_def: the save op, the update ops): one request per open checkpoint, not one
# per question. Only the last two are kept; a later read_meta_graph of the URL replaces it.
_KEPT: dict[str, bytes] = {}


def keep_fetched(url: str, data) -> None:
    """Keeps ``data``, just fetched whole from ``url``, for :func:`fetched` (two at most)."""
    if isinstance(data, bytes):
        _KEPT.pop(url, None)
        while len(_KEPT) >= 2:
            del _KEPT[next(iter(_KEPT))]
        _KEPT[url] = data


def fetched(url: str) -> bytes | None:
    """The bytes :func:`keep_fetched` kept for ``url``, or ``None``."""
    return _KEPT.get(url)


def release_pages(mm, start: int, length: int) -> None:
    """Drops the pages of ``mm[start:start + length]`` from this process (MADV_DONTNEED on a
    clean, read-only file mapping only unmaps them: the data stays in the page cache)."""
    if not isinstance(mm, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    aligned = start // page * page
    try:
        mm.madvise(mmap.MADV_DONTNEED, aligned, start + length - aligned)
    except (OSError, ValueError):  # advice only: never worth failing a read for
        pass


def close_map(mm) -> None:
    """Closes a mapping from :func:`map_file`, unless views of it are still alive.

    While an exception propagates, its traceback can still hold memoryviews of the mapping;
    the mapping is then released when the last view is garbage-collected instead.
    """
    if isinstance(mm, mmap.mmap):
        try:
            mm.close()
        except BufferError:
            pass
    elif hasattr(mm, "close"):  # a remote file: its read-ahead is released
        mm.close()


def sizes_listed(path: str) -> bool:
    """Returns whether the sizes of the files beside ``path`` are known without a request per
    file: true for local paths and listed stores (S3, GCS...), false over ``http(s)://``,
    where each data shard's size costs a HEAD (asked when the shard is first read, so that
    ``ckpt list`` stays at a fixed number of requests)."""
    return not path.lower().startswith(("http://", "https://"))


def remote_session(path: str):
    """Returns the remote session now reading URL ``path`` (None for a local path). A reader
    keeps it for :func:`open_ranged`, so its reads stay pinned to the ETags its listing saw
    even after another command (in the same process) starts a new session."""
    return _remote() if is_url(path) else None


def open_ranged(path: str, extents: list[tuple[int, int]] | None = None, store=None):
    """Opens a data file for reading byte ranges with :func:`view`: a read-only map of a local
    file (:func:`map_file`), or a :class:`~.remote.RemoteFile` for a URL, which fetches only
    the ranges asked for (``extents``, the tensors' byte ranges, enable its read-ahead).

    Raises:
        CheckpointNotFoundError, CorruptCheckpointError: see :func:`open_regular`.
    """
    if not is_url(path):
        return map_file(path)
    store = store or _remote()
    if not sizes_listed(path):  # http(s): its size comes with the first read (no HEAD)
        return store.file(path, None, extents)
    size = store.size(path)
    if size is None:
        raise CheckpointNotFoundError(f"{path}: not found")
    return store.file(path, size, extents)


def view(data, start: int, end: int) -> memoryview:
    """Returns bytes ``[start, end)`` of what :func:`open_ranged` returned: a zero-copy view of
    a local map, the fetched range of a remote file."""
    read_range = getattr(data, "read_range", None)
    if read_range is not None:
        return memoryview(read_range(start, end))
    return memoryview(data)[start:end]


def file_size(path: str) -> int:
    """Returns the size of ``path`` in bytes (one ``stat``; used to bound index extents)."""
    if is_url(path):
        return regular_size(path)
    return os.stat(path).st_size


def temp_name(path: str) -> str:
    """Returns a hidden, unique sibling name for staging ``path`` (same directory: same device,
    so the final ``rename`` is atomic). ``os.urandom``, not ``uuid``: importing uuid (and the
    ``platform`` module it loads) cost every ``ckpt list`` ~2 ms for a name it never makes."""
    d, base = os.path.split(path)
    return os.path.join(d, f".{base}.tmp-{os.urandom(4).hex()}")


def remove_quietly(path: str) -> None:
    """Removes ``path`` if it exists (cleanup after a failed write)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector while a parser builds many small objects.

    Parsing an index of 100,000 tensors allocates several hundred thousand tuples, dicts and
    entries, none in a reference cycle; the collector would still traverse them all every few
    thousand allocations (~0.3 s of a 0.8 s ``ckpt list -q``). Nested and concurrent uses are
    safe: only the outermost one that found the collector enabled enables it again.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# A line of a ``checkpoint`` state file as TensorFlow's text format writes it (quotes inside
# a name are backslash-escaped).
_STATE_LINE = re.compile(
    r'^\s*(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"((?:[^"\\]|\\.)*)"')


def state_entries(raw: bytes) -> list[tuple[str, str]]:
    """Returns the ``(field, name)`` pairs of a ``checkpoint`` state file's bytes in file
    order: ``field`` is ``model_checkpoint_path`` or ``all_model_checkpoint_paths`` and
    ``name`` the checkpoint name unescaped (a malformed escape is kept as written). Other
    lines are skipped. One parser for the readers and the writers' checks, so both see the
    names TensorFlow would resolve.

    >>> state_entries(b'model_checkpoint_path: "ckpt-2"\\nall_model_checkpoint_paths: "a\\\\"b"')
    [('model_checkpoint_path', 'ckpt-2'), ('all_model_checkpoint_paths', 'a"b')]
    """
    out = []
    for line in raw.decode("utf-8", "replace").splitlines():
        m = _STATE_LINE.match(line)
        if m:
            try:
                name = codecs.escape_decode(m.group(2).encode("utf-8"))[0].decode(
                    "utf-8", "replace")
            except ValueError:  # a malformed escape ("\\x"): keep the name as written
                name = m.group(2)
            out.append((m.group(1), name))
    return out
