"""Which files lie beside a checkpoint, for :mod:`~ckpt_tools.meta_sibling`: a local
directory's names, or a URL directory's from the remote session's listing (the one that
locating the checkpoint already made, so reading the siblings of ``s3://b/run/model.ckpt-3``
costs no extra listing request; one per directory otherwise).

A URL checkpoint's siblings were never read (``candidates()`` returned ``[]`` for URLs): a
swapping run's meta-less checkpoints on S3, and an average written to ``s3://`` with the
doubting graphs copied beside it, were paired by their names, the raw weights exported as
the averages, exit 0 (review-26-attack-r90 F1). Over a URL each sibling ``.meta`` is one
whole-object request, so their number is bounded (:data:`MAX_URL_SIBLINGS`): past it the
reading is refused, never cut short (an unread file may be the one that shows a swap).
"""

from __future__ import annotations

import os

from .formats._io import is_url

__all__ = ["MAX_URL_SIBLINGS", "UnreadSiblingsError", "directory_files", "file_stamp_of",
           "split"]

#: The most same-stem ``.meta`` files read beside a URL checkpoint saved without its own
#: (each is fetched whole, itself bounded by ``CKPT_REMOTE_MAX_BYTES``).
MAX_URL_SIBLINGS = 16


class UnreadSiblingsError(Exception):
    """More same-stem ``.meta`` files beside a URL checkpoint than :data:`MAX_URL_SIBLINGS`:
    unread, not passed over (``meta_sibling.doubting`` refuses, exit 6)."""


def split(path: str) -> tuple[str, str]:
    """``(directory, name)`` of a local path or a URL (``s3://b/run``, ``model.ckpt-3``)."""
    if is_url(path):
        directory, _, name = path.rstrip("/").rpartition("/")
        return directory, name
    return os.path.split(path)


def directory_files(directory: str) -> set[str] | None:
    """The names of the files directly in ``directory`` (a local path or a URL).

    Returns:
        `set[str]`: the names (``set()`` for a directory that does not exist, locally one
        that cannot be listed, as before); ``None`` where a URL's scheme has no listing
        (``http(s)://``): its siblings cannot be known.

    Raises:
        RemoteAccessError: forbidden, or the network failed while listing.
    """
    if not is_url(directory):
        try:
            names = os.listdir(directory or ".")
        except OSError:
            return set()
        return {n for n in names if os.path.isfile(os.path.join(directory, n))}
    from .errors import CheckpointNotFoundError, UnsupportedFormatError
    from .formats import remote

    store = remote.session()
    if store.is_http(directory):
        return None
    try:
        listing = store.listing(directory)
    except CheckpointNotFoundError:
        return set()
    except UnsupportedFormatError:
        return None
    return {n for n, info in listing.items() if info.get("type") != "directory"}


def file_stamp_of(path: str) -> tuple | None:
    """What a reading of the file at ``path`` is kept by: locally its path, size, mtime,
    inode and ctime; for a URL its listed size with its ETag or modification time (a replaced object
    lists another); ``None`` where it cannot be stated (nothing is then kept)."""
    if not is_url(path):
        from .formats.graph_def import file_stamp

        return file_stamp(path)
    from .formats import remote

    info = remote.session().info(path)
    if not info:
        return None
    tag = info.get("ETag") or info.get("etag") or info.get("LastModified") \
        or info.get("mtime") or info.get("updated")
    if not tag:
        return None
    return (path, info.get("size"), str(tag))
