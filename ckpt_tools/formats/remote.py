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

import os
import posixpath
from contextlib import contextmanager

from ..errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    OutputError,
    RemoteAccessError,
    UnsupportedFormatError,
)
from . import remote_s3

#: Read-ahead window of a data shard read in storage order, and the piece size big tensors
#: are split into so that they, too, come down over several connections at once.
WINDOW = 32 << 20
PIECE = 8 << 20
MAX_IN_FLIGHT = 16
_MAX_GAP = 1 << 20  # bytes between tensors fetched anyway rather than paying a request

#: The most bytes of a state file, ``.index`` or ``.meta`` read whole from a URL (a hostile
#: or mistaken huge object must not exhaust memory); ``CKPT_REMOTE_MAX_BYTES`` raises it.
MAX_WHOLE = 256 << 20
MAX_STATE = 16 << 20  # a state file lists paths: even 100,000 of them fit (as locally)
_MIN_RATE = 256 << 10  # bytes/s below which a transfer counts as stalled (overall deadline)
_S3 = ("s3", "s3a")
_INSTALL = 'pip install "ckpt-tools[remote]" (fsspec with s3fs; add gcsfs for gs://)'
#: The package to install for a protocol fsspec knows but cannot load.
_PACKAGES = {"s3": '"ckpt-tools[remote]"', "s3a": '"ckpt-tools[remote]"', "gs": "gcsfs",
             "gcs": "gcsfs", "abfs": "adlfs", "az": "adlfs", "adl": "adlfs"}
_CREDENTIAL_ERRORS = {"NoCredentialsError", "PartialCredentialsError", "ProfileNotFound",
                      "CredentialRetrievalError", "UnauthorizedSSOTokenError",
                      "SSOTokenLoadError", "TokenRetrievalError", "NoAuthTokenError",
                      "DefaultCredentialsError", "RefreshError"}
_REJECTED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
             "TokenRefreshRequired", "ExpiredTokenException", "InvalidClientTokenId"}


def timeouts() -> tuple[float, float, int]:
    """Returns ``(connect, read, attempts)``: seconds to connect, seconds a read may wait for
    the next bytes (``CKPT_REMOTE_TIMEOUT``, default 20), and attempts per request (botocore's
    only: s3fs's own retry loop, which multiplied them, is turned off)."""
    try:
        read = float(os.environ.get("CKPT_REMOTE_TIMEOUT") or 20)
    except ValueError:
        read = 20.0
    read = max(read, 0.1)
    return min(10.0, read), read, 3


def deadline(nbytes: int = 0) -> float:
    """Returns the seconds one call moving ``nbytes`` may take in all: every attempt's connect
    and read timeouts, plus the bytes at a trickle of 256 KiB/s (a server that answers a byte
    at a time never trips the read timeout, so this bounds it)."""
    connect, read, attempts = timeouts()
    return attempts * (connect + read) + min(read, 5.0) + nbytes / _MIN_RATE


def _options(protocol: str) -> dict:
    if protocol not in _S3:
        return {}
    connect, read, attempts = timeouts()
    return {"config_kwargs": {"connect_timeout": connect, "read_timeout": read,
                              "retries": {"total_max_attempts": attempts,
                                          "mode": "standard"}}}


def max_whole() -> int:
    """Returns the most bytes an ``.index`` or ``.meta`` may have to be read from a URL."""
    try:
        return max(int(os.environ.get("CKPT_REMOTE_MAX_BYTES") or MAX_WHOLE), 1)
    except ValueError:
        return MAX_WHOLE


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


def _code(exc: BaseException) -> str | None:
    """The S3 error code (``AccessDenied``, ``PreconditionFailed``...) behind an exception,
    looking through s3fs's translation (which keeps botocore's error as the cause)."""
    seen = exc
    for _ in range(4):
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if code:
                return str(code)
        seen = seen.__cause__ or seen.__context__
        if seen is None:
            return None
    return None


