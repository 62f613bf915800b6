"""What a Keras file's EMA pairing takes for granted where the file cannot show it.

Two readings of a Keras 3 ``use_ema=True`` file are assumptions, not proof:

* ``fit_order``: EMA copies of weights of equal shape and dtype are paired in the order
  ``fit()`` builds the optimizer in (``model.trainable_variables``); a custom training loop whose
  first ``apply_gradients()`` listed them otherwise built it otherwise. It is Keras' own
  reading (``keras.models.load_model`` builds the optimizer from ``model.trainable_variables``
  and loads the copies by position), so it is the default, flagged. ``--fit-order`` states it;
  ``--trainable NAMES --loop-order`` states a loop's order.
* ``not_swapped``: ``ModelCheckpoint`` placed after ``SwapEMAWeights(swap_on_epoch=True)``
  saves the averages as the model's weights and the raw weights as the EMA copies, which the
  file cannot show. Where every weight equals its EMA copy bit for bit the question does not
  arise: ``fit()`` ends with ``optimizer.finalize_variable_values()``, which assigns each
  average to its weight, and ``SwapEMAWeights``' last epoch assigns each weight (then the
  average) to its copy, so either reading gives the same values. Otherwise a swapped file's
  own weights are the averages: it is used as it is (``ckpt export --raw`` writes them).
  Not stated, the question is refused (exit 6) where values are handed back.
  A TF checkpoint's averages kept as optimizer slots (an EMA optimizer's ``swap_weights()``)
  raise the same question: :mod:`~ckpt_tools.swap_assumed`.

:func:`keras_assumptions` lists them (``--json``: ``"assumed"``); :func:`refuse_assumed` refuses
``not_swapped`` wherever values or a pairing are handed back (exit 6, naming ``--not-swapped``
and ``--raw``: Keras documents that callback as the way to checkpoint EMA weights, so the
question is never answered by default; ``ckpt list`` only shows it), and under ``--strict``
(Python ``strict=True``) ``fit_order`` too.
"""

from __future__ import annotations

import re

from .checkpoint import Checkpoint
from .errors import AssumptionWarning, RecordedStatementWarning, UnprovenPairingError
from .formats._record import replace
from .formats.objgraph import KERAS3_AVERAGE, has_keras3_averages
from .keras_assumption_texts import (
    FIT_ORDER,
    LIVE_FIT_ORDER,
    NOT_SWAPPED,
    OBJECT_NOT_SWAPPED,
    OBJECT_READ,
)
from .keras_copies_equal import weights_are_copies
from .keras_fit_order import equal_groups, fit_order_note, trading_group
from .swap_assumed import (
    SLOT_NOT_SWAPPED,
    SLOT_RAW_WARNING,
    Assumption,
    same_values,
    saver_assumptions,
    slot_assumptions,
    slot_pairs,
)

__all__ = ["LIVE_FIT_ORDER", "RAW_EMA_WARNING", "Assumption", "assumptions_for", "by_tf_keras",
           "copies_equal", "equal_groups",
           "fit_order_note", "keras_assumptions", "live_assumptions", "raw_warning",
           "refuse_assumed", "swap_refusal", "warn_assumed"]


def by_tf_keras(ckpt: Checkpoint) -> bool:
    """Whether tf_keras (Keras 2) wrote the file: it has no SwapEMAWeights callback."""
    return bool(getattr(ckpt.reader, "by_tf_keras", ckpt.reader.keras.tf_keras))


