"""URL spelling helpers of :mod:`.remote` (which imports them back: ``remote.normalize``,
``remote.url_join`` ...): one spelling per object, its bucket, joins and parents, with no
``os.path`` on URLs."""

from __future__ import annotations

import posixpath


def normalize(url: str) -> str:
    """Returns ``url`` in one spelling per object: protocol lower-cased, ``//`` and ``.``
    segments collapsed, no trailing slash (so two spellings of one input compare equal)."""
    protocol, _, rest = url.partition("://")
    if not rest:
        return url
    path = posixpath.normpath("/" + rest.lstrip("/")).lstrip("/")
    protocol = protocol.lower()
    return {"s3a": "s3", "s3n": "s3", "gcs": "gs"}.get(protocol, protocol) + "://" + path


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


def url_join(directory: str, name: str) -> str:
    """Returns ``directory/name`` for a URL directory (no ``os.path`` on URLs)."""
    return directory.rstrip("/") + "/" + name


def url_parent(url: str) -> str:
    """Returns the URL of the directory holding ``url``."""
    return url.rstrip("/").rsplit("/", 1)[0]
