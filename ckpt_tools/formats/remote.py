"""Checkpoints behind fsspec URLs (``s3://``, ``gs://``, fsspec protocols with sized listings;
``http(s)://`` is refused).

What a reader needs from object storage, in as few requests as the format allows:

* one directory listing per directory (names, sizes: which files exist, how long shards are),
* small files read whole (the state file, the ``.index``, the ``.meta``),
* data shards read by byte ranges, several in flight at once (fsspec's ``cat_ranges``), with
  read-ahead when tensors are read in storage order (``verify``, ``export``, ``restore-ema``).

Imported only for URLs (:func:`ckpt_tools.formats._io.is_url`): a local ``ckpt list`` never
loads fsspec. Every fsspec call goes through :func:`_errors`, which turns the storage library's
exceptions into one-line errors naming the URL and saying whether it was not found (exit 3),
forbidden or a network failure (:class:`~ckpt_tools.errors.RemoteAccessError`, exit 1).
"""

from __future__ import annotations

import posixpath
from contextlib import contextmanager

from ..errors import (
    CheckpointError,
    CheckpointNotFoundError,
    RemoteAccessError,
    UnsupportedFormatError,
)

#: Read-ahead window of a data shard read in storage order, and the piece size big tensors
#: are split into so that they, too, come down over several connections at once.
WINDOW = 32 << 20
PIECE = 8 << 20
MAX_IN_FLIGHT = 16
_MAX_GAP = 1 << 20  # bytes between tensors fetched anyway rather than paying a request

# Bounded time on a host that does not answer: botocore's defaults wait 60 s per connection
# attempt and retry; a command should fail with "network failure" well before that adds up.
_OPTIONS = {p: {"config_kwargs": {"connect_timeout": 10, "read_timeout": 60,
                                  "retries": {"max_attempts": 3}}} for p in ("s3", "s3a")}

_INSTALL = 'pip install "ckpt-tools[remote]" (fsspec with s3fs; add gcsfs for gs://)'


def _fsspec():
    try:
        import fsspec
    except ImportError:
        raise UnsupportedFormatError(
            f"reading URLs needs fsspec: {_INSTALL}") from None
    return fsspec


