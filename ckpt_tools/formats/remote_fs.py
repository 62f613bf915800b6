"""The fsspec filesystem of a URL's protocol (:func:`new_filesystem`), built fresh for
:meth:`~ckpt_tools.formats.remote.Session.fs`, which keeps one per protocol for a command.
Over ``http(s)://`` never fsspec's HTML-scraped listings; a host's filesystem (``ftp://``,
``sftp://``...) is refused before anything is sent."""

from __future__ import annotations

from ..errors import UnsupportedFormatError
from . import remote_http
from .remote_errors import (
    INSTALL,
    PACKAGES,
    S3_PROTOCOLS,
    deadline,
    fsspec_module,
    s3_options,
    timeouts,
    translate,
)


def new_filesystem(url: str, protocol: str):
    """Returns a new fsspec filesystem (no instance cache) for ``url``, whose lowercased
    protocol is ``protocol``.

    Raises:
        UnsupportedFormatError: an unknown protocol; fsspec, or the protocol's backend,
            is not installed (naming the package); or a host's filesystem.
        RemoteAccessError: the backend failed to start (as :func:`translate` says).
    """
    fsspec = fsspec_module(url)
    if remote_http.is_http(protocol):
        # Never fsspec's HTML-scraped listings (no sizes): objects are probed one by
        # one (see remote_http); aiohttp's own timeouts bound each read.
        import aiohttp
        from fsspec.implementations.http import HTTPFileSystem

        connect, read, _ = timeouts()
        with translate(url, deadline()):
            fs = HTTPFileSystem(skip_instance_cache=True, client_kwargs={
                "timeout": aiohttp.ClientTimeout(sock_connect=connect, sock_read=read)})
        return fs
    from fsspec.registry import known_implementations

    if protocol not in fsspec.available_protocols():
        raise UnsupportedFormatError(
            f"{url}: unknown URL protocol '{protocol}://' (s3://, gs:// and fsspec's "
            "other storage protocols are read; a local path needs none)")
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ImportError:
        package = PACKAGES.get(protocol)
        hint = (f"pip install {package}" if package else
                known_implementations.get(protocol, {}).get("err") or INSTALL)
        raise UnsupportedFormatError(
            f"{url}: reading {protocol}:// URLs needs "
            f"{package.strip(chr(34)) if package else 'its fsspec backend'}: {hint}"
        ) from None
    try:
        from_url = cls._get_kwargs_from_urls(url)
    except Exception:  # noqa: BLE001 - a URL the backend cannot parse
        from_url = {"host": None}
    if "host" in from_url or "username" in from_url:
        # ftp://, sftp://, smb://, webhdfs://: the filesystem is the host's, one per URL,
        # and built from it; not supported (and never "a network failure": nothing sent).
        raise UnsupportedFormatError(
            f"{url}: {protocol}:// URLs (a host's filesystem) are not supported; use "
            "s3://, gs:// or another bucket-style fsspec protocol, or copy the checkpoint "
            "locally")
    with translate(url, deadline()):
        fs = cls(skip_instance_cache=True, **s3_options(protocol))
    if protocol in S3_PROTOCOLS:
        # s3fs retries on top of botocore's attempts (5 x 3 x the read timeout: a
        # stalled endpoint took over 15 minutes); botocore's attempts are the bound.
        fs.retries = 1
    return fs
