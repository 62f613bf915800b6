"""Weights ``export --raw`` writes that hold exactly their EMA shadow's value.

An output of ``ckpt restore-ema`` or ``average --ema --bake`` keeps its shadows and holds the
averages under the plain names too, so ``--raw`` of it writes the averages as "raw" weights,
with the warning that the averages usually evaluate better and to drop ``--raw`` (note/s32j).
The file shows it without any record: each such weight's stored bytes equal those of a key
read as an EMA shadow. That is all it shows: a save before any EMA update shows the same, and
so does a ``--no-meta`` output of a swapping Saver's keys (whose keys named as averages held
raw weights), so the warning says what the bytes prove, not that they are averages. Only
tensors whose stored CRC32C already agree are read, so a training checkpoint costs no read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

from . import roles as R
from .wording import agreeing, counted


def raw_baked(ckpt, plan: Mapping[str, str]) -> tuple[list[str], int]:
    """For ``export --raw``'s ``plan`` (output name -> the weight's own key): the output
    names whose weight holds the same stored bytes (dtype, shape) as a stored EMA shadow:
    its own by name, or another key read as an average (a crossing Saver's output keeps its
    averages under the crossed keys, and its plain names hold them).

    Returns:
        ``(names, total)``: those names in ``plan``'s order (none where a format records no
        CRC32C), and how many weights of ``plan`` have a stored shadow.
    """
    variables = list(ckpt.variables_unwarned())
    entries = ckpt.entries()
    owned = {v.name: v.ema for v in variables if getattr(v, "ema", None) and v.ema in entries}
    by_crc: dict[int, list[str]] = {}
    for v in variables:  # every key read as an average, by its stored CRC32C
        if v.role == R.EMA and v.name in entries and entries[v.name].crc32c is not None:
            by_crc.setdefault(entries[v.name].crc32c, []).append(v.name)
    same, total = [], 0
    for name, key in plan.items():
        if key not in owned or key not in entries:
            continue
        total += 1
        w = entries[key]
        for avg in by_crc.get(w.crc32c, []) if w.crc32c is not None else []:
            a = entries[avg]
            if (avg != key and a.dtype_name == w.dtype_name and tuple(a.shape) == tuple(w.shape)
                    and not a.slices and not w.slices
                    and _digest(ckpt, key) == _digest(ckpt, avg)):  # a CRC proves no equality
                same.append(name)
                break
    return same, total


def _digest(ckpt, key: str) -> bytes:
    """SHA-256 of ``key``'s values, read in chunks (``release=True``), never whole: an export
    streams every tensor it writes (test_streaming)."""
    h = hashlib.sha256()
    for chunk in ckpt.chunks(key, release=True):
        h.update(np.ascontiguousarray(chunk).view(np.uint8))
    return h.digest()


def raw_baked_warning(names: list[str], total: int) -> str:
    """The warning (without ``warning:``) ``export --raw`` gives in place of "the averaged
    weights usually evaluate better (drop --raw to export them)" where :func:`raw_baked`
    finds ``names`` among the ``total`` weights with a shadow it writes."""
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    which = ("every weight with an EMA shadow holds" if len(names) == total > 1 else
             "the weight with an EMA shadow holds" if len(names) == total else
             f"{len(names)} of the {counted(total, 'weight')} with an EMA shadow "
             f"{agreeing(len(names), 'holds', 'hold')}")
    return (f"exporting the weights as stored (--raw), but {which} exactly the value stored "
            f"under a key read as an EMA shadow ({', '.join(names[:3])}{more}), as in an output "
            "of ckpt restore-ema or ckpt average --ema --bake, whose plain names hold the "
            "averages baked in: --raw writes here what those keys hold, not weights apart from "
            "them")
