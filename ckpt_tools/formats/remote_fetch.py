"""Whole-object reads of :class:`~ckpt_tools.formats.remote.Session` (the mixin
:class:`WholeFetches`): a state file, an ``.index`` or a ``.meta`` read in one request,
refused over its limit by its listed size before any request and by what came; on S3 pinned
to the listed ETag. Byte ranges and listings stay in :mod:`.remote`."""

from __future__ import annotations

from ..errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    RemoteAccessError,
    UnsupportedFormatError,
)
from . import remote_s3
from .remote_errors import MAX_STATE, deadline, error_code, max_whole, translate


class WholeFetches:
    """``fetch``: a mixin of :class:`~ckpt_tools.formats.remote.Session` (its filesystems,
    listings, kept bodies and request count)."""

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
        if self.is_http(url):
            return self._fetch_http(fs, url.rstrip("/"), limit, state)
        listed = self.size(url) if url.rstrip("/").rsplit("/", 1)[0] in self._listings \
            else None
        self._too_big(url, listed, limit, state)
        self.requests += 1
        if remote_s3.is_s3(fs):
            wait = deadline(min(listed if listed is not None else limit, limit))
            with translate(url, wait):
                # Listed: the whole object, pinned to the listed ETag. Not listed: at most
                # limit + 1 bytes (an empty object has no byte 0 to range over: 416).
                try:
                    data = remote_s3.get(fs, path, [None if listed is not None
                                                    else (0, limit + 1)],
                                         self.etag(url), wait)[0]
                except OSError as exc:
                    if listed is None and error_code(exc) == "InvalidRange":
                        data = b""
                    else:
                        raise
        else:
            data = self.call(fs, url, "cat_file", path, start=0, end=limit + 1,
                              nbytes=limit)
        if listed is not None and len(data) != listed:
            raise RemoteAccessError(
                f"{url}: changed while it was being read ({len(data)} bytes, listed with "
                f"{listed}); retry when the writer is done")
        self._too_big(url, len(data), limit, state)
        return data

    def _fetch_http(self, fs, url: str, limit: int, state: bool) -> bytes:
        info = self._http_info(url)  # usually the GET that also fetched the body
        if info is None:
            raise CheckpointNotFoundError(f"{url}: not found")
        self._too_big(url, info["size"], limit, state)
        data = self._bodies.get(url) if self.keep_bodies else self._bodies.pop(url, None)
        if data is None:  # probed by HEAD, or read before: fetched again, same version
            data = self.ranges(url, [(0, info["size"])])[0] if info["size"] else b""
            if self.keep_bodies:
                self._bodies[url] = data
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
