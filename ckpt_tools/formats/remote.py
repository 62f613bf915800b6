"""Checkpoints behind fsspec URLs (``s3://``, ``gs://``, fsspec protocols with sized listings,
and ``http(s)://`` servers without listings: see :mod:`.remote_http`).

What a reader needs from object storage, in as few requests as the format allows:

* one directory listing per directory (names, sizes: which files exist, how long shards are),
* small files read whole (the state file, the ``.index``, the ``.meta``),
* data shards read by byte ranges, several in flight at once (fsspec's ``cat_ranges``), with
  read-ahead when tensors are read in storage order (``verify``, ``export``, ``restore-ema``).

Imported only for URLs (:func:`ckpt_tools.formats._io.is_url`): a local ``ckpt list`` never
loads fsspec. Every fsspec call goes through :func:`.remote_errors.translate`, which turns the
storage library's exceptions into one-line errors naming the URL (not found: exit 3; forbidden,
credentials, changed while read, network failure: exit 1), under bounded timeouts. Writers are
in :mod:`.remote_write`; S3's ETag-pinned reads and conditional writes in :mod:`.remote_s3`;
each protocol's filesystem is built in :mod:`.remote_fs`, ``http(s)://`` objects probed in
:mod:`.remote_probe`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import (
    CheckpointNotFoundError,
    RemoteAccessError,
    UnsupportedFormatError,
)
from . import remote_http, remote_s3
from .remote_errors import deadline, translate
from .remote_fetch import WholeFetches
from .remote_fs import new_filesystem
from .remote_probe import HttpProbes
from .remote_readahead import RemoteFile, return_freed_buffers
from .remote_urls import (  # noqa: F401 (imported from here: remote.normalize, ...)
    bucket_of,
    is_url_like,
    normalize,
    same_bucket,
    url_join,
    url_parent,
)

#: The piece size big reads are split into so that they come down over several connections
#: at once, and how many are in flight. Read-ahead (its windows and their byte budget) is in
#: :mod:`.remote_readahead`.
PIECE = 8 << 20
MAX_IN_FLIGHT = 16

class Session(WholeFetches, HttpProbes):
    """One command's view of remote storage: a fresh filesystem per URL protocol (so nothing
    is served from a listing cached by an earlier command), directory listings cached for the
    command's duration, and a count of the requests made (for tests and benchmarks).
    """

    def __init__(self):
        self._fs: dict[str, object] = {}
        self._listings: dict[str, dict[str, dict]] = {}
        self._absent: set[str] = set()
        self._files: dict[str, RemoteFile] = {}
        # http(s)://: no listings; per object what one GET (small files) or HEAD (shards)
        # said (None: absent), and small files' bodies until they are read.
        self._http: dict[str, dict | None] = {}
        self._bodies: dict[str, bytes] = {}
        #: http(s) objects a probe found forbidden (403), read as absent there (see
        #: :meth:`probe_size`); a read of one still asks, and is refused as forbidden.
        self.forbidden: set[str] = set()
        #: Keep small files' bodies once read (a command that opens several checkpoints of
        #: one run reads its state file, .index and .meta again: see :func:`one_session`).
        self.keep_bodies = False
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
            UnsupportedFormatError: an unknown protocol; fsspec, or the protocol's backend,
                is not installed (naming the package); or an ``http(s)://`` URL.
        """
        protocol = url.split("://", 1)[0].lower()
        if remote_http.is_http(protocol):
            remote_http.check_url(url)
        fs = self._fs.get(protocol)
        if fs is not None:
            return fs, fs._strip_protocol(url)
        fs = self._fs[protocol] = new_filesystem(url, protocol)
        # http(s)://: the URL itself (fsspec's http paths are URLs)
        return fs, url if remote_http.is_http(protocol) else fs._strip_protocol(url)

    def call(self, fs, url: str, method: str, *args, nbytes: int = 0, **kwargs):
        """Calls ``fs.method(*args, **kwargs)`` under :func:`translate` with an overall
        deadline (async filesystems only: the others take no ``timeout``)."""
        wait = deadline(nbytes)
        if getattr(fs, "async_impl", False):
            kwargs["timeout"] = wait
        with translate(url, wait):
            return getattr(fs, method)(*args, **kwargs)

    def forget(self, directory: str) -> None:
        """Drops the cached listing of ``directory`` (after writing into it, or to list it
        again under a writer's lock): the session's, its "absent" mark, and the one the
        filesystem itself keeps (s3fs's directory cache: our writes go around it, so a later
        listing in this process would otherwise miss them, s28f)."""
        directory = directory.rstrip("/")
        self._listings.pop(directory, None)
        self._absent.discard(directory)
        if self.is_http(directory):
            return
        fs = self._fs.get(directory.split("://", 1)[0].lower())
        invalidate = getattr(fs, "invalidate_cache", None)
        if invalidate is not None:
            invalidate(fs._strip_protocol(directory).rstrip("/"))

    @staticmethod
    def is_http(url: str) -> bool:
        """Returns whether ``url`` is an ``http(s)://`` URL (no listings: objects probed)."""
        return remote_http.is_http(url.split("://", 1)[0].lower())

    def etag(self, url: str) -> str | None:
        """Returns the ETag of ``url`` from its directory's cached listing (no request), or
        None when it was not listed or the store gives none."""
        if self.is_http(url):
            info = self._http.get(url.rstrip("/"))
            return info.get("etag") if info else None
        parent, base = url.rstrip("/").rsplit("/", 1)
        info = self._listings.get(parent, {}).get(base)
        tag = info.get("ETag") if info else None
        return tag if isinstance(tag, str) and tag else None

    def listing(self, directory: str) -> dict[str, dict]:
        """Returns ``{base name: fsspec info}`` of the objects directly under ``directory``
        (one listing request per 1000 objects on S3, cached for the session).

        Raises:
            CheckpointNotFoundError: the directory does not exist or is empty.
            RemoteAccessError: forbidden or network failure.
        """
        directory = directory.rstrip("/")
        if self.is_http(directory):
            raise UnsupportedFormatError(
                f"{directory}/: an http(s):// directory cannot be listed (a web server's "
                "listing is an HTML page without sizes); name the checkpoint prefix, or a "
                "run directory with a 'checkpoint' state file")
        cached = self._listings.get(directory)
        if cached is None:
            if directory in self._absent:
                raise CheckpointNotFoundError(f"{directory}/: not found")
            fs, path = self.fs(directory)
            self.requests += 1
            try:
                infos = self.call(fs, directory + "/", "ls", path, detail=True)
            except CheckpointNotFoundError:
                self._absent.add(directory)  # asked again while resolving: no new request
                raise
            path = path.rstrip("/")
            cached = {}
            for info in infos:
                name = info["name"].rstrip("/")
                if name == path:  # the object itself (an ls of a file, not a directory)
                    continue
                base = posixpath.basename(name)
                if info.get("type") == "directory" and base in cached:
                    continue  # an object and a "directory" of one name: the object is read
                cached[base] = info
            self._listings[directory] = cached
        return cached

    def is_dir(self, url: str) -> bool:
        """Returns whether ``url`` is a directory holding objects (its listing is kept;
        always False over http(s)://, which has no listings)."""
        if self.is_http(url):
            return False
        try:
            return bool(self.listing(url))
        except CheckpointNotFoundError:
            return False

    def info(self, url: str) -> dict | None:
        """Returns the listing entry of ``url`` from its directory's listing (over
        http(s)://, what probing the object said), or None."""
        if self.is_http(url):
            info = self._http_info(url)
            return None if info is None else {**info, "type": "file"}
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

    def file(self, url: str, size: int | None, extents: list[tuple[int, int]] | None = None):
        """Returns the session's :class:`RemoteFile` for data file ``url`` (one per URL, so
        every reader of a shard shares its read-ahead)."""
        self.note_input(url)
        f = self._files.get(url)
        if f is None or (extents and not f.has_extents):
            f = self._files[url] = RemoteFile(url, size, extents, self)
        return f

    def ranges(self, url: str, spans: list[tuple[int, int]]) -> list[bytes]:
        """Returns the bytes of each ``(start, end)`` span of object ``url``, fetched
        concurrently (spans over :data:`PIECE` bytes are split, then joined back); on S3
        every request is pinned to the listed ETag, so a replaced object is refused.

        Raises:
            CheckpointNotFoundError, RemoteAccessError: as :meth:`fetch`; also a span
                that came back shorter than asked (the object shrank since it was listed).
        """
        return [b"".join(p) for p in self.pieces(url, spans)]

    def pieces(self, url: str, spans: list[tuple[int, int]]) -> list[list[bytes]]:
        """:meth:`ranges` without joining: each span's consecutive pieces of at most
        :data:`PIECE` bytes (a read-ahead window cuts its tensors out of them, never holding
        the window twice)."""
        pieces: list[tuple[int, int]] = []
        owner: list[int] = []
        for i, (start, end) in enumerate(spans):
            for s in range(start, end, PIECE) if end > start else [start]:
                pieces.append((s, min(end, s + PIECE)))
                owner.append(i)
        fs, path = self.fs(url)
        self.note_input(url)
        etag = self.etag(url) if remote_s3.is_s3(fs) else None
        http = self.is_http(url)
        # http(s)://: pinned to what was seen first; a shard not yet seen is pinned by the
        # answers to its first read (no HEAD before it).
        pin = self._http.get(url) if http else None
        if http and url in self._http and pin is None:
            raise CheckpointNotFoundError(f"{url}: not found")
        got: list[bytes] = []
        for k in range(0, len(pieces), MAX_IN_FLIGHT):
            batch = pieces[k : k + MAX_IN_FLIGHT]
            wanted = [(s, e) for s, e in batch if e > s]
            self.requests += len(wanted)
            nbytes = sum(e - s for s, e in wanted)
            if not wanted:
                out = []
            elif remote_s3.is_s3(fs):
                wait = deadline(nbytes)
                with translate(url, wait):
                    out = remote_s3.get(fs, path, wanted, etag, wait)
            elif http:
                wait = deadline(nbytes)
                try:
                    with translate(url, wait):
                        out, pin = remote_http.ranges(fs, url, wanted, pin, wait)
                except remote_http.Shorter as exc:
                    self._http.setdefault(url, {"size": exc.size})  # its real size
                    raise
                self._http.setdefault(url, pin)
            elif len(wanted) == 1:
                s, e = wanted[0]
                out = [self.call(fs, url, "cat_file", path, start=s, end=e, nbytes=nbytes)]
            else:
                out = self.call(fs, url, "cat_ranges", [path] * len(wanted),
                                 [s for s, _ in wanted], [e for _, e in wanted],
                                 on_error="return", nbytes=nbytes)
                for item in out:
                    if isinstance(item, BaseException):
                        with translate(url, deadline(nbytes)):
                            raise item
            fetched = iter(out)
            for s, e in batch:
                data = next(fetched) if e > s else b""
                if len(data) != e - s:
                    raise RemoteAccessError(
                        f"{url}: changed while it was being read (bytes [{s}, {e}) came back "
                        f"as {len(data)}: the object is shorter than listed); retry when the "
                        "writer is done")
                got.append(data)
        parts: list[list[bytes]] = [[] for _ in spans]
        for i, data in zip(owner, got, strict=True):
            parts[i].append(data)
        return parts


