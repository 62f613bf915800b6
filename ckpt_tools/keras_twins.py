"""Keras weights saved twice: one variable held by two layers (weight tying).

A Keras 3 layer that holds another layer's variable (``self.tied = emb.embeddings``, the
output projection of a language model or a tied autoencoder) tracks it as its own, so the
file stores it under both layers (``layers/embedding/vars/0`` and ``layers/tied_ref/vars/0``),
while ``model.trainable_variables`` lists it once and the optimizer keeps one average. Writing
the average into one place leaves the raw copy in the other, and ``load_weights`` loads both
into the one variable: it ends raw.

The file does not record the tie. A weight without an EMA copy that holds exactly the bytes of
a weight with one (same shape, dtype and values) is such a copy, or a frozen variable equal to
it (a target network synced from the online one at the step the file was saved), which keeps
its own raw value. Writing the average into both would give the frozen copy another weight's
average; keeping the raw copy would give the tied variable raw values: either is wrong for one
of the two, and values do not tell them apart, so :func:`refuse_twins` refuses (exit 6). The
live model knows which it is (one variable or two): ``apply_keras_ema(model, path)`` assigns
the averages to ``model.trainable_variables`` after ``load_weights``, right for both.
"""

from __future__ import annotations

import numpy as np

from .errors import EmaError
from .wording import agreeing, counted

_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def find_twins(ckpt) -> list[tuple[str, str]]:
    """``(weight, averaged weight)`` key pairs of a Keras 3 file or a legacy ``.h5``: a model
    weight without an EMA copy whose shape, dtype and bytes are those of a weight with one (at
    most one pair per weight without a copy). Empty for other formats or where nothing is
    paired.

    Reads the values of those weights only that share a shape and dtype with a paired one,
    once per layout (kept in its ``twins``: a command asks several times).
    """
    lay = getattr(ckpt.reader, "keras", None)
    if lay is None or lay.kind not in ("keras3", "legacy") or not lay.averages:
        return []
    if lay.twins is None:
        lay.twins = _find(ckpt, lay)
    return list(lay.twins)


def _find(ckpt, lay) -> list[tuple[str, str]]:
    """:func:`find_twins`, computed."""
    averaged = [w for w in lay.averages.values() if w is not None]
    done = set(averaged)
    by_spec: dict[tuple, list[str]] = {}
    for w in averaged:
        e = ckpt.entry(w)
        by_spec.setdefault((tuple(e.shape), e.dtype_name), []).append(w)
    cache: dict[str, bytes | None] = {}

    def data(key: str) -> bytes | None:
        # A tensor holding NaN proves no tie: a diverged run leaves every weight all-NaN, bit
        # for bit alike (review-13-attack-r23 F8). None never compares equal to bytes.
        if key not in cache:
            value = np.ascontiguousarray(ckpt.tensor(key))
            cache[key] = None if np.isnan(value.astype(np.float32, copy=False)).any() \
                else value.tobytes()
        return cache[key]

    out = []
    for key in lay.model:
        e = ckpt.entry(key)
        if key in done or e.dtype_name not in _FLOATS:
            continue
        twin = next((w for w in by_spec.get((tuple(e.shape), e.dtype_name), ())
                     if data(key) is not None and data(w) == data(key)), None)
        if twin is not None:
            out.append((key, twin))
    return out


def refuse_twins(ckpt) -> None:
    """Refuses a Keras file in which a weight without an EMA copy is bit-identical to one
    with a copy (see the module docstring): one variable saved twice, or a frozen copy.

    Raises:
        EmaError: naming both weights and the live-model way that pairs either case.
    """
    found = find_twins(ckpt)
    if not found:
        return
    lay = ckpt.reader.keras

    def show(k: str) -> str:
        return lay.paths.get(k, k)

    pairs = "; ".join(f"{show(k)} = {show(t)}" for k, t in found[:4]) + (
        " ..." if len(found) > 4 else "")
    first, twin = found[0]
    raise EmaError(
        f"{ckpt.path}: {counted(len(found), 'weight')} without an EMA copy "
        f"{agreeing(len(found), 'holds', 'hold')} exactly the values of "
        f"a weight that has one ({pairs}): {show(first)} is either {show(twin)} itself, saved "
        "twice because two layers hold it (weight tying, e.g. self.tied = emb.embeddings: "
        "its average belongs in both places, or load_weights ends with the raw copy), or a "
        "frozen copy equal to it (a target network synced when the file was saved: it keeps "
        "its raw value); the file does not record which, so nothing is written: "
        "apply_keras_ema(model, path) with the live model (one variable gets its average, a "
        "frozen copy keeps its own value), then model.save_weights(...); ckpt export --raw "
        "writes the raw weights")


def explained_by_twins(ckpt, every: list) -> bool:
    """Whether a live model's ``len(every)`` weights fall short of the file's by exactly the
    weights saved twice (:func:`find_twins`): Keras lists a tied variable once."""
    lay = ckpt.reader.keras
    missing = len(lay.model) - len(every)
    return missing > 0 and len(find_twins(ckpt)) == missing
