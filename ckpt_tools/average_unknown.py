"""``ckpt average`` of TF1 checkpoints saved without their own ``.meta`` whose other graphs of
their prefix cannot be known (``http(s)://`` has no listing: ``Checkpoint.meta_unknown``,
:mod:`~ckpt_tools.sibling_probe`).

Opening such an input was refused (exit 6, ``--no-meta``), and ``average`` takes ``--no-meta``
only with ``--bake``: a plain average of them could not be run at all (s27f). The plain
average pairs nothing (every key averaged under its own name), so it runs now; but written
alone, nothing would be left to doubt the output's names, and exporting it would pair them,
exit 0, as the inputs are refused to be (review-25-attack-r83 F7 for the doubted inputs, whose
graphs :mod:`~ckpt_tools.average_doubt` carries). What cannot be carried is the unknown
itself: the output's record (``<name>.carried.json``, :mod:`~ckpt_tools.average_carried`)
says it, :func:`~ckpt_tools.meta_sibling.doubting` refuses the output's pairing by names the
same way (exit 6, ``--no-meta``), and the output, reopened in the stage, must be refused so
before it is published. ``--ema`` (the keys named as shadows) stays refused, and so does
``--ema --bake`` unless ``--no-meta`` states the names; so does an input with a ``.meta`` of
its own beside an unknown one (the output would get that graph as its own).
"""

from __future__ import annotations

import json
import os

from .checkpoint import Checkpoint
from .errors import UnprovenPairingError
from .formats._io import is_url

__all__ = ["UNKNOWN_FIELD", "check_unknown_carried", "read_unknown", "refused_by_mark",
           "unknown_to_carry"]

#: The record's field naming the inputs whose other graphs could not be known.
UNKNOWN_FIELD = "unknown"


def unknown_to_carry(ckpts: list[Checkpoint], ema: bool, bake: bool,
                     pairing: dict | None) -> str | None:
    """What the output's record says of inputs whose other graphs cannot be known.

    An input refused for its own ``_CKPT_TOOLS_RECORD`` mark alone (:func:`refused_by_mark`:
    a marked average's ``.index`` + ``.data`` copy) is not one: its other graphs were read,
    and the output carries its mark, which refuses the output the same way, naming what
    decides it; the record said instead that the graphs could not be known over a URL and
    offered only ``--no-meta`` (review-30-attack-r110 F4). It is refused here all the same
    beside an input with a ``.meta`` of its own.

    Returns:
        `str`: those inputs, joined; ``None`` where there is none (or only inputs refused for
        their mark), or ``--ema --bake --no-meta`` states the names
        (``pairing["use_meta"]`` False).

    Raises:
        UnprovenPairingError: (exit 6) with ``ema`` (the keys named as shadows are what is
            unknown) unless that statement is made, naming ``--no-meta``; or where another
            input has a ``.meta`` of its own.
    """
    unknown = [c for c in ckpts if getattr(c, "meta_unknown", None) is not None]
    if not unknown or bake and not (pairing or {}).get("use_meta", True):
        return None
    first = unknown[0].meta_unknown
    own = next((c for c in ckpts if c.meta is not None), None)
    if ema:
        raise UnprovenPairingError(
            f"{first} (--ema averages the keys named as shadows, which a swapping Saver's keys "
            "named as averages are not; without --ema every key is averaged under its own "
            "name and the output is refused the same way; --ema --bake --no-meta states the "
            "names)", option="--no-meta")
    if own is not None:
        if unknown[0].meta is not None:
            # its own graph beside it refused (a marked output read through a graph that no
            # longer says what its keys hold): no graph is unknown, and that refusal names
            # what decides; copying the inputs elsewhere decides nothing (r119 N1)
            raise UnprovenPairingError(str(first), option=first.option)
        marked = refused_by_mark(unknown[0])  # its mark's refusal names what decides it
        raise UnprovenPairingError(
            f"{first}; {own.path} has a .meta of its own, which the output would get as its "
            "graph: refused. " + ("Average it apart from checkpoints with a graph of their "
                                  "own" if marked else "Copy the inputs with their directory "
                                  "locally (or to s3://) to have their graphs read"),
            option=unknown[0].meta_unknown.option if marked else None)
    return ", ".join(c.path for c in unknown if not refused_by_mark(c)) or None


def refused_by_mark(ckpt: Checkpoint) -> bool:
    """Whether the pairing by names of ``ckpt`` is refused for its own mark alone
    (``meta_unknown`` is :func:`~ckpt_tools.doubt_refusal.names_doubted_refusal`'s: no graph of
    its own, none of its prefix doubting it, and its mark's ``names_doubted``), not for
    graphs of its prefix that could not be known.

    Returns:
        `bool`."""
    from .doubt_refusal import names_doubted_refusal
    from .tools_mark import names_doubted

    exc = getattr(ckpt, "meta_unknown", None)
    doc = getattr(ckpt, "tools_mark", None)
    if exc is None or ckpt.meta is not None or names_doubted(doc) is None:
        return False
    return str(exc) == str(names_doubted_refusal(ckpt.location.prefix, doc))


def read_unknown(path: str) -> str | None:
    """The inputs an average's record at ``path`` (local or a URL) names as unknown
    (:data:`UNKNOWN_FIELD`).

    Returns:
        `str`: what it names; ``None`` where it names none or is no such record.

    Raises:
        RemoteAccessError: a URL record could not be fetched (forbidden, the network).
    """
    from .average_carried import is_record

    try:
        if is_url(path):
            from .formats._io import close_map, map_file

            data = map_file(path)
            try:
                raw = bytes(data[: 1 << 20])
            finally:
                close_map(data)
        else:
            with open(path, "rb") as f:
                raw = f.read(1 << 20)
        record = json.loads(raw)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not is_record(record, os.path.basename(path)):
        return None
    said = record.get(UNKNOWN_FIELD)
    return said if isinstance(said, str) and said else None


def check_unknown_carried(prefix: str, shown) -> None:
    """Reopens the staged output ``prefix`` and requires its pairing by names refused as its
    inputs' is (``meta_unknown``).

    Raises:
        UnprovenPairingError: (exit 6) it is not (nothing written is published).
    """
    from .checkpoint import open_checkpoint

    with open_checkpoint(prefix, defer_unknown=True) as out:
        refused = out.meta_unknown is not None
    if not refused:
        raise UnprovenPairingError(
            f"{shown(prefix)}: the inputs' other graphs cannot be known, and that could not be "
            "carried into the output's record beside it: refused. Copy the inputs with their "
            "directory locally (or to s3://) to have their graphs read", option=None)
