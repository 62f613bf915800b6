"""What a Keras file's EMA pairing takes for granted where the file cannot show it.

Two readings of a Keras 3 ``use_ema=True`` file are assumptions, not proof:

* ``fit_order``: EMA copies of weights of equal shape and dtype are paired in the order
  ``fit()`` builds the optimizer in (``model.trainable_variables``); a custom training loop whose
  first ``apply_gradients()`` listed them otherwise built it otherwise. ``--trainable NAMES``
  (``--loop-order`` for a loop's order) states it.
* ``not_swapped``: ``ModelCheckpoint`` placed after ``SwapEMAWeights(swap_on_epoch=True)``
  saves the averages as the model's weights and the raw weights as the EMA copies, which the
  file cannot show. Where every weight equals its EMA copy bit for bit the question does not
  arise: ``fit()`` ends with ``optimizer.finalize_variable_values()``, which assigns each
  average to its weight, and ``SwapEMAWeights``' last epoch assigns each weight (then the
  average) to its copy, so either reading gives the same values. Otherwise a swapped file's
  own weights are the averages: it is used as it is (``ckpt export --raw`` writes them).

:func:`keras_assumptions` lists them (``--json``: ``"assumed"``); :func:`refuse_assumed` is
``--strict`` (Python ``strict=True``): any of them is exit 6 naming the statement that decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checkpoint import Checkpoint
from .errors import AssumptionWarning, EmaError
from .formats.objgraph import KERAS3_AVERAGE, has_keras3_averages

__all__ = ["Assumption", "keras_assumptions", "live_assumptions", "refuse_assumed",
           "warn_assumed"]


@dataclass(frozen=True)
class Assumption:
    """One reading of the file that its pairing takes for granted.

    Attributes:
        name: ``"fit_order"`` or ``"not_swapped"`` (``--json``'s ``"assumed"``).
        note: the note the commands print (what is assumed, why, and the way out).
        what: what is assumed, in a few words (``--strict``'s error).
        decides: the statement that decides (``--trainable NAMES --loop-order``, ``--raw``).
    """

    name: str
    note: str
    what: str
    decides: str


FIT_ORDER = Assumption(
    "fit_order",
    "EMA copies of weights of equal shapes are paired in the order fit() builds the optimizer "
    "in (model.trainable_variables); a custom training loop whose first apply_gradients() "
    "listed them otherwise pairs them otherwise, which the file cannot show: then state that "
    "order with --trainable NAMES --loop-order",
    "EMA copies of weights of equal shapes are taken in the order fit() builds the optimizer "
    "in (model.trainable_variables)",
    "state the order with --trainable NAMES, a custom loop's with --trainable NAMES "
    "--loop-order (Python: trainable=[...], loop_order=True)")
NOT_SWAPPED = Assumption(
    "not_swapped",
    "if this file was saved by ModelCheckpoint after SwapEMAWeights(swap_on_epoch=True), its "
    "weights are the averages and its EMA copies the raw weights, which the file cannot show: "
    "then use the file as it is, its own weights are the averages (ckpt export --raw writes "
    "them); --not-swapped states it was not",
    "the file is taken as not saved by ModelCheckpoint after SwapEMAWeights(swap_on_epoch=True) "
    "(its weights differ from their EMA copies)",
    "if it was, use the file as it is: its own weights are the averages (ckpt export --raw "
    "writes them; Python: ema=False, or model.load_weights); if not, state it: --not-swapped "
    "(Python: not_swapped=True)")


def _same_values(ckpt: Checkpoint, pairs: dict[str, str]) -> bool:
    """Whether each weight equals its EMA copy bit for bit (dtype and shape included); stops
    at the first that differs (a mid-training file: its first weight). Read once per open
    checkpoint and set of pairs (a stated ``--trainable`` re-pairs them)."""
    return ckpt.memo(("keras_same_values", frozenset(pairs.items())),
                     lambda: _compare(ckpt, pairs))


def _compare(ckpt: Checkpoint, pairs: dict[str, str]) -> bool:
    import numpy as np  # Keras files only: restore-ema of a TF checkpoint needs no NumPy

    for avg, weight in pairs.items():
        a, w = np.asarray(ckpt.tensor(avg)), np.asarray(ckpt.tensor(weight))
        if a.dtype != w.dtype or a.shape != w.shape or a.tobytes() != w.tobytes():
            return False
    return True


def _tf_keras(ckpt: Checkpoint) -> bool:
    """Whether tf_keras (Keras 2) wrote the file: it has no SwapEMAWeights callback."""
    return bool(getattr(ckpt.reader, "by_tf_keras", ckpt.reader.keras.tf_keras))


def keras_assumptions(ckpt: Checkpoint) -> list[Assumption]:
    """What the pairing of a Keras file's EMA copies assumes (nothing for other files, or a
    Keras file whose copies are not used).

    Reads the weights and their copies (until the first pair that differs) to tell whether the
    swap question arises; the answer is kept on the open checkpoint's layout.

    Returns:
        `list[Assumption]`: ``FIT_ORDER`` where weights of equal shape and dtype are paired
        by the optimizer's build order and no ``--trainable`` stated it; ``NOT_SWAPPED`` for a
        Keras 3 file whose weights differ from their copies. Empty when nothing is assumed,
        or the file does not pair every copy (then the pairing is refused, not assumed).
    """
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None:
        return _object_assumptions(ckpt)
    if not layout.use_ema or not layout.averages:
        return []
    pairs = {a: w for a, w in layout.averages.items() if w is not None}
    if len(pairs) != len(layout.averages):
        return []
    assumed = []
    entries = ckpt.entries()
    kinds = [] if layout.trainable_stated else [  # every weight stated: no order assumed
        (tuple(entries[w].shape), entries[w].dtype) for a, w in pairs.items()
        if w in entries and a not in layout.stated_pairs]
    if len(kinds) != len(set(kinds)):  # equal-shaped weights: their order pairs them
        assumed.append(FIT_ORDER)
    if not _tf_keras(ckpt) and not ckpt.not_swapped and not _same_values(ckpt, pairs):
        assumed.append(NOT_SWAPPED)  # (--not-swapped states it)
    return assumed


def object_pairs(ckpt: Checkpoint) -> dict[str, str]:
    """A Keras 3 optimizer's ``use_ema`` copies saved in a ``tf.train.Checkpoint`` (named
    ``<variable path>_average``, paired by that path): copy key -> weight key; empty for
    other checkpoints (tf_keras' ``Adam/average/...`` have no ``SwapEMAWeights``)."""
    if getattr(ckpt.reader, "keras", None) is not None or not has_keras3_averages(ckpt.objects):
        return {}
    full = ckpt.objects.full_names
    return {v.name: v.ema_of for v in ckpt.variables()
            if v.role == "ema" and v.ema_style == "keras" and v.ema_of
            and full.get(v.name, "").endswith(KERAS3_AVERAGE)}


def _object_assumptions(ckpt: Checkpoint) -> list[Assumption]:
    """``not_swapped`` for a Keras 3 optimizer's copies in a ``tf.train.Checkpoint`` whose
    weights differ from them: ``SwapEMAWeights(swap_on_epoch=True)`` swaps the model's
    variables and these copies before any callback saves, in every format alike (their
    paths pair them, so no order is assumed)."""
    pairs = object_pairs(ckpt)
    if not pairs or ckpt.not_swapped:
        return []
    return [] if _same_values(ckpt, pairs) else [NOT_SWAPPED]


def live_assumptions(ckpt: Checkpoint, targets: list, stated: bool) -> list[Assumption]:
    """What :func:`~ckpt_tools.apply_keras_ema` assumes: the file's, and ``fit_order`` where it
    paired the copies with the live model's ``trainable_variables`` (no ``trainable`` stated)
    among which some share a shape and dtype; ``not_swapped`` too where the file does not pair
    every copy with a weight of its own (their values cannot be compared).

    Args:
        ckpt: the open checkpoint.
        targets: the model variables the copies go into, in the copies' order.
        stated: the caller stated the order (``trainable=``).

    Returns:
        `list[Assumption]`, as :func:`keras_assumptions`.
    """
    assumed = keras_assumptions(ckpt)
    layout = ckpt.reader.keras
    if not _tf_keras(ckpt) and not ckpt.not_swapped and None in layout.averages.values():
        assumed.append(NOT_SWAPPED)
    kinds = [(tuple(int(d) for d in v.shape), str(getattr(v.dtype, "name", v.dtype)))
             for v in targets]
    if not stated and FIT_ORDER not in assumed and len(kinds) != len(set(kinds)):
        assumed.insert(0, FIT_ORDER)
    return assumed


def refuse_assumed(ckpt: Checkpoint, assumed: list[Assumption] | None = None) -> None:
    """``--strict`` (``strict=True``): refuses a pairing that rests on an assumption.

    Args:
        ckpt: the open checkpoint.
        assumed: what :func:`keras_assumptions` gave (computed when ``None``).

    Raises:
        EmaError: (exit 6) one line naming the file, each assumption and what decides it.
    """
    assumed = keras_assumptions(ckpt) if assumed is None else assumed
    if assumed:
        said = "; ".join(f"{a.name} ({a.what}: {a.decides})" for a in assumed)
        raise EmaError(f"{ckpt.path}: --strict: the EMA pairing rests on what the file cannot "
                       f"prove: {said}")


def warn_assumed(ckpt: Checkpoint, assumed: list[Assumption], stacklevel: int = 3) -> None:
    """The Python API's counterpart of the notes ``ckpt`` prints: one
    :class:`~ckpt_tools.errors.AssumptionWarning` naming the file and each assumption (its
    note, with the statement that decides), where ``assumed`` is not empty."""
    if assumed:
        import warnings

        warnings.warn(f"{ckpt.path}: the EMA pairing assumes what the file cannot prove: "
                      + "; ".join(f"{a.name}: {a.note}" for a in assumed),
                      AssumptionWarning, stacklevel=stacklevel)
