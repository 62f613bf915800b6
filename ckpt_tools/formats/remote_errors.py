"""How remote reads and writes fail, and how long they may take: the storage library's
exceptions turned into one-line errors naming the URL (:func:`translate`), the timeouts and
retry bound given to botocore, the overall deadline of one call, and the size caps of objects
read whole. Used by :mod:`.remote` and :mod:`.remote_write`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from ..errors import (
    CheckpointError,
    CheckpointNotFoundError,
    OutputError,
    RemoteAccessError,
    UnsupportedFormatError,
)

#: The most bytes of a state file, ``.index`` or ``.meta`` read whole from a URL (a hostile
#: or mistaken huge object must not exhaust memory); ``CKPT_REMOTE_MAX_BYTES`` raises it.
MAX_WHOLE = 256 << 20
MAX_STATE = 16 << 20  # a state file lists paths: even 100,000 of them fit (as locally)
_MIN_RATE = 256 << 10  # bytes/s below which a transfer counts as stalled (overall deadline)
S3_PROTOCOLS = ("s3", "s3a")
INSTALL = 'pip install "ckpt-tools[remote]" (fsspec with s3fs and gcsfs)'
#: The package to install for a protocol fsspec knows but cannot load.
PACKAGES = {"s3": '"ckpt-tools[remote]"', "s3a": '"ckpt-tools[remote]"', "gs": "gcsfs",
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


def s3_options(protocol: str) -> dict:
    if protocol not in S3_PROTOCOLS:
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


def fsspec_module(url: str | None = None):
    """Returns fsspec, imported (and its storage libraries' logs quieted).

    Raises:
        UnsupportedFormatError: fsspec is not installed (naming ``url``, read or written).
    """
    try:
        import fsspec
    except ImportError:
        where = f"{url}: " if url else ""
        raise UnsupportedFormatError(
            f"{where}URLs (read or written) need fsspec: {INSTALL}") from None
    quiet_storage_logs()
    return fsspec


#: Loggers of the storage libraries under fsspec: gcsfs logs each retry with its traceback
#: ("_request out of retries", socket.gaierror …) and "Could not determine bucket type"
#: before the exception that :func:`translate` turns into one ``error:`` line.
_STORAGE_LOGGERS = ("gcsfs", "google", "google.auth", "google_auth_httplib2", "fsspec",
                    "s3fs", "aiobotocore", "botocore", "urllib3", "aiohttp")


def quiet_storage_logs() -> None:
    """Silences the storage libraries' own log records when the application configured no
    logging (the ``ckpt`` command, a script): Python would print them on stderr through its
    last-resort handler, tracebacks included, where every failure is to be one line. An
    application that set up logging (a root handler) keeps them."""
    import logging

    if logging.getLogger().handlers:
        return
    for name in _STORAGE_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


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


def error_code(exc: BaseException) -> str | None:
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
def translate(url: str, wait: float | None = None):
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
        raise UnsupportedFormatError(f"{url}: {short(exc, url)}; {INSTALL}") from None
    except Exception as exc:  # botocore, aiohttp, asyncio timeouts: all network-level
        code, status, names = error_code(exc), _status(exc), _names(exc)
        said = short(exc, url)
        if names & _CREDENTIAL_ERRORS:
            raise RemoteAccessError(
                f"{url}: no usable credentials ({said}); set them the storage "
                "library's usual way (AWS_PROFILE, AWS_ACCESS_KEY_ID...)") from None
        if code in _REJECTED:
            raise RemoteAccessError(
                f"{url}: credentials rejected ({code}: {said})") from None
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
                f"{url}: forbidden (access denied: {said})") from None
        if status == 404:
            raise CheckpointNotFoundError(f"{url}: not found") from None
        if names & {"FSTimeoutError", "TimeoutError", "ReadTimeoutError",
                    "ConnectTimeoutError"} and wait is not None:
            raise RemoteAccessError(
                f"{url}: network failure (no answer within {wait:.0f} s; "
                "CKPT_REMOTE_TIMEOUT sets the per-read wait)") from None
        raise RemoteAccessError(
            f"{url}: network failure ({type(exc).__name__}: {said})") from None


def short(exc: BaseException, url: str = "") -> str:
    """``exc``'s message on one line, at most 200 characters, without the userinfo of
    ``url``: a storage library quotes what it could not use in its own words (botocore:
    ``Invalid bucket name "key:secret@bucket"``), where :func:`~ckpt_tools.errors.redact`,
    which looks for ``://...@``, cannot see it."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    userinfo = url.partition("://")[2].split("/", 1)[0].rpartition("@")[0]
    if userinfo:
        text = text.replace(userinfo, "***")
    return text if len(text) <= 200 else text[:197] + "..."
