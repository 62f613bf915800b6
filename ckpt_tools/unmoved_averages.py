"""Averages an export is about to write whose values show they were most likely never updated.

An evaluation or serving graph that runs ``ema.apply()``, initializes every variable,
restores only the model's weights and saves every variable (``Saver()``) stores each shadow
with the value it was created with: its variable's initial value, not an average. The export
gave those initial values as the EMA weights, exit 0 (review-25-user-u27 F5). The file proves
it only where that initial value shows: a variable initialized to one constant (a bias's zeros,
a batch norm's ones) whose average holds that one value (0.0 or 1.0 exactly: any other one
value is no initializer's, review-26-attack-r89 F2) in every element while the weight
itself does not, which an update from that weight does not leave, unless its decay is so close
to 1 that each step's change rounds away. So the export warns (stderr and ``--json``'s
``unmoved_averages``); it refuses nothing, since that rounding leaves the same file. A
checkpoint read over a URL is not checked (each tensor read ahead of the export's windowed
reads would cost a request).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .wording import counted

#: the averages read: 1-D or scalar-like (biases, scales, offsets: what is initialized to
#: one constant); a kernel's random initial value proves nothing, and it is not read
_MAX_DIMS = 1
_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def _one_value(ckpt, key: str) -> float | None:
    """The one finite value every element of ``key`` (two or more) holds, else ``None``.

    Read in chunks (``release=True``), never whole: an export streams every tensor it writes
    (test_streaming), and this check runs before it."""
    first, size, same = None, 0, True
    for chunk in ckpt.chunks(key, release=True):  # read to the end: the CRC verdict is last
        flat = np.asarray(chunk).reshape(-1)
        if not flat.size or not same:
            continue
        if first is None:
            first = flat[0]
        size += flat.size
        same = bool(np.isfinite(first)) and bool(np.all(flat == first))
    return float(first) if same and size > 1 and first is not None else None


def _initial_one_value(ckpt, key: str) -> bool:
    """Whether every element of ``a`` (two or more) holds 0.0 or every one 1.0 exactly: what
    a zeros or ones initializer gives (a bias, a batch norm's scale and offset). Another
    single value is no initial value: real training with a decay of 0.9999 moves a scale's
    average from 1 to 0.999866 in every element alike in its first steps (the steps' changes
    equal after rounding), which is an update (review-26-attack-r89 F2)."""
    return _one_value(ckpt, key) in (0.0, 1.0)


def unmoved_averages(ckpt, plan: Mapping[str, str], averaged, weights: Mapping[str, str]
                     ) -> dict[str, str]:
    """Returns output name -> average key for each of ``averaged`` (output names of ``plan``,
    output name -> key read) whose average (at most 1-D, two or more float elements) holds
    0.0 in every element or 1.0 in every element (an initializer's value) while its weight
    (``weights``: output name -> the weight's own key) holds more than one value."""
    out: dict[str, str] = {}
    for name in averaged:
        src, own = plan.get(name), weights.get(name)
        if src is None or own is None or own == src or own not in ckpt.entries():
            continue
        entry, wentry = ckpt.entry(src), ckpt.entry(own)
        if (len(entry.shape) > _MAX_DIMS or entry.dtype_name not in _FLOATS
                or tuple(entry.shape) != tuple(wentry.shape) or entry.slices):
            continue
        if _initial_one_value(ckpt, src) and _one_value(ckpt, own) is None:
            out[name] = src
    return out


def unmoved_warning(found: Mapping[str, str], ckpt, weights: Mapping[str, str],
                    total: int) -> str:
    """The warning (without ``warning:``) for :func:`unmoved_averages`' ``found`` (``total``:
    how many averages the export writes)."""
    names = sorted(found)
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    eg = names[0]
    value = _one_value(ckpt, found[eg])
    return (f"{len(names)} of the {counted(total, 'average')} exported hold one value in every "
            "element "
            f"while their weights do not ({', '.join(names[:3])}{more}; e.g. {found[eg]} is "
            f"all {value:g}, {weights[eg]} is not): an ExponentialMovingAverage update from "
            "such a weight does not leave that, unless its decay is so close to 1 that each "
            "step's change rounds away, so these averages most likely still hold their "
            "initial values, never updated (an evaluation or serving graph that ran "
            "ema.apply(), initialized, restored only the model's weights and saved every "
            "variable stores them so), and the other averages may be initial values too; if "
            "so, export --raw writes the weights (ckpt stats shows each average's drift)")


def raw_unmoved(ckpt, plan: Mapping[str, str]) -> dict[str, str]:
    """For ``export --raw``'s ``plan`` (output name -> key read, a weight's own): output name
    -> its stored average's key, for each weight whose average :func:`unmoved_averages`
    finds unmoved (review-26-attack-r89 F4: --raw told to drop --raw where the default
    export says the averages were never updated)."""
    shadows = {v.name: v.ema for v in ckpt.variables_unwarned()
               if getattr(v, "ema", None) and v.ema in ckpt.entries()}
    pairs = {n: shadows[k] for n, k in plan.items() if k in shadows}
    return unmoved_averages(ckpt, pairs, list(pairs), {n: plan[n] for n in pairs})


def raw_unmoved_warning(found: Mapping[str, str], ckpt) -> str:
    """The warning (without ``warning:``) ``export --raw`` gives in place of "the averaged
    weights usually evaluate better (drop --raw)" where :func:`raw_unmoved` finds
    ``found``."""
    names = sorted(found)
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    eg = names[0]
    value = _one_value(ckpt, found[eg])
    return ("exporting RAW weights although the checkpoint has EMA shadows; "
            f"{len(names)} of those averages hold one value in every element while their "
            f"weights do not ({', '.join(names[:3])}{more}; e.g. {found[eg]} is all "
            f"{value:g}), as averages never updated since initialization do (an evaluation or "
            "serving graph that ran ema.apply(), initialized, restored only the model's "
            "weights and saved every variable stores them so): if so, the raw weights written "
            "here are the ones to use; if training did update them, drop --raw to export the "
            "averages (ckpt stats shows each average's drift)")
