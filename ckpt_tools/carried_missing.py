"""A ``ckpt average`` output moved without the graph its record says was carried beside it.

``ckpt average`` of a swapping run's meta-less checkpoints copies the graph that doubts their
names (``model.ckpt-1.meta``) beside its output and names that copy, with its SHA-256, in
``<name>.carried.json`` (:mod:`~ckpt_tools.average_carried`). ``cp out/model.ckpt-3.* dest/``
takes the record but not the copy; the output then had nothing beside it to doubt its names,
and ``export`` paired the mean of the raw weights as the averages, exit 0
(review-28-user-u30 F1). The record is evidence that the names alone cannot be trusted: where
a copy it names is gone, or holds other bytes, the pairing by names is refused (exit 6) until
the copy is put back or ``--no-meta`` states that no graph applies.
"""

from __future__ import annotations

import os
import stat

from .average_carried import digest, parse_record, record_name
from .errors import UnprovenPairingError
from .formats._io import is_url

__all__ = ["missing_copies", "refuse_missing_copies"]

_MAX_BYTES = 1 << 20  # a record names a few copies; a larger file is not ours


def _digest_of(path: str) -> str | None:
    """The SHA-256 of the regular file ``path``; ``None`` where there is none."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        with open(path, "rb") as f:
            return digest(f.read())
    except OSError:
        return None


def missing_copies(prefix: str) -> tuple[str, list[str]] | None:
    """The copies the record beside the local checkpoint ``prefix``
    (``<prefix>.carried.json``, written by ``ckpt average``) names that are no longer beside
    it with their recorded bytes.

    Returns:
        ``(record path, [copy name, ...])``; ``None`` where there is no such record (one
        stat), it is not one of this output's, or every copy it names is there unchanged.
    """
    if is_url(prefix):
        return None
    path = record_name(prefix)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) or os.path.getsize(path) > _MAX_BYTES:
            return None
        with open(path, "rb") as f:
            recorded = parse_record(f.read(), os.path.basename(prefix))
    except OSError:
        return None
    directory = os.path.dirname(prefix)
    gone = sorted(c for c, h in recorded.items()
                  if _digest_of(os.path.join(directory, c)) != h)
    return (path, gone) if gone else None


def refuse_missing_copies(prefix: str) -> None:
    """Refuses the pairing by names of the checkpoint ``prefix`` (saved without a ``.meta``
    of its own) where its ``.carried.json`` names a doubting graph that is gone or changed
    (:func:`missing_copies`).

    Raises:
        UnprovenPairingError: (exit 6) naming the record, the copy and ``--no-meta``.
    """
    found = missing_copies(prefix)
    if found is None:
        return
    record, gone = found
    directory = os.path.dirname(prefix)
    copy = os.path.join(directory, gone[0])
    # a symlink is not read through (what it points to may change): say so, not that its
    # bytes differ, which sends the user hunting a corrupted graph (review-28-attack-r105 F6)
    state = ("is a symlink, which is not read through (copy the file itself beside it)"
             if os.path.islink(copy) else "has other bytes than recorded"
             if os.path.lexists(copy) else "is not beside it")
    raise UnprovenPairingError(
        f"{prefix}: its record {record} says ckpt average carried {', '.join(gone)} beside it, "
        f"a graph of its inputs' prefix that doubts what its keys' names hold (a swapping "
        f"Saver's), and that file {state}: its names are not read alone. Copy the graph back "
        f"beside the checkpoint, or pass --no-meta (Python: use_meta=False) to state that no "
        f"graph applies and pair by the keys' names (a swapping Saver's keys defeat that; "
        f"--raw --no-meta exports the keys as stored)", option="--no-meta")
