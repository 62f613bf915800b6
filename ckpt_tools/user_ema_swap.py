"""Whether the ``SwapEMAWeights`` question concerns a pairing: a user's
``tf.train.ExponentialMovingAverage`` beside a Keras 3 optimizer's ``use_ema`` copies
(review-28-attack-r104 F5).

``SwapEMAWeights(swap_on_epoch=True)`` swaps the model's variables with the optimizer's copies
before a callback saves; it never touches a ``tf.train.ExponentialMovingAverage``'s averages.
A pairing that reads none of those copies and gives every weight they cover another average
writes no value a swap changed, so ``--not-swapped`` decides nothing there. Where a copy is
read, or a weight it covers is written raw (its key may hold the optimizer's average), the
question stays.
"""

from __future__ import annotations

from collections.abc import Callable

from .checkpoint import Checkpoint
from .keras_assumed import object_pairs
from .keras_assumption_texts import OBJECT_NOT_SWAPPED
from .swap_assumed import Assumption


def unswapped_pairing(ckpt: Checkpoint, assumed: list[Assumption],
                      pairs: list[tuple[str, str]], missing: list[str],
                      chosen: Callable[[str, str], bool] | None = None) -> list[Assumption]:
    """The assumptions of ``assumed`` the pairing (``pairs``: every ``(source key, target
    key)`` it found, kept or not; ``missing``: targets left without an average) rests on:
    ``OBJECT_NOT_SWAPPED`` is left out where no pair reads a Keras 3 optimizer's ``use_ema``
    copy (:func:`~ckpt_tools.keras_assumed.object_pairs`) or a weight those copies cover in
    another key's place, and every weight those copies cover takes another average (none is
    written raw). ``chosen(source, target)``: whether the caller reads that pair (its
    ``--include``/``--exclude``, the variables ``apply_ema`` assigns); only those count, a
    weight the caller leaves out being neither read nor written (review-33-attack-r127 M2:
    ``--include 'net/d1/*'`` of a user EMA that averaged d1 alone asked the question of d2,
    left raw but never read). ``None``: every pair counts.

    Returns:
        `list[Assumption]`: ``assumed``, or it without ``OBJECT_NOT_SWAPPED``.
    """
    if OBJECT_NOT_SWAPPED not in assumed:
        return assumed
    copies = object_pairs(ckpt)
    if not copies:
        return assumed
    weights = set(copies.values())
    covered = weights
    if chosen is not None:  # a covered weight counts where the caller keeps any pair of it
        pairs = [(s, t) for s, t in pairs if chosen(s, t)]
        covered = {w for w in weights if chosen(w, w)} | ({t for _s, t in pairs} & weights)
    # a copy read, or a covered weight's stored value read in another key's place: a swap
    # changed both
    if any(s in copies or (s != t and s in weights) for s, t in pairs):
        return assumed
    taken = {t: s for s, t in pairs if s != t}
    lacking = set(missing)
    if all(w in taken and w not in lacking for w in covered):
        return [a for a in assumed if a != OBJECT_NOT_SWAPPED]
    return assumed


def unswapped_written(ckpt: Checkpoint, assumed: list[Assumption],
                      sources) -> list[Assumption]:
    """The assumptions of ``assumed`` an export writing ``sources`` (the checkpoint keys it
    reads) rests on: ``OBJECT_NOT_SWAPPED`` is left out where it reads neither a Keras 3
    optimizer's ``use_ema`` copy nor a weight those copies cover (a swap changes neither
    anything else nor a ``tf.train.ExponentialMovingAverage``'s averages).

    Returns:
        `list[Assumption]`: ``assumed``, or it without ``OBJECT_NOT_SWAPPED``.
    """
    if OBJECT_NOT_SWAPPED not in assumed:
        return assumed
    if not reads_swappable(ckpt, sources):
        return [a for a in assumed if a != OBJECT_NOT_SWAPPED]
    return assumed


def reads_swappable(ckpt: Checkpoint, sources) -> bool:
    """Whether reading ``sources`` (the checkpoint keys a command reads) can rest on
    ``--not-swapped``: it reads a Keras 3 optimizer's ``use_ema`` copy or a weight those copies
    cover, or the checkpoint shows no such copies to tell.

    Returns:
        `bool`: ``False`` only where copies are shown and ``sources`` reads none of them nor
        any weight they cover.
    """
    copies = object_pairs(ckpt)
    return not copies or bool(set(sources) & (set(copies) | set(copies.values())))


def covered_raw(ckpt: Checkpoint, sources) -> list[str]:
    """Where ``sources`` (the checkpoint keys a command reads) read no Keras 3 ``use_ema`` copy
    but weights those copies cover, as stored: their display names, which ``--not-swapped``
    alone says are raw (a swap leaves the optimizer's averages there); ``[]`` where a copy is
    read, or none is shown (review-33-attack-r127 m1)."""
    copies = object_pairs(ckpt)
    read = set(sources)
    if not copies or read & set(copies):
        return []
    shown = {v.name: v.path or v.name for v in ckpt.variables_unwarned()}
    return [shown.get(k, k) for k in sorted(read & set(copies.values()))]


def stored_covered(ckpt: Checkpoint, source_of: dict[str, str]) -> list[str]:
    """The weights a Keras 3 optimizer's ``use_ema`` copies cover that a bake writes as
    stored (``source_of``: output key -> the key whose value it gets; a key it does not name
    is copied as it is): raw where the file was not saved swapped, the optimizer's averages
    where it was, the ``SwapEMAWeights`` question (review-33-attack-r132 C1).

    Returns:
        `list[str]`: their keys, sorted; ``[]`` where no copy is shown.
    """
    copies = object_pairs(ckpt)
    if not copies:
        return []
    entries = ckpt.entries()
    return sorted(w for w in set(copies.values())
                  if w in entries and source_of.get(w, w) == w)


def refuse_stored_unasked(ckpt: Checkpoint, source_of: dict[str, str],
                          map_options: dict) -> None:
    """Refuses a bake (restore-ema) that writes as stored a weight a Keras 3 optimizer's
    ``use_ema`` copies cover where nothing states the file was not saved swapped:
    :func:`~ckpt_tools.ema_map` asks the question only of the pairs the filters keep
    (review-33-attack-r127 M2), but restore-ema copies the weights ``--exclude`` leaves
    out into its output, whose mark then said they held averages (review-33-attack-r132 C1).

    Raises:
        UnprovenPairingError: (exit 6) ``--not-swapped`` decides, as ``ema_map`` says it.
    """
    if getattr(ckpt, "not_swapped", False) or map_options.get("not_swapped"):
        return
    if not stored_covered(ckpt, source_of):
        return
    from .keras_assumed import keras_assumptions, refuse_assumed
    from .swap_assumed import of_style

    if OBJECT_NOT_SWAPPED in of_style(keras_assumptions(ckpt), map_options.get("style")):
        refuse_assumed(ckpt, [OBJECT_NOT_SWAPPED])
