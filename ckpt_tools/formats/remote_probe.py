"""What ``http(s)://`` objects are, asked once per command
(:class:`HttpProbes`, a mixin of :class:`~ckpt_tools.formats.remote.Session`): a web server
has no listings, so each object's size (and ETag) comes from one GET of a small file (kept
for its read) or a HEAD of a data shard; a probe's 403 reads as absent, as a public bucket
without list permission answers for a missing object."""

from __future__ import annotations

from contextlib import contextmanager

from . import remote_http
from .remote_errors import MAX_STATE, deadline, max_whole, translate


class HttpProbes:
    """Probes of ``http(s)://`` objects: a mixin of
    :class:`~ckpt_tools.formats.remote.Session` (its filesystems, ``_http`` answers, kept
    ``_bodies``, :attr:`forbidden` set and request count)."""

    def known(self, url: str) -> bool:
        """Whether the size of http(s) object ``url`` is known without a request."""
        return url.rstrip("/") in self._http

    def _http_info(self, url: str, probe: bool = False) -> dict | None:
        """Returns ``{size, etag?, last-modified?}`` of ``http(s)://`` object ``url`` (None:
        absent), asked once per session: the state file, an ``.index`` or a ``.meta`` by
        one GET of the whole object (kept until :meth:`fetch` reads it: the probe and the
        read are one request), anything else (data shards) by a HEAD. ``probe``: a 403
        answer is the object's absence (recorded in :attr:`forbidden`, not kept as it)."""
        url = url.rstrip("/")
        if url in self._http:
            return self._http[url]
        if probe and url in self.forbidden:
            return None
        try:
            return self._http_asked(url)
        except remote_http.StatusError as exc:
            if not (probe and exc.status == 403):
                with translate(url):
                    raise
            self.forbidden.add(url)
            return None

    def _http_asked(self, url: str) -> dict | None:
        """:meth:`_http_info`'s request; a failure status raised as it came.

        Raises:
            remote_http.StatusError: a failure status (403, 500...).
        """
        fs, _ = self.fs(url)
        self.requests += 1
        base = url.rsplit("/", 1)[-1]
        if base == "checkpoint" or base.endswith((".index", ".meta")):
            limit = MAX_STATE if base == "checkpoint" else max_whole()
            wait = deadline(limit)
            with _passing_status(url, wait):
                got = remote_http.fetch(fs, url, limit, wait)
            info = None if got is None else got[0]
            if got is not None and got[1] is not None:
                self._bodies[url] = got[1]
        else:
            with _passing_status(url, deadline()):
                info = remote_http.head(fs, url, deadline())
        self._http[url] = info
        return info

    def probe_info(self, url: str) -> dict | None:
        """:meth:`info` of an object that may not exist, asked only to learn whether it does
        (a state file, a ``.meta``, a sibling's graph): over http(s) a 403 answer reads as
        absent, as a public S3/GCS bucket without list permission answers for a missing
        object (recorded in :attr:`forbidden`). Never for a file the command needs: its 403
        stays "forbidden" (:meth:`info`).

        Raises:
            RemoteAccessError: another failure (401, 500, the network).
        """
        if not self.is_http(url):
            return self.info(url)
        info = self._http_info(url, probe=True)
        return None if info is None else {**info, "type": "file"}

    def probe_size(self, url: str) -> int | None:
        """:meth:`size` as :meth:`probe_info` asks it (a 403 over http(s): absent)."""
        info = self.probe_info(url)
        if info is None or info.get("type") == "directory":
            return None
        return int(info.get("size") or 0)


@contextmanager
def _passing_status(url: str, wait: float | None):
    """:func:`translate` of ``url``, but an HTTP failure status
    (:class:`~.remote_http.StatusError`) passes through as it came, for the caller to read
    (a probe's 403: :meth:`HttpProbes.probe_info`)."""
    try:
        yield
    except remote_http.StatusError:
        raise
    except Exception:  # noqa: BLE001 (translated as translate() does)
        with translate(url, wait):
            raise
