"""A ``--trainable`` that leaves out a layer's first variable because it is another stated
weight, tied (review-16-attack-r32 F10).

``self.tied = emb.embeddings`` in a custom layer: Keras saves the one variable under both
layers (``embedding/0`` and ``tied_out/0``), and the optimizer lists it once, so the true
``--trainable embedding/0,...,tied_out/1`` skips ``tied_out/0``. That was refused as if the
order were wrong ("Keras saves a layer's trainable variables first"); the values show the tie,
as they do once the pairing is read (:mod:`ckpt_tools.keras_twins`), so the refusal says so.
Stated under both layers (``--trainable emb,...,tied_out``), one weight too many for the
optimizer, the count's refusal names the tie too (:func:`stated_twice`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ...errors import EmaError


def refuse_tied(paths: Mapping[str, str], layer: str, own: list[str], got: list[int],
                keys: list[str], read: Callable | None) -> None:
    """Refuses (weight tying) where every variable of ``layer`` that ``got`` (the indices
    stated) skips holds exactly the values of a weight of ``keys`` (those stated) outside the
    layer; returns where ``read`` is ``None`` or one does not (the order's refusal then).

    Args:
        paths: key -> the path ``ckpt list`` shows.
        layer: the layer's path; ``own``: its variables saved by index, in order.
        got: the indices of ``own`` stated; ``keys``: every key stated.
        read: key -> its stored value.

    Raises:
        EmaError: the skipped variables are other stated weights' values, bit for bit.
    """
    if read is None or not got:
        return
    skipped = [own[i] for i in range(min(len(own), max(got) + 1)) if i not in got]
    cache: dict[str, tuple | None] = {}

    def data(key: str) -> tuple | None:  # a NaN proves no tie (a diverged run: all alike)
        if key not in cache:
            v = np.ascontiguousarray(read(key))
            cache[key] = None if v.dtype.kind == "f" and np.isnan(v).any() else (
                v.shape, v.dtype.str, v.tobytes())
        return cache[key]

    pairs = []
    for k in skipped:
        twin = next((w for w in keys if w not in own and data(k) is not None
                     and data(w) == data(k)), None)
        if twin is None:
            return
        pairs.append((k, twin))
    if pairs:
        k, w = (paths.get(x, x) for x in pairs[0])
        raise EmaError(
            f"--trainable states {', '.join(f'{layer}/{i}' for i in got)} without {k}, which "
            f"holds exactly the values of {w}, stated too: {k} is either {w} itself, saved "
            "twice because two layers hold it (weight tying, e.g. self.tied = emb.embeddings: "
            "the optimizer lists it once, its average belongs in both places), or a frozen "
            "copy equal to it; the file does not record which, so nothing is decided: "
            "apply_keras_ema(model, path) with the live model")


def stated_twice(paths: Mapping[str, str], keys: list[str], read: Callable | None) -> str:
    """The sentence naming two weights of ``keys`` (a ``--trainable`` that fits no layout)
    that hold exactly the same values, as a tied variable saved under two layers does
    (``--trainable emb,...,tied_out`` states it twice: one too many for the optimizer); ``""``
    where ``read`` is ``None`` or none do (a constant, such as a zero bias, proves nothing)."""
    if read is None:
        return ""
    seen: dict[tuple, str] = {}
    for key in keys:
        v = np.ascontiguousarray(read(key))
        if v.dtype.kind != "f" or v.size < 2 or np.isnan(v).any() or (v == v.flat[0]).all():
            continue
        found = seen.setdefault((v.shape, v.dtype.str, v.tobytes()), key)
        if found != key:
            k, w = paths.get(key, key), paths.get(found, found)
            return (f"; {k} holds exactly the values of {w}, both stated: either {w} itself, "
                    "saved twice because two layers hold it (weight tying, e.g. self.tied = "
                    "emb.embeddings: the optimizer lists it once, its average belongs in both "
                    "places), or a frozen copy equal to it; the file does not record which, so "
                    "nothing is decided")
    return ""