def _status(exc: BaseException) -> int | None:
    """The HTTP status an fsspec backend's exception carries, when it carries one."""
    for attr in ("status", "code", "status_code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        value = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(value, int):
            return value
    return None


@contextmanager
def _errors(url: str):
    """Turns a storage library's exception into a CheckpointError naming ``url``.

    Raises:
        CheckpointNotFoundError: the object (or bucket) does not exist (404).
        RemoteAccessError: forbidden (401/403) or a network failure (anything else).
    """
    try:
        yield
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{url}: not found") from None
    except PermissionError as exc:
        raise RemoteAccessError(f"{url}: forbidden (access denied: {_short(exc)})") from None
    except ImportError as exc:  # a protocol whose backend is not installed (gcsfs...)
        raise UnsupportedFormatError(f"{url}: {_short(exc)}; {_INSTALL}") from None
    except Exception as exc:  # botocore, aiohttp, asyncio timeouts: all network-level
        status = _status(exc)
        if status == 404:
            raise CheckpointNotFoundError(f"{url}: not found") from None
        if status in (401, 403):
            raise RemoteAccessError(f"{url}: forbidden (HTTP {status})") from None
        raise RemoteAccessError(
            f"{url}: network failure ({type(exc).__name__}: {_short(exc)})") from None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


class Session:
    """One command's view of remote storage: a fresh filesystem per URL protocol (so nothing
    is served from a listing cached by an earlier command), directory listings cached for the
    command's duration, and a count of the requests made (for tests and benchmarks).
    """

    def __init__(self):
        self._fs: dict[str, object] = {}
        self._listings: dict[str, dict[str, dict]] = {}
        self._absent: set[str] = set()
        self._files: dict[str, RemoteFile] = {}
        self.requests = 0
        #: Normalized URLs of every object this command read (its inputs: what a write
        #: must never replace, with or without --force).
        self.inputs: dict[str, str] = {}

    def note_input(self, url: str) -> None:
        """Records ``url`` as read by this command (an input no output may replace)."""
        self.inputs.setdefault(normalize(url), url)

    def fs(self, url: str):
        """Returns ``(filesystem, path inside it)`` for ``url``.

        Raises:
            UnsupportedFormatError: fsspec, or the protocol's backend, is not installed;
                or an ``http(s)://`` URL.
        """
        protocol = url.split("://", 1)[0]
        if protocol.lower() in ("http", "https"):
            # fsspec's HTTP listing is scraped from HTML and carries no sizes, so every
            # shard would look empty ("truncated", exit 4, about a healthy checkpoint).
            # Refuse up front rather than report corruption that is not there.
            raise UnsupportedFormatError(
                f"{url}: http(s):// URLs are not supported yet (an HTTP listing carries no "
                "file sizes to check the shards against); download the checkpoint, or serve "
                "it through an S3-compatible endpoint (s3://)")
        fsspec = _fsspec()
        fs = self._fs.get(protocol)
        if fs is None:
            with _errors(url):
                cls = fsspec.get_filesystem_class(protocol)
                fs = self._fs[protocol] = cls(skip_instance_cache=True,
                                              **_OPTIONS.get(protocol, {}))
        return fs, fs._strip_protocol(url)

    def listing(self, directory: str) -> dict[str, dict]:
        """Returns ``{base name: fsspec info}`` of the objects directly under ``directory``
        (one listing request per 1000 objects on S3, cached for the session).

        Raises:
            CheckpointNotFoundError: the directory does not exist or is empty.
            RemoteAccessError: forbidden or network failure.
        """
        directory = directory.rstrip("/")
        cached = self._listings.get(directory)
        if cached is None:
            if directory in self._absent:
                raise CheckpointNotFoundError(f"{directory}/: not found")
            fs, path = self.fs(directory)
            self.requests += 1
            try:
                with _errors(directory + "/"):
                    infos = fs.ls(path, detail=True)
            except CheckpointNotFoundError:
                self._absent.add(directory)  # asked again while resolving: no new request
                raise
            path = path.rstrip("/")
            cached = {}
            for info in infos:
                name = info["name"].rstrip("/")
                if name == path:  # the object itself (an ls of a file, not a directory)
                    continue
                cached[posixpath.basename(name)] = info
            self._listings[directory] = cached
        return cached

    def is_dir(self, url: str) -> bool:
        """Returns whether ``url`` is a directory holding objects (its listing is kept)."""
        try:
            return bool(self.listing(url))
        except CheckpointNotFoundError:
            return False

    def info(self, url: str) -> dict | None:
        """Returns the listing entry of ``url`` from its directory's listing, or None."""
        parent, base = url.rstrip("/").rsplit("/", 1)
        try:
            return self.listing(parent).get(base)
        except CheckpointNotFoundError:
            return None

    def size(self, url: str) -> int | None:
        """Returns the size of object ``url`` (from its directory listing), None if absent."""
        info = self.info(url)
        if info is None or info.get("type") == "directory":
            return None
        return int(info.get("size") or 0)

    def file(self, url: str, size: int, extents: list[tuple[int, int]] | None = None):
        """Returns the session's :class:`RemoteFile` for data file ``url`` (one per URL, so
        every reader of a shard shares its read-ahead)."""
        self.note_input(url)
        f = self._files.get(url)
        if f is None or (extents and not f.has_extents):
            f = self._files[url] = RemoteFile(url, size, extents)
        return f

    def fetch(self, url: str, limit: int | None = None) -> bytes:
        """Returns the whole object ``url`` (one request), refusing one over ``limit`` bytes.

        Raises:
            CheckpointNotFoundError: no such object.
            RemoteAccessError: forbidden, network failure, or larger than ``limit``.
        """
        fs, path = self.fs(url)
        self.note_input(url)
        self.requests += 1
        with _errors(url):
            if limit is None:
                return fs.cat_file(path)
            data = fs.cat_file(path, start=0, end=limit + 1)
        if len(data) > limit:
            raise RemoteAccessError(f"{url}: larger than {limit} bytes, refusing to read it whole")
        return data

    def ranges(self, url: str, spans: list[tuple[int, int]]) -> list[bytes]:
        """Returns the bytes of each ``(start, end)`` span of object ``url``, fetched
        concurrently (spans over :data:`PIECE` bytes are split, then joined back).

        Raises:
            CheckpointNotFoundError, RemoteAccessError: as :meth:`fetch`.
        """
        pieces: list[tuple[int, int]] = []
        owner: list[int] = []
        for i, (start, end) in enumerate(spans):
            for s in range(start, end, PIECE) if end > start else [start]:
                pieces.append((s, min(end, s + PIECE)))
                owner.append(i)
        fs, path = self.fs(url)
        self.note_input(url)
        got: list[bytes] = []
        for k in range(0, len(pieces), MAX_IN_FLIGHT):
            batch = pieces[k : k + MAX_IN_FLIGHT]
            self.requests += sum(1 for s, e in batch if e > s)
            with _errors(url):
                if len(batch) == 1:
                    s, e = batch[0]
                    got.append(fs.cat_file(path, start=s, end=e) if e > s else b"")
                    continue
                out = fs.cat_ranges([path] * len(batch), [s for s, _ in batch],
                                    [e for _, e in batch], on_error="return")
                for item in out:
                    if isinstance(item, BaseException):
                        raise item
                    got.append(item)
        parts: list[list[bytes]] = [[] for _ in spans]
        for i, data in zip(owner, got, strict=True):
            parts[i].append(data)
        return [b"".join(p) for p in parts]


_session = Session()


def session() -> Session:
    """Returns the current :class:`Session` (the one the last :func:`begin` started)."""
    return _session


def begin() -> Session:
    """Starts a fresh :class:`Session` (called when a URL is opened) and returns it."""
    global _session
    _session = Session()
    return _session


class RemoteFile:
    """A data shard behind a URL, read by byte ranges: ``len()`` and :meth:`read_range`
    (what :func:`ckpt_tools.formats._io.view` uses instead of slicing a memory map).

    Read-ahead: ``extents`` (every tensor's ``(start, end)`` in the shard, from the index)
    lets a read that follows the previous one in storage order fetch the next tensors too,
    up to :data:`WINDOW` bytes, in one concurrent batch; a random read fetches only itself.
    """

    def __init__(self, url: str, size: int, extents: list[tuple[int, int]] | None = None):
        self.url = url
        self.size = size
        self._extents = sorted(set(extents or ()))
        self._order = {span: i for i, span in enumerate(self._extents)}
        self._cache: dict[tuple[int, int], bytes] = {}
        self._last = -2
        self._end = -1  # where the previous read ended, for read-ahead without extents
        self._buffer: tuple[int, bytes] = (0, b"")
        self._recent: tuple[tuple[int, int], bytes] | None = None

    def __len__(self) -> int:
        return self.size

    @property
    def has_extents(self) -> bool:
        return bool(self._extents)

    def read_range(self, start: int, end: int) -> bytes:
        """Returns bytes ``[start, end)`` of the shard.

        Raises:
            CheckpointNotFoundError, RemoteAccessError: as :meth:`Session.ranges`.
        """
        span = (start, end)
        if self._recent is not None and self._recent[0] == span:
            return self._recent[1]  # the same tensor again (a value, then its statistics)
        data = self._read(span)
        self._recent = (span, data)
        return data

    def _read(self, span: tuple[int, int]) -> bytes:
        start, end = span
        if span not in self._order:  # a copy going through the file in chunks
            lo, buf = self._buffer
            if lo <= start and end <= lo + len(buf):
                self._end = end
                return buf[start - lo : end - lo]
            sequential, self._end = start == self._end, end
            if not sequential:
                return session().ranges(self.url, [span])[0]
            hi = min(self.size, max(end, start + WINDOW))
            buf = session().ranges(self.url, [(start, hi)])[0]
            self._buffer = (start, buf)
            return buf[: end - start]
        data = self._cache.pop(span, None)
        i = self._order.get(span)
        if i is not None:
            sequential, self._last = i == self._last + 1, i
        else:
            sequential = False
        if data is not None:
            return data
        self._cache.clear()  # out of order: what was read ahead will not be asked for
        batch = [span]
        if sequential:
            total = end - start
            for nxt in self._extents[i + 1 :]:
                if total >= WINDOW:
                    break
                batch.append(nxt)
                total += nxt[1] - nxt[0]
        lo, hi = start, max(e for _, e in batch)
        if len(batch) > 1 and hi - lo <= sum(e - s for s, e in batch) + _MAX_GAP:
            # Tensors lie back to back in a shard: one span, split into concurrent pieces,
            # costs a request per PIECE bytes instead of one per tensor.
            whole = session().ranges(self.url, [(lo, hi)])[0]
            got = [whole[s - lo : e - lo] for s, e in batch]
        else:
            got = session().ranges(self.url, batch)
        for other, value in zip(batch[1:], got[1:], strict=True):
            self._cache[other] = value
        return got[0]


def _upload_rank(name: str) -> int:
    """Upload order: data first, then the ``.index`` that points into it, then the ``.meta``,
    and the ``checkpoint`` state file that names the checkpoint last."""
    if name == "checkpoint":
        return 3
    return 2 if name.endswith(".meta") else 1 if name.endswith(".index") else 0


def normalize(url: str) -> str:
    """Returns ``url`` in one spelling per object: protocol lower-cased, ``//`` and ``.``
    segments collapsed, no trailing slash (so two spellings of one input compare equal)."""
    protocol, _, rest = url.partition("://")
    if not rest:
        return url
    path = posixpath.normpath("/" + rest.lstrip("/")).lstrip("/")
    return protocol.lower() + "://" + path


def check_new(directory: str, names: list[str], *, overwrite: bool = False,
              whole_directory: bool = True) -> None:
    """Refuses (exit 7) to write ``names`` into URL ``directory`` where that would replace
    an input of this command, or, without ``overwrite``, any object that exists. The same
    rules as local writes (``formats/_write.py``): a checkpoint output directory
    (``whole_directory``) that holds an input is refused with or without ``--force`` (its
    ``checkpoint`` state file would be rewritten); a single-file output is refused only when
    it is itself an input.

    Raises:
        OutputError: an input would be replaced, or an object exists and ``overwrite`` is
            false.
        RemoteAccessError: forbidden, or the network failed.
    """
    from ..errors import OutputError

    store = session()
    where = normalize(directory)
    for name in names:
        target = normalize(url_join(directory, name))
        if target in store.inputs:
            raise OutputError(f"{url_join(directory, name)}: is input "
                              f"{store.inputs[target]}; refusing to overwrite it (--force "
                              "never replaces inputs)")
    if whole_directory:
        for key, url in store.inputs.items():
            if key.rsplit("/", 1)[0] == where:
                raise OutputError(
                    f"{directory.rstrip('/')}/: holds the input {url}; refusing to write a "
                    "checkpoint there (its 'checkpoint' state file and files would be "
                    "replaced); choose another --out")
    try:
        existing = session().listing(directory)
    except CheckpointNotFoundError:
        return
    clash = [n for n in names if n in existing]
    if clash and not overwrite:
        raise OutputError(f"{url_join(directory, clash[0])}: already exists (pass --force to "
                          "replace it)")


def upload(files: list[str], directory: str, *, overwrite: bool = False,
           progress=None, whole_directory: bool = True) -> list[str]:
    """Uploads local ``files`` into URL ``directory`` so that a reader never sees an index
    without its data: data shards (and single-file outputs) first, then the ``.index``, the
    ``.meta``, and the ``checkpoint`` state file last; each object appears whole (S3, GCS and
    fsspec's other object stores replace objects atomically).

    Args:
        files: local files, uploaded under their base names.
        directory: the destination URL directory.
        overwrite: replace objects that exist; otherwise refuse before uploading anything.
        progress: called with the bytes of each file once uploaded.

    Returns:
        The URLs written, in upload order.

    Raises:
        OutputError: an object exists and ``overwrite`` is false (exit 7).
        CheckpointNotFoundError, RemoteAccessError: the bucket is missing, forbidden, or the
            network failed.
    """
    import os

    store = session()
    names = sorted(files, key=lambda f: (_upload_rank(os.path.basename(f)), f))
    check_new(directory, [os.path.basename(f) for f in names], overwrite=overwrite,
              whole_directory=whole_directory)
    written = []
    for local in names:
        url = url_join(directory, os.path.basename(local))
        fs, path = store.fs(url)
        store.requests += 1
        with _errors(url):
            fs.put_file(local, path)
        written.append(url)
        if progress:
            progress(os.path.getsize(local))
    store._listings.pop(directory.rstrip("/"), None)  # what was listed is out of date
    return written


def url_join(directory: str, name: str) -> str:
    """Returns ``directory/name`` for a URL directory (no ``os.path`` on URLs)."""
    return directory.rstrip("/") + "/" + name


def url_parent(url: str) -> str:
    """Returns the URL of the directory holding ``url``."""
    return url.rstrip("/").rsplit("/", 1)[0]


__all__ = ["RemoteFile", "Session", "begin", "session", "upload", "url_join", "url_parent"]