def _names(exc: BaseException) -> set[str]:
    names, seen = set(), exc
    for _ in range(4):
        if seen is None:
            break
        names.add(type(seen).__name__)
        seen = seen.__cause__ or seen.__context__
    return names


@contextmanager
def _errors(url: str, wait: float | None = None):
    """Turns a storage library's exception into a CheckpointError naming ``url``.

    Raises:
        CheckpointNotFoundError: the object (or bucket) does not exist (404).
        OutputError: a conditional write found the object created by another writer.
        RemoteAccessError: no usable credentials, credentials rejected, forbidden (401/403),
            the object changed while it was read (412/416), no answer within the deadline
            ``wait``, or another network failure.
        UnsupportedFormatError: the protocol's backend is not installed.
    """
    try:
        yield
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{url}: not found") from None
    except FileExistsError:
        raise OutputError(f"{url}: already exists (another writer created it meanwhile; "
                          "nothing of it was replaced)") from None
    except ImportError as exc:  # a protocol whose backend is not installed (gcsfs...)
        raise UnsupportedFormatError(f"{url}: {_short(exc)}; {_INSTALL}") from None
    except Exception as exc:  # botocore, aiohttp, asyncio timeouts: all network-level
        code, status, names = _code(exc), _status(exc), _names(exc)
        if names & _CREDENTIAL_ERRORS:
            raise RemoteAccessError(
                f"{url}: no usable credentials ({_short(exc)}); set them the storage "
                "library's usual way (AWS_PROFILE, AWS_ACCESS_KEY_ID...)") from None
        if code in _REJECTED:
            raise RemoteAccessError(
                f"{url}: credentials rejected ({code}: {_short(exc)})") from None
        if code == "PreconditionFailed" or status == 412:
            raise RemoteAccessError(
                f"{url}: changed while it was being read (a writer replaced it after it was "
                "listed); nothing was mixed: retry when the writer is done") from None
        if code == "InvalidRange" or status == 416:
            raise RemoteAccessError(
                f"{url}: changed while it was being read (now shorter than listed); "
                "retry when the writer is done") from None
        if isinstance(exc, PermissionError) or status in (401, 403) or code == "AccessDenied":
            raise RemoteAccessError(
                f"{url}: forbidden (access denied: {_short(exc)})") from None
        if status == 404:
            raise CheckpointNotFoundError(f"{url}: not found") from None
        if names & {"FSTimeoutError", "TimeoutError", "ReadTimeoutError",
                    "ConnectTimeoutError"} and wait is not None:
            raise RemoteAccessError(
                f"{url}: network failure (no answer within {wait:.0f} s; "
                "CKPT_REMOTE_TIMEOUT sets the per-read wait)") from None
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
            UnsupportedFormatError: an unknown protocol; fsspec, or the protocol's backend,
                is not installed (naming the package); or an ``http(s)://`` URL.
        """
        protocol = url.split("://", 1)[0].lower()
        if protocol in ("http", "https"):
            # fsspec's HTTP listing is scraped from HTML and carries no sizes, so every
            # shard would look empty ("truncated", exit 4, about a healthy checkpoint).
            # Refuse up front rather than report corruption that is not there.
            raise UnsupportedFormatError(
                f"{url}: http(s):// URLs are not supported yet (an HTTP listing carries no "
                "file sizes to check the shards against); download the checkpoint, or serve "
                "it through an S3-compatible endpoint (s3://)")
        fs = self._fs.get(protocol)
        if fs is not None:
            return fs, fs._strip_protocol(url)
        fsspec = _fsspec()
        from fsspec.registry import known_implementations

        if protocol not in fsspec.available_protocols():
            raise UnsupportedFormatError(
                f"{url}: unknown URL protocol '{protocol}://' (s3://, gs:// and fsspec's "
                "other storage protocols are read; a local path needs none)")
        try:
            cls = fsspec.get_filesystem_class(protocol)
        except ImportError:
            package = _PACKAGES.get(protocol)
            hint = (f"pip install {package}" if package else
                    known_implementations.get(protocol, {}).get("err") or _INSTALL)
            raise UnsupportedFormatError(
                f"{url}: reading {protocol}:// URLs needs "
                f"{package.strip(chr(34)) if package else 'its fsspec backend'}: {hint}"
            ) from None
        with _errors(url, deadline()):
            fs = cls(skip_instance_cache=True, **_options(protocol))
        if protocol in _S3:
            # s3fs retries on top of botocore's attempts (5 x 3 x the read timeout: a
            # stalled endpoint took over 15 minutes); botocore's attempts are the bound.
            fs.retries = 1
        self._fs[protocol] = fs
        return fs, fs._strip_protocol(url)

    def _call(self, fs, url: str, method: str, *args, nbytes: int = 0, **kwargs):
        """Calls ``fs.method(*args, **kwargs)`` under :func:`_errors` with an overall
        deadline (async filesystems only: the others take no ``timeout``)."""
        wait = deadline(nbytes)
        if getattr(fs, "async_impl", False):
            kwargs["timeout"] = wait
        with _errors(url, wait):
            return getattr(fs, method)(*args, **kwargs)

    def etag(self, url: str) -> str | None:
        """Returns the ETag of ``url`` from its directory's cached listing (no request), or
        None when it was not listed or the store gives none."""
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
        cached = self._listings.get(directory)
        if cached is None:
            if directory in self._absent:
                raise CheckpointNotFoundError(f"{directory}/: not found")
            fs, path = self.fs(directory)
            self.requests += 1
            try:
                infos = self._call(fs, directory + "/", "ls", path, detail=True)
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
            f = self._files[url] = RemoteFile(url, size, extents, self)
        return f

    def fetch(self, url: str, limit: int | None = None) -> bytes:
        """Returns the whole object ``url`` (one request), refusing one over ``limit`` bytes
        (default: :data:`MAX_STATE` for a ``checkpoint`` state file, :func:`max_whole` for
        anything else), by its listed size before any request, and by reading at most
        ``limit + 1`` bytes. On S3 the read is pinned to the listed ETag.

        Raises:
            CheckpointNotFoundError: no such object.
            CorruptCheckpointError: a state file over its limit (as locally).
            UnsupportedFormatError: another object over its limit.
            RemoteAccessError: forbidden, network failure, or the object changed since it
                was listed.
        """
        state = url.rstrip("/").rsplit("/", 1)[-1] == "checkpoint"
        if limit is None:
            limit = MAX_STATE if state else max_whole()
        fs, path = self.fs(url)
        self.note_input(url)
        listed = self.size(url) if url.rstrip("/").rsplit("/", 1)[0] in self._listings \
            else None
        self._too_big(url, listed, limit, state)
        self.requests += 1
        if remote_s3.is_s3(fs):
            wait = deadline(min(listed if listed is not None else limit, limit))
            with _errors(url, wait):
                # Listed: the whole object, pinned to the listed ETag. Not listed: at most
                # limit + 1 bytes (an empty object has no byte 0 to range over: 416).
                try:
                    data = remote_s3.get(fs, path, [None if listed is not None
                                                    else (0, limit + 1)],
                                         self.etag(url), wait)[0]
                except OSError as exc:
                    if listed is None and _code(exc) == "InvalidRange":
                        data = b""
                    else:
                        raise
        else:
            data = self._call(fs, url, "cat_file", path, start=0, end=limit + 1,
                              nbytes=limit)
        if listed is not None and len(data) != listed:
            raise RemoteAccessError(
                f"{url}: changed while it was being read ({len(data)} bytes, listed with "
                f"{listed}); retry when the writer is done")
        self._too_big(url, len(data), limit, state)
        return data

    @staticmethod
    def _too_big(url: str, size: int | None, limit: int, state: bool) -> None:
        if size is None or size <= limit:
            return
        if state:
            raise CorruptCheckpointError(f"checkpoint state file is larger than {limit} bytes",
                                         path=url)
        raise UnsupportedFormatError(
            f"{url}: larger than the {limit} bytes read whole from a URL (refusing to "
            "download it into memory; copy it locally, or raise CKPT_REMOTE_MAX_BYTES)")

    def ranges(self, url: str, spans: list[tuple[int, int]]) -> list[bytes]:
        """Returns the bytes of each ``(start, end)`` span of object ``url``, fetched
        concurrently (spans over :data:`PIECE` bytes are split, then joined back); on S3
        every request is pinned to the listed ETag, so a replaced object is refused.

        Raises:
            CheckpointNotFoundError, RemoteAccessError: as :meth:`fetch`; also a span
                that came back shorter than asked (the object shrank since it was listed).
        """
        pieces: list[tuple[int, int]] = []
        owner: list[int] = []
        for i, (start, end) in enumerate(spans):
            for s in range(start, end, PIECE) if end > start else [start]:
                pieces.append((s, min(end, s + PIECE)))
                owner.append(i)
        fs, path = self.fs(url)
        self.note_input(url)
        etag = self.etag(url) if remote_s3.is_s3(fs) else None
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
                with _errors(url, wait):
                    out = remote_s3.get(fs, path, wanted, etag, wait)
            elif len(wanted) == 1:
                s, e = wanted[0]
                out = [self._call(fs, url, "cat_file", path, start=s, end=e, nbytes=nbytes)]
            else:
                out = self._call(fs, url, "cat_ranges", [path] * len(wanted),
                                 [s for s, _ in wanted], [e for _, e in wanted],
                                 on_error="return", nbytes=nbytes)
                for item in out:
                    if isinstance(item, BaseException):
                        with _errors(url, deadline(nbytes)):
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

    def __init__(self, url: str, size: int, extents: list[tuple[int, int]] | None = None,
                 store: Session | None = None):
        self.url = url
        # The session that listed it (its ETags pin every read), even after a later
        # command started another.
        self._store = store or session()
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
                return self._store.ranges(self.url, [span])[0]
            hi = min(self.size, max(end, start + WINDOW))
            buf = self._store.ranges(self.url, [(start, hi)])[0]
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
            whole = self._store.ranges(self.url, [(lo, hi)])[0]
            got = [whole[s - lo : e - lo] for s, e in batch]
        else:
            got = self._store.ranges(self.url, batch)
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


def bucket_of(url: str) -> str:
    """Returns ``protocol://bucket`` of ``url`` (its first path segment: the S3/GCS bucket,
    or the host of other protocols)."""
    protocol, _, rest = normalize(url).partition("://")
    return protocol + "://" + rest.split("/", 1)[0]


def same_bucket(url: str, other: str) -> bool:
    """Returns whether URLs ``url`` and ``other`` are in one bucket (same protocol too)."""
    return is_url_like(url) and bucket_of(url) == bucket_of(other)


def is_url_like(text: str) -> bool:
    return "://" in text


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
    with data it was not written with.

    Order: data shards (and single-file outputs) first, then the ``.index``, the ``.meta``,
    and the ``checkpoint`` state file last; each object appears whole. Replacing (``--force``)
    an existing checkpoint first deletes its old ``.index``: meanwhile, and after an
    interruption, that name reads as missing (exit 3), never as old index with new data
    (readers also pin their reads to the listed ETags, so one that listed the old objects
    is refused when they change). Data shards the old index had and the new one lacks are
    deleted last. On S3 a writer first creates a lock object in ``directory`` with
    ``If-None-Match: *`` (a concurrent writer is refused, exit 7), and objects that were new
    when checked are created the same way.

    Args:
        files: local files, uploaded under their base names.
        directory: the destination URL directory.
        overwrite: replace objects that exist; otherwise refuse before uploading anything.
        progress: called with the bytes of each file once uploaded.

    Returns:
        The URLs written, in upload order.

    Raises:
        OutputError: an object exists and ``overwrite`` is false, an input would be
            replaced, or another writer holds the directory's lock (exit 7).
        CheckpointNotFoundError, RemoteAccessError: the bucket is missing, forbidden, or the
            network failed (the message says what was left behind).
    """
    store = session()
    names = sorted(files, key=lambda f: (_upload_rank(os.path.basename(f)), f))
    bases = [os.path.basename(f) for f in names]
    fs, dir_path = store.fs(directory)
    conditional = remote_s3.is_s3(fs)
    lock = None
    if conditional:
        lock_url = url_join(directory, remote_s3.LOCK_NAME)
        try:
            store.requests += 1
            with _errors(lock_url, deadline()):
                lock = remote_s3.lock(fs, dir_path, deadline())
        except OutputError:
            raise OutputError(
                f"{directory.rstrip('/')}/: another ckpt command is writing there (its lock "
                f"{lock_url} exists); nothing was written. If no writer is running, one was "
                "interrupted: delete that object and retry") from None
    try:
        store._listings.pop(directory.rstrip("/"), None)  # list again, under the lock
        check_new(directory, bases, overwrite=overwrite, whole_directory=whole_directory)
        try:
            existing = store.listing(directory)
        except CheckpointNotFoundError:
            existing = {}
        return _upload_in_order(store, fs, names, directory, existing, conditional, progress)
    finally:
        store._listings.pop(directory.rstrip("/"), None)  # what was listed is out of date
        if lock is not None:
            try:
                remote_s3.remove(fs, lock, deadline())
            except Exception:  # noqa: BLE001 - the write's own outcome is what matters
                pass