_session = Session()
return_freed_buffers()  # every URL command reads or writes through this module


def session() -> Session:
    """Returns the current :class:`Session` (the one the last :func:`begin` started)."""
    return _session


def begin() -> Session:
    """Starts a fresh :class:`Session` (called when a URL is opened) and returns it; inside
    :func:`one_session`, returns that command's session instead."""
    global _session
    if _shared:
        return _session
    _session = Session()
    return _session


def begin_unless_read(*inputs) -> Session:
    """Starts a fresh :class:`Session` for a command writing into a URL when none of its
    ``inputs`` (paths, URLs or open checkpoints' paths) is a URL: such a command opened no
    URL, so the current session is the last command's (its listings, and the objects it
    read, which this one would refuse to replace as its own inputs); with a URL input, keeps
    the session that input was opened in. Returns the session."""
    from ._io import is_url

    if any(p is not None and is_url(str(p)) for p in inputs):
        return _session
    return begin()


_shared = 0


@contextmanager
def one_session() -> Iterator[Session]:
    """Makes every URL opened inside it share one fresh :class:`Session` (``ckpt average``
    opens the run's state file, then each input): what one object answered is asked once per
    command (over http(s):// the state file, each ``.index`` and ``.meta`` and each absent
    name are one request, not one per opening), and the small files' bodies and the data
    shards' read-ahead (within its budget) are kept until the outermost one ends."""
    global _shared
    if not _shared:
        begin()
    _shared += 1
    store = _session
    keep, store.keep_bodies = store.keep_bodies, True
    try:
        yield store
    finally:
        store.keep_bodies = keep
        _shared -= 1
        if not keep:
            store._bodies.clear()
            for f in store._files.values():
                f.drop()


# Writers (they use the session and URL helpers above).
from .remote_write import check_new, reserved, upload  # noqa: E402

__all__ = ["RemoteFile", "Session", "begin", "begin_unless_read", "check_new", "normalize",
           "one_session", "reserved", "session", "upload", "url_join", "url_parent"]
