"""TF2 averages of an ``ExponentialMovingAverage`` named with a slash (``name="ema/fast"``, as
TF1 users name several objects): TensorFlow records ``w0``'s average as ``w0/ema/fast`` (and
``w0/ema/fast_1``… where the name is taken), a name whose last part alone (``fast``) sits under
no stored variable (``w0/ema``), so it read as a model weight: "no averages are stored", every
``--ema-name`` refused and ``--raw`` wrote the averages as weights (review-15-attack-r31 F8).

The name is read the way TensorFlow wrote it: ``<variable's name>/<EMA name>``, where the
variable is the longest stored name ``w0`` that the recorded name extends (no stored name in
between, so one reading at most) and has the average's dtype and shape. Such an EMA name is
never TF's default, so nothing proves it an EMA's (:mod:`~ckpt_tools.ema_proof`): the pairing
stands only on ``--ema-name ema/fast``, and the refusal names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from . import roles as R
from .formats.entry import TensorEntry

_NUMBERED = re.compile(r"^(.*)_(\d+)$")


def _stored_head(full: str, stored: Mapping[str, TensorEntry]) -> str | None:
    """The longest stored name ``full`` extends by two parts or more (``w0`` of
    ``w0/ema/fast``), where the name one part short of ``full`` is not stored; or ``None``."""
    head = full.rpartition("/")[0]
    if head in stored and full in stored:
        # w0/ema/fast beside w0/ema and w0: EMA objects named "ema" and "ema/fast" (each an
        # average of w0), or an average "fast" of w0/ema: read as the former, whose refusal
        # names both objects (review-16-attack-r33 F6)
        up = head.rpartition("/")[0]
        return up if up in stored and _alike(stored[up], stored[head], stored[full]) else None
    if not head or head in stored:
        return None  # w0/fast: one part, read as ever (roles.detect_ema_names)
    while "/" in head:
        head = head.rpartition("/")[0]
        if head in stored:
            return head
    return None


def _alike(*entries: TensorEntry) -> bool:
    return all(e.dtype == entries[0].dtype and e.shape == entries[0].shape for e in entries)


def slashed_ema_names(firsts: Mapping[str, TensorEntry]) -> set[str]:
    """EMA names of several parts (``ema/fast``, without TF's ``_N``) that the recorded names
    ``firsts`` (variable name -> its entry) read as: ``<v>/<name>`` of a stored ``v`` of its
    float dtype and shape, under no stored ``<v>/<first part>``; never a name ending like an
    optimizer's slot, a step counter or a batch norm's statistics, nor one ending in TF's
    default name."""
    out: set[str] = set()
    for full, entry in firsts.items():
        head = _stored_head(full, firsts)
        if head is None:
            continue
        src, last = firsts[head], full.rpartition("/")[2]
        if (src.dtype == entry.dtype and src.shape == entry.shape
                and entry.dtype_name in R._FLOAT and not R.SLOT_RE.match(last)
                and last not in R._STEP_NAMES and last not in R._BN_NAMES
                and R.UNIQUIFIED.sub("", last) != R.DEFAULT_EMA_NAME):
            # not w/ExponentialMovingAverage: TF's default name under an unsaved variable
            # w (a GAN's discriminator left out), beside a stored variable of w's scope
            name = full[len(head) + 1:]
            m = _NUMBERED.match(name)
            out.add(m.group(1) if m and "/" in m.group(1) else name)
    return out


def split_slashed(full: str, names, stored) -> tuple[str, str] | None:
    """``(variable name, EMA name with its _N)`` of an average ``full`` recorded under one of
    ``names`` that has a slash (``w0/ema/fast_1`` -> ``("w0", "ema/fast_1")``) where that
    variable name is in ``stored`` and ``full``'s own head is not; else ``None``."""
    parent = full.rpartition("/")[0]
    if parent in stored and parent.rpartition("/")[0] not in stored:
        return None  # w0/fast under a stored w0 (but w0/ema/fast beside w0/ema and w0: F6)
    m = _NUMBERED.match(full)
    for name in sorted((n for n in names if "/" in n), key=len, reverse=True):
        for body, tail in ((full, ""), (m.group(1), "_" + m.group(2)) if m else (None, None)):
            if body is not None and body.endswith("/" + name):
                head = body[: -len(name) - 1]
                if head in stored:
                    return head, name + tail
    return None