def _upload_in_order(store, fs, names: list[str], directory: str, existing: dict,
                     conditional: bool, progress) -> list[str]:
    bases = [os.path.basename(f) for f in names]
    old_indexes = [b for b in bases if b.endswith(".index") and b in existing]
    removed: list[str] = []
    written: list[str] = []
    try:
        for base in old_indexes:
            url = url_join(directory, base)
            store.requests += 1
            with _errors(url, deadline()):
                if conditional:
                    remote_s3.remove(fs, fs._strip_protocol(url), deadline())
                else:
                    fs.rm_file(fs._strip_protocol(url))
            removed.append(base)
        for local in names:
            base = os.path.basename(local)
            url = url_join(directory, base)
            size = os.path.getsize(local)
            store.requests += 1
            if conditional:
                wait = deadline(size)
                with _errors(url, wait):
                    remote_s3.put(fs, local, fs._strip_protocol(url),
                                  create=base not in existing, timeout=wait)
            else:
                store._call(fs, url, "put_file", local, fs._strip_protocol(url), nbytes=size)
            written.append(url)
            if progress:
                progress(size)
    except CheckpointError as exc:
        if removed:
            prefix = removed[0][: -len(".index")]
            left = (f"; the old {removed[0]} had been deleted first, so "
                    f"{url_join(directory, prefix)} reads as missing (never as a mix of old "
                    "and new) until a rerun completes")
        elif written:
            left = (f"; {len(written)} new object(s) were uploaded, no .index: nothing "
                    "readable was changed")
        else:
            left = "; nothing was uploaded"
        exc.args = (str(exc) + left,)
        raise
    # Shards of a replaced checkpoint that the new one does not have (fewer shards now).
    for base in old_indexes:
        stem = base[: -len(".index")] + ".data-"
        for name in sorted(existing):
            if name.startswith(stem) and name not in bases:
                url = url_join(directory, name)
                try:
                    store._call(fs, url, "rm_file", fs._strip_protocol(url))
                except CheckpointError:
                    pass  # an unreferenced leftover: harmless to readers
    return written


def url_join(directory: str, name: str) -> str:
    """Returns ``directory/name`` for a URL directory (no ``os.path`` on URLs)."""
    return directory.rstrip("/") + "/" + name


def url_parent(url: str) -> str:
    """Returns the URL of the directory holding ``url``."""
    return url.rstrip("/").rsplit("/", 1)[0]


__all__ = ["RemoteFile", "Session", "begin", "session", "upload", "url_join", "url_parent"]
