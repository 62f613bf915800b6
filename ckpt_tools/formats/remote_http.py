"""Plain HTTP(S) servers as a read-only checkpoint store, through fsspec's ``HTTPFileSystem``
(its aiohttp session and event loop), used by :mod:`.remote`.

An HTTP server gives no directory listing with sizes, so what S3 learns from one listing is
learnt per object here, in as few requests as reading needs anyway:

* small files (the state file, the ``.index``, the ``.meta``) are fetched whole by one GET,
  which also says whether they exist, their size and their validators (ETag, Last-Modified);
* a data shard is asked for with ``HEAD`` once, when it is first read (its size and
  validators), then read by ``Range`` requests only: a server answering a range with the
  whole object is refused (nothing is downloaded whole into memory);
* every range request is pinned to the validators seen first (``If-Match`` with a strong
  ETag, and the answer's ETag/Last-Modified compared), so an object replaced while it is
  read is an error, never a mix of old and new bytes.

Functions raise :class:`StatusError` (``status``: 404, 403, 412...) or aiohttp's exceptions,
for :func:`ckpt_tools.formats.remote_errors.translate` to classify; they run on the
filesystem's loop with an overall deadline.
"""

from __future__ import annotations

import asyncio
import re

from ..errors import RemoteAccessError, UnsupportedFormatError

#: Header values that pin one version of an object.
_VALIDATORS = ("etag", "last-modified")
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED = re.compile(r"bytes \*/(\d+)")
#: Bytes read per ``content.read`` call while bounding a body.
_CHUNK = 1 << 20


class Shorter(RemoteAccessError):
    """A range passes the end of the object; ``size`` is the object's real size."""

    def __init__(self, url: str, size: int, start: int, end: int):
        super().__init__(f"{url}: has {size} bytes, fewer than asked for (bytes [{start}, "
                         f"{end}))")
        self.size = size


class StatusError(OSError):
    """An HTTP answer that is not a success; ``status`` is its code (for ``translate``)."""

    def __init__(self, status: int, url: str, reason: str = ""):
        super().__init__(f"HTTP {status}{' ' + reason if reason else ''}")
        self.status = status
        self.url = url


def is_http(protocol: str) -> bool:
    return protocol in ("http", "https")


def check_url(url: str) -> None:
    """Refuses an HTTP URL that cannot name a checkpoint's files by suffix: a query string or
    a fragment (``.index`` would be appended after it; a presigned URL signs one object).

    Raises:
        UnsupportedFormatError: the URL has ``?`` or ``#`` (in its password too: unescaped,
            they end its host part).
    """
    userinfo = url.partition("://")[2].split("/", 1)[0].rpartition("@")[0]
    if "?" in userinfo or "#" in userinfo:  # what a URL parser takes for a query/fragment
        raise UnsupportedFormatError(
            f"{url}: a '?' or '#' in the URL's user name or password ends the host part for "
            "every URL parser; percent-encode them (%3F, %23)")
    if "?" in url or "#" in url:
        raise UnsupportedFormatError(
            f"{url}: an http(s):// URL with a query string or fragment (a presigned or "
            "tokenised URL names one object) cannot name a checkpoint's other files; give "
            "the checkpoint prefix or run directory URL without them")


def is_html_page(headers, body: bytes) -> bool:
    """Returns whether an answer is an HTML page (``Content-Type: text/html`` and a body that
    starts with ``<``): what single-page-app and static hosts with a rewrite serve, with
    status 200, for every path they do not have. No checkpoint file is one (a state file
    starts with ``model_checkpoint_path``, an ``.index`` with a zero byte, a ``.meta`` with a
    protobuf tag), so such an answer means the file is absent."""
    return _html_type(headers) and body.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"<"