def keras_assumptions(ckpt: Checkpoint) -> list[Assumption]:
    """What the pairing of a Keras file's EMA copies assumes (nothing for a Keras file whose
    copies are not used); for a TF checkpoint, ``not_swapped`` of a Keras 3 optimizer's copies
    or of averages kept as optimizer slots, nothing for others.

    Reads the weights and their copies (until the first pair that differs) to tell whether the
    swap question arises; the answer is kept on the open checkpoint's layout.

    Returns:
        `list[Assumption]`: ``FIT_ORDER`` where weights of equal shape and dtype are paired
        by the optimizer's build order and neither ``--trainable`` nor ``--fit-order`` stated
        it (its note names one such group); ``NOT_SWAPPED`` for a
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
    groups = [] if layout.trainable_stated or ckpt.fit_order else equal_groups(ckpt)
    # Weights equal to their fit()-order copies prove nothing about the order: fit() ends
    # with finalize_variable_values(model.trainable_variables), which copies the averages
    # into the weights by that very order, whatever order built the optimizer (a custom
    # loop's pre-training, then fit(): each weight then holds another's average;
    # review-12-attack-r21 F3).
    if groups:  # equal-shaped weights: their order pairs them (unless stated)
        which = trading_group(ckpt, groups)
        assumed.append(replace(FIT_ORDER, note=which + FIT_ORDER.note,
                               line=which + FIT_ORDER.line))
    if not by_tf_keras(ckpt) and not ckpt.not_swapped and not same_values(ckpt, pairs):
        assumed.append(NOT_SWAPPED)  # (--not-swapped states it)
    return assumed


def assumptions_for(ckpt: Checkpoint, keys: list[str] | None = None) -> list[Assumption]:
    """:func:`keras_assumptions` where the pairing matters to ``keys`` (``show``/``stats``:
    a selection that includes an average, whose drift the pairing decides); every pairing's
    when ``None``.

    Returns:
        `list[Assumption]`, empty where ``keys`` include no average.
    """
    if keys is not None and not set(keys) & {v.name for v in ckpt.variables_unwarned()
                                             if v.role == "ema"}:
        return []
    return keras_assumptions(ckpt)


def raw_warning(ckpt: Checkpoint) -> str:
    """The warning for ``--raw`` (``ema=False``) on a checkpoint with EMA shadows; for a
    Keras 3 file it names the case where ``--raw`` is the remedy (a file saved after
    ``SwapEMAWeights(swap_on_epoch=True)`` holds the averages as its weights), which the
    ``not_swapped`` note sends the user to (review-12-user-r13 F4).

    Returns:
        `str`: the warning, without ``warning:``.
    """
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None and not object_pairs(ckpt) and slot_pairs(ckpt):
        return SLOT_RAW_WARNING + _otherwise(ckpt)  # an EMA optimizer's swap_weights()
    if layout is None and saver_assumptions(ckpt):  # a .meta without a save op
        return ("exporting the keys as stored (--raw): right if a swapping Saver wrote the "
                "checkpoint (its keys named as variables then hold the averages; its graph "
                "file records no save op to show it); " + _otherwise(ckpt))
    if layout is not None and layout.use_ema and not by_tf_keras(ckpt) \
            and weights_are_copies(ckpt, layout):  # u18 F3: the refusal's own --raw hint
        return ("exporting the file's own weights (--raw), not its EMA copies: every EMA copy "
                "equals one of them bit for bit, as after fit() ends (it copies the averages "
                "into the weights), so they are the averages if it was saved then "
                "(model.save() after fit()) or after SwapEMAWeights(swap_on_epoch=True)")
    if layout is not None and layout.use_ema and not by_tf_keras(ckpt) or \
            layout is None and object_pairs(ckpt):
        return ("exporting the file's own weights (--raw), not its EMA copies: right if "
                "ModelCheckpoint saved it after SwapEMAWeights(swap_on_epoch=True) (its weights "
                "are then the averages); " + _otherwise(ckpt))
    return RAW_EMA_WARNING


#: What :func:`raw_warning` says of a TF1 file with averages (``export.py`` says
#: :func:`~ckpt_tools.unmoved_averages.raw_unmoved_warning` in its place where the averages
#: look never updated: review-26-attack-r89 F4).
RAW_EMA_WARNING = ("exporting RAW weights although the checkpoint has EMA shadows; the "
                   "averaged weights usually evaluate better (drop --raw to export them)")


def _otherwise(ckpt: Checkpoint) -> str:
    """The way to the averages that ``--raw``'s warning names: dropping ``--raw`` where that
    exports them, ``--not-swapped`` where the export without ``--raw`` is refused (the
    ``not_swapped`` question, which :func:`refuse_assumed` never answers by default: dropping
    ``--raw`` alone is exit 6 there; review-20-user-u22 F3).

    Returns:
        `str`: the advice, starting with ``otherwise``.
    """
    if any(a.name == "not_swapped" or a.refused for a in keras_assumptions(ckpt)):
        return "otherwise pass --not-swapped instead of --raw to export the averages"
    return "otherwise drop --raw to export the averages"


def object_pairs(ckpt: Checkpoint) -> dict[str, str]:
    """A Keras 3 optimizer's ``use_ema`` copies saved in a ``tf.train.Checkpoint`` (named
    ``<variable path>_average``, paired by that path): copy key -> weight key; empty for
    other checkpoints (tf_keras' ``Adam/average/...`` have no ``SwapEMAWeights``)."""
    if getattr(ckpt.reader, "keras", None) is not None or not has_keras3_averages(ckpt.objects):
        return {}
    full = ckpt.objects.full_names
    return {v.name: v.ema_of for v in ckpt.variables_unwarned()
            if v.role == "ema" and v.ema_style == "keras" and v.ema_of
            and full.get(v.name, "").endswith(KERAS3_AVERAGE)}


def _object_assumptions(ckpt: Checkpoint) -> list[Assumption]:
    """``not_swapped`` for a Keras 3 optimizer's copies in a ``tf.train.Checkpoint`` whose
    weights differ from them: ``SwapEMAWeights(swap_on_epoch=True)`` swaps the model's
    variables and these copies before any callback saves, in every format alike (their
    paths pair them, so no order is assumed); else for averages kept as optimizer slots
    whose variables differ from them (an EMA optimizer's ``swap_weights()``:
    :mod:`~ckpt_tools.swap_assumed`); for a TF1 checkpoint, ``saver_not_swapped`` where its
    graph file records no save op (:func:`~ckpt_tools.swap_assumed.saver_assumptions`)."""
    if ckpt.objects is None:  # TF1: a .meta without a save op pairs by key names
        return saver_assumptions(ckpt)
    pairs = object_pairs(ckpt)
    if not pairs:
        return slot_assumptions(ckpt)
    return [] if ckpt.not_swapped or same_values(ckpt, pairs) else [OBJECT_NOT_SWAPPED]


def copies_equal(ckpt: Checkpoint) -> bool:
    """Whether every weight of a ``use_ema`` Keras file (or a Keras 3 optimizer's copies, or
    average slots, in a TF checkpoint) equals its EMA copy bit for bit: saved after fit()
    copied the averages in, after a swap, or written by restore-ema; either way the file's own
    weights hold what restore-ema would write (u16 F10). ``False`` where a copy is unpaired."""
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None:
        pairs = object_pairs(ckpt) or slot_pairs(ckpt)
    elif not layout.use_ema or not layout.averages or None in layout.averages.values():
        return False
    else:
        pairs = dict(layout.averages)
    return bool(pairs) and same_values(ckpt, pairs)


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
    if not by_tf_keras(ckpt) and not ckpt.not_swapped and None in layout.averages.values():
        assumed.append(NOT_SWAPPED)
    kinds = [(tuple(int(d) for d in v.shape), str(getattr(v.dtype, "name", v.dtype)))
             for v in targets]
    if not stated and not ckpt.fit_order and all(a.name != "fit_order" for a in assumed) \
            and len(kinds) != len(set(kinds)):
        assumed.insert(0, FIT_ORDER)
    return assumed


def swap_refusal(ckpt: Checkpoint, assumed: list[Assumption]) -> str:
    """The one-line refusal of a pairing that rests on ``not_swapped`` (the file's weights
    differ from their EMA copies, and nothing shows whether it was saved swapped), naming both
    ways out: ``--not-swapped`` and, if it was swapped, the file's own weights (``--raw``).

    Returns:
        `str`: the message, naming the file.
    """
    refused = [a for a in assumed if a.refused]  # crossed TF1 save ops (saver_not_swapped)
    if refused:
        return f"{ckpt.path}: {refused[0].note}"
    if SLOT_NOT_SWAPPED in assumed:
        return (f"{ckpt.path}: its variables differ from their average slots, and the "
                "checkpoint cannot show whether it was saved after the EMA optimizer's "
                "swap_weights() (Model Garden's eval/export, TF Addons' MovingAverage): if not, "
                "pass --not-swapped (Python: not_swapped=True); if it was, its own variables "
                "are the averages: use them as they are (ckpt export --raw; Python: ema=False)")
    layout = getattr(ckpt.reader, "keras", None)
    read = "model.load_weights" if layout is not None \
        else OBJECT_READ  # a tf.train.Checkpoint: Keras 3's load_weights cannot read it
    if layout is not None and None in layout.averages.values() \
            and weights_are_copies(ckpt, layout):  # not compared, and equal: u18 F2
        return (f"{ckpt.path}: the file does not pair its EMA copies with its weights (each "
                "copy equals one of its weights bit for bit, as after fit() ends, which copies "
                "the averages into the weights), so it cannot show whether it was saved after "
                "SwapEMAWeights(swap_on_epoch=True) swapped them: if not (e.g. ModelCheckpoint "
                "alone), pass --not-swapped (Python: not_swapped=True); if it was, or if it "
                "was saved after fit() ended (model.save() after fit()), its own weights are "
                "the averages: use them as they are (ckpt export --raw; Python: ema=False, or "
                f"{read})")
    return (f"{ckpt.path}: its weights differ from their EMA copies, and the file cannot show "
            "whether it was saved after SwapEMAWeights(swap_on_epoch=True) swapped them: if "
            "not (e.g. ModelCheckpoint alone), pass --not-swapped (Python: not_swapped=True); "
            "if it was, its own weights are the averages: use them as they are (ckpt export "
            f"--raw; Python: ema=False, or {read})")


def refuse_assumed(ckpt: Checkpoint, assumed: list[Assumption] | None = None, *,
                   keys: list[str] | None = None, strict: bool = True) -> None:
    """Refuses a pairing that rests on an assumption where values or a pairing are handed
    back: ``not_swapped`` always (whether the file was saved swapped is never taken by
    default: review-13-attack-r23 F1), every assumption under ``--strict`` (``strict=True``).

    Args:
        ckpt: the open checkpoint.
        assumed: what :func:`keras_assumptions` gave (computed when ``None``).
        keys: only where these keys include an average (``show``/``stats``: the selection
            whose drift the pairing decides); every pairing when ``None``.
        strict: refuse ``fit_order`` too (``--strict``).

    Raises:
        UnprovenPairingError: (exit 6) one line naming the file, each assumption and what
            decides it; ``option`` ``--not-swapped`` where that decides.
    """
    assumed = assumptions_for(ckpt, keys) if assumed is None else assumed
    swap = [a for a in assumed if a.name == "not_swapped" or a.refused]
    if swap and (not strict or len(assumed) == len(swap)):
        raise UnprovenPairingError(swap_refusal(ckpt, swap), option="--not-swapped")
    if assumed and strict:
        said = "; ".join(f"{a.name} ({a.what}: {a.decides})" for a in assumed)
        raise UnprovenPairingError(
            f"{ckpt.path}: --strict: the EMA pairing rests on what the file cannot prove: "
            f"{said}", option="--not-swapped" if swap or any(
                a.name == "saver_not_swapped" for a in assumed) else "--fit-order")


def warn_assumed(ckpt: Checkpoint, assumed: list[Assumption], stacklevel: int = 3) -> None:
    """The Python API's counterpart of the notes ``ckpt`` prints: one
    :class:`~ckpt_tools.errors.AssumptionWarning` naming the file and each assumption (its
    note, with the statement that decides), where ``assumed`` is not empty; one
    :class:`~ckpt_tools.errors.RecordedStatementWarning` where ``ckpt train``'s run record
    stated what the pairing rests on."""
    _warn_recorded(ckpt, stacklevel + 1)
    from .restored_mark import warn_marked_stated

    warn_marked_stated(ckpt, stacklevel + 1)  # a restore-ema output's statements (r128 F3)
    warned: list[bool] = []
    if assumed:  # once per open checkpoint (ema_map() inside export_weights() too)
        ckpt.memo(("assumption_warned", *(a.note for a in assumed)),
                  lambda: warned.append(True))
    if warned:
        import warnings

        warning = AssumptionWarning(
            f"{ckpt.path}: the EMA pairing assumes what the file cannot prove: "
            + "; ".join(f"{a.name}: {a.note}{python_said(a)}" for a in assumed))
        warning.notes = [a.short for a in assumed]  # the CLI's short notes (ckpt eval)
        warning.assumed = [a.name for a in assumed]  # and its --json "assumed"
        warnings.warn(warning, stacklevel=stacklevel)


def python_said(a: Assumption) -> str:
    """The Python keywords that state ``a`` (from its ``decides``), as a suffix for the
    Python warning, whose ``note`` names the CLI's options (review-16-user-u18 F9).

    Example:
        >>> python_said(FIT_ORDER)
        ' (in Python: fit_order=True; trainable=[...], loop_order=True)'
    """
    said = re.findall(r"\(Python: ([^()]*)\)", a.decides)
    return f" (in Python: {'; '.join(said)})" if said else ""


def _warn_recorded(ckpt: Checkpoint, stacklevel: int) -> None:
    """Warns, once per open checkpoint, where the EMA copies' pairing rests on ckpt train's
    run record (:mod:`~ckpt_tools.run_record`) rather than on the caller: the notes the CLI
    prints for it, which a Python caller would otherwise never see."""
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None or not layout.use_ema or not layout.averages or layout.tf_keras:
        return
    said = (["not_swapped"] if getattr(ckpt, "not_swapped_record", None) else []) + (
        ["fit_order"] if getattr(ckpt, "fit_order_record", None) and fit_order_note(ckpt)
        else [])
    first: list[bool] = []
    if said:
        ckpt.memo(("record_warned",), lambda: first.append(True))
    if not first:
        return
    import warnings

    record = ckpt.not_swapped_record or ckpt.fit_order_record
    what = {"not_swapped": "not saved swapped by SwapEMAWeights (as not_swapped=True states "
                           "it): its EMA copies are read as the averages",
            "fit_order": "its optimizer built with model.trainable_variables (as "
                         "fit_order=True states it): copies of weights of equal shapes are "
                         "paired in that order"}
    warning = RecordedStatementWarning(
        f"{ckpt.path}: the EMA pairing rests on ckpt train's run record {record}, which states "
        f"for this file (bytes unchanged): " + "; ".join(what[s] for s in said))
    warning.stated, warning.record = said, record
    warnings.warn(warning, stacklevel=stacklevel)