def _html_type(headers) -> bool:
    kind = (headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
    return kind == "text/html"


#: Bytes of an object's start looked at to tell an HTML page from a checkpoint file.
_PEEK = 1024


async def _page_at_start(session, url: str) -> bool:
    """Whether object ``url`` starts as an HTML page (:func:`is_html_page`): asked when a
    ``text/html`` answer came for a range inside the object or for a HEAD, neither of which
    shows the page's first bytes."""
    headers = {**_HEADERS, "Range": f"bytes=0-{_PEEK - 1}"}
    async with session.get(url, headers=headers, allow_redirects=True) as resp:
        return resp.status in (200, 206) and is_html_page(resp.headers, await _body(resp, _PEEK))


def _absent(url: str) -> StatusError:
    """The error of a file a web app answered with its HTML page: absent, as a 404 is."""
    return StatusError(404, url, "an HTML page, the web server's answer for a missing file")


def pin_of(headers) -> dict:
    """Returns the validators (``etag``, ``last-modified``) of an answer's headers."""
    return {k: headers[k] for k in _VALIDATORS if headers.get(k)}


def _conditions(pin: dict) -> dict:
    """Request headers that make the server refuse (412) another version than ``pin``'s."""
    etag = pin.get("etag", "")
    if etag and not etag.startswith("W/"):  # If-Match compares strong ETags only
        return {"If-Match": etag}
    if pin.get("last-modified"):
        return {"If-Unmodified-Since": pin["last-modified"]}
    return {}


def _changed(url: str, pin: dict, headers) -> None:
    """Raises when an answer's validators differ from ``pin`` (a server ignoring If-Match
    still says which version it sent)."""
    for key in _VALIDATORS:
        now = headers.get(key)
        if pin.get(key) and now and now != pin[key]:
            raise RemoteAccessError(
                f"{url}: changed while it was being read ({key} was {pin[key]}, now {now}); "
                "nothing was mixed: retry when the writer is done")


async def _body(resp, limit: int) -> bytes:
    """At most ``limit`` bytes of an answer's body (the rest is never read)."""
    parts, total = [], 0
    while total < limit:
        chunk = await resp.content.read(min(_CHUNK, limit - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts)


_HEADERS = {"Accept-Encoding": "identity"}  # byte ranges of the stored bytes, not a gzip


def _run(fs, coro_fn, timeout: float):
    from fsspec.asyn import sync

    return sync(fs.loop, coro_fn, timeout=timeout)


def fetch(fs, url: str, limit: int, timeout: float) -> tuple[dict, bytes | None] | None:
    """Fetches object ``url`` whole in one GET, reading at most ``limit + 1`` bytes (asked as
    the range ``0-limit``; a server that ignores ranges is read only that far).

    Returns:
        None when the object does not exist (404, or an HTML page: see
        :func:`is_html_page`), else ``(info, body)``: ``info`` has
        ``size`` and the validators; ``body`` is None when the object is over ``limit``.

    Raises:
        StatusError: another failure status (403, 500...).
    """
    async def go():
        session = await fs.set_session()
        headers = {**_HEADERS, "Range": f"bytes=0-{limit}"}
        async with session.get(url, headers=headers, allow_redirects=True) as resp:
            if resp.status == 404:
                return None
            if resp.status == 416:  # an empty object has no byte 0
                m = _UNSATISFIED.fullmatch(resp.headers.get("Content-Range", ""))
                if m and int(m.group(1)) == 0:
                    return {"size": 0, **pin_of(resp.headers)}, b""
            if resp.status not in (200, 206):
                raise StatusError(resp.status, url, resp.reason or "")
            if resp.status == 206:
                m = _RANGE.fullmatch(resp.headers.get("Content-Range", ""))
                if not m or int(m.group(1)) != 0 or m.group(3) == "*":
                    raise StatusError(502, url, "a range answer without its object's size")
                size = int(m.group(3))
            else:
                size = resp.content_length
            body = await _body(resp, limit + 1)
            if is_html_page(resp.headers, body):
                return None  # a web app's page for any missing path: the object is absent
            if size is None:  # no length given: what came is all there is (up to the cap)
                size = len(body)
            info = {"size": size, **pin_of(resp.headers)}
            return info, (body if size <= limit and len(body) == size else None)

    return _run(fs, go, timeout)


def head(fs, url: str, timeout: float) -> dict | None:
    """Returns ``{size, validators}`` of object ``url`` from a HEAD, None when absent (404,
    or an HTML page: see :func:`is_html_page`).

    Raises:
        StatusError: another failure status, or no Content-Length.
    """
    async def go():
        session = await fs.set_session()
        async with session.head(url, headers=_HEADERS, allow_redirects=True) as resp:
            if resp.status == 404:
                return None
            if resp.status != 200:
                raise StatusError(resp.status, url, resp.reason or "")
            if _html_type(resp.headers) and await _page_at_start(session, url):
                return None  # a web app's page for a missing data shard
            length = resp.headers.get("Content-Length")
            if length is None or not length.isdigit():
                raise StatusError(502, url, "no Content-Length: the size of the object "
                                  "is unknown")
            return {"size": int(length), **pin_of(resp.headers)}

    return _run(fs, go, timeout)


def ranges(fs, url: str, spans: list[tuple[int, int]], pin: dict | None,
           timeout: float) -> tuple[list[bytes], dict]:
    """Returns bytes ``[start, end)`` of object ``url`` for each span, fetched concurrently,
    and what the answers said of the object (``size``, validators). With ``pin`` (what was
    seen first) every request is conditional on it and its answer checked against it;
    without, the answers must agree with each other (they then become the pin: a data
    shard's first read needs no HEAD before it).

    Raises:
        UnsupportedFormatError: the server answers a range with the whole object (it does not
            support Range requests; the body is not read).
        Shorter: a span passes the end of the object (first read: its real size).
        RemoteAccessError: the object changed (other validators, or another size).
        StatusError: 404 (also for an HTML page: :func:`is_html_page`, whether the range
            asked for starts at 0 or inside it), 403, 412 (changed), 416 (shorter than first
            seen)...
    """
    conditions = _conditions(pin) if pin else {}
    size = pin["size"] if pin else None

    async def one(session, start: int, end: int):
        headers = {**_HEADERS, **conditions, "Range": f"bytes={start}-{end - 1}"}
        async with session.get(url, headers=headers, allow_redirects=True) as resp:
            peek = b""
            if resp.status in (200, 206) and _html_type(resp.headers):
                # A web app's page for a missing data shard (ranges of it honoured, or the
                # whole page): the shard is absent, never a short or range-less shard.
                if start == 0:
                    peek = await _body(resp, min(end, _PEEK))
                    page = is_html_page(resp.headers, peek)
                else:
                    page = await _page_at_start(session, url)
                if page:
                    raise _absent(url)
            whole = resp.content_length if size is None else size
            if resp.status == 200 and not (start == 0 and end == whole):
                raise UnsupportedFormatError(
                    f"{url}: the server does not answer HTTP Range requests (it sent the "
                    f"whole object for bytes {start}-{end - 1}); ckpt reads data shards by "
                    "ranges only: serve the checkpoint from a server with Range support "
                    "(most do), or download it")
            if resp.status == 416 and pin is None:
                m = _UNSATISFIED.fullmatch(resp.headers.get("Content-Range", ""))
                if m:
                    raise Shorter(url, int(m.group(1)), start, end)
            if resp.status not in (200, 206):
                raise StatusError(resp.status, url, resp.reason or "")
            if pin:
                _changed(url, pin, resp.headers)
            total = whole
            if resp.status == 206:
                m = _RANGE.fullmatch(resp.headers.get("Content-Range", ""))
                if not m or int(m.group(1)) != start or m.group(3) == "*":
                    raise StatusError(502, url, "a range answer for other bytes than asked")
                total = int(m.group(3))
                if size is not None and total != size:
                    raise RemoteAccessError(
                        f"{url}: changed while it was being read (now {total} bytes, first "
                        f"seen with {size}); retry when the writer is done")
                if total < end:
                    raise Shorter(url, total, start, end)
            data = peek + await _body(resp, end - start - len(peek))
            return data, {"size": total, **pin_of(resp.headers)}

    async def gather():
        session = await fs.set_session()
        out = await asyncio.gather(*[one(session, s, e) for s, e in spans],
                                   return_exceptions=True)
        for item in out:
            if isinstance(item, BaseException):
                raise item
        return out

    out = _run(fs, gather, timeout)
    seen = pin or out[0][1]
    if pin is None and any(info != seen for _, info in out):
        raise RemoteAccessError(
                f"{url}: changed while it was being read (two answers for two versions); "
                "nothing was mixed: retry when the writer is done")
    return [data for data, _ in out], seen


__all__ = ["Shorter", "StatusError", "check_url", "fetch", "head", "is_html_page", "is_http",
           "ranges"]
