"""Refusals of the statements ``open_checkpoint`` takes (``use_ema``, ``optimizer``,
``not_swapped``, ``fit_order``, ``averages_only``, ``keys_are_raw``) where the file cannot
bear them (exit 2), and the statements a record beside the file makes for the caller
(:func:`vouched_statements`).

A statement about a file that has nothing it could decide would be a silent no-op the user
believes in; each refusal says why it cannot apply and to omit it.
"""

from __future__ import annotations

from .errors import EmaError, OptionError
from .formats._io import is_url
from .formats.objgraph import has_swappable_averages

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from .formats import Reader
    from .formats.objgraph import ObjectGraph


def refuse_tf_statements(prefix: str, keras, *, use_ema: bool | None,
                         stated_optimizer) -> None:
    """Refuses ``optimizer`` and ``use_ema`` for a TensorFlow checkpoint (``keras`` is the
    reader's Keras layout, ``None`` for one): only Keras files may not record them.

    Raises:
        OptionError: either is given and ``keras`` is ``None``.
    """
    if keras is not None:
        return
    if stated_optimizer:
        raise OptionError(
            f"{prefix}: --optimizer (Python: optimizer=) decides only for a "
            "bare Keras .weights.h5, which records the optimizer only by its name; "
            "this TensorFlow checkpoint records its variables by name: omit it")
    if use_ema is not None:
        given = "--use-ema" if use_ema else "--no-use-ema"
        raise OptionError(
            f"{prefix}: {given} (Python: use_ema=) decides only for Keras "
            "files (.keras, .weights.h5, .h5), which may not record it; this "
            "TensorFlow checkpoint's names and object graph record what it would "
            "state, so it cannot apply: omit it")


def refuse_unfit_statements(prefix: str, reader: Reader, objects: ObjectGraph | None,
                            meta_source: str | None, *, not_swapped: bool, fit_order: bool,
                            averages_only: bool, doubted: bool = False,
                            keys_are_raw: bool = False) -> None:
    """Refuses ``not_swapped``, ``fit_order`` and ``averages_only`` where the checkpoint
    holds nothing they decide. ``meta_source`` is the graph file read (``None`` if none);
    ``doubted``: saved without one, beside other checkpoints' graphs whose save op writes its
    keys otherwise than their names say (``meta_doubt``), which ``not_swapped`` then decides.

    Raises:
        OptionError: ``not_swapped`` for a TF checkpoint with no swappable averages and a
            recorded save op; ``fit_order`` for a TF checkpoint; ``averages_only`` for a
            TF2 or Keras one, and so ``keys_are_raw``, or with ``averages_only``.
        EmaError: ``fit_order`` for a legacy Keras file whose copies' names show another
            order.
    """
    if not_swapped and reader.keras is None and not doubted and \
            not has_swappable_averages(objects) and \
            not saver_unrecorded(objects, meta_source, reader.entries):
        raise OptionError(
            f"{prefix}: --not-swapped (Python: not_swapped=) states that a Keras 3 "
            "optimizer's EMA copies (SwapEMAWeights(swap_on_epoch=True)) or averages kept "
            "as optimizer slots (an EMA optimizer's swap_weights()) were not saved swapped "
            "with their variables, or that a TF1 Saver no .meta save op records did not "
            "swap them; this TensorFlow checkpoint holds none of these: omit it")
    if fit_order and reader.keras is None:
        raise OptionError(
            f"{prefix}: --fit-order (Python: fit_order=) states the order a Keras "
            "file's (.keras, .weights.h5, .h5) EMA copies were built in; this is a "
            "TensorFlow checkpoint: omit it (for a tf_keras model's TF-format save, "
            "--apply-order tracked states fit()'s order)")
    if fit_order and getattr(reader.keras, "kind", None) == "legacy":
        from .formats.keras.legacy_layout import refuse_named_order

        try:  # fit() builds in the model's order: the copies' names may show another
            refuse_named_order(reader.keras, None, "--fit-order (fit_order=)")
        except EmaError as exc:
            raise EmaError(f"{prefix}: {exc}") from None
    if averages_only and (objects is not None or reader.keras is not None):
        raise OptionError(
            f"{prefix}: --averages-only (Python: averages_only=) states that a TF1 "
            "Saver's keys named as averages hold averages; this checkpoint records its "
            "averages' variables (an object graph or a Keras file): omit it")
    if keys_are_raw and averages_only:
        raise OptionError(
            f"{prefix}: --keys-are-raw (Python: keys_are_raw=) states that a TF1 Saver's keys "
            "named as averages hold the raw weights, --averages-only (averages_only=) that "
            "they hold averages: give one")
    if keys_are_raw and (objects is not None or reader.keras is not None):
        raise OptionError(
            f"{prefix}: --keys-are-raw (Python: keys_are_raw=) states that a TF1 Saver's keys "
            "named as averages hold the raw weights; this checkpoint records its averages' "
            "variables (an object graph or a Keras file): omit it")


def saver_unrecorded(objects: ObjectGraph | None, meta_source: str | None, stored) -> bool:
    """Returns whether a TF1 checkpoint's graph file (``meta_source``) records no save op,
    or several that write its keys (``stored``) from different variables: several graphs', or
    several Savers' of one ``.meta`` (:func:`~ckpt_tools.formats.meta_saver.writing_save_ops`)
    (``--not-swapped`` states that its keys hold their names' variables: ``saver_not_swapped``;
    :func:`~ckpt_tools.save_op.crossed_keys`). ``False`` for a TF2 checkpoint or without
    a graph file."""
    if objects is not None or meta_source is None:
        return False
    from .formats.meta_saver import writing_save_ops

    fits, recorded = writing_save_ops(meta_source, stored)  # a .meta's every Saver (r85 F2)
    return not recorded or any(f != fits[0] for f in fits)


def vouched_statements(prefix: str, keras, *, not_swapped: bool, fit_order: bool,
                       trainable) -> tuple[str | None, str | None]:
    """What ckpt train's run record beside a Keras file it wrote (and whose bytes are still
    the recorded ones: :mod:`~ckpt_tools.run_record`) states where the caller did not
    (``keras`` is the reader's Keras layout, ``None`` for a TensorFlow checkpoint).

    Returns:
        ``(record, record)``: the record's path where it states ``not_swapped`` (the caller
        did not), and where it states ``fit_order`` (the caller stated neither it nor
        another order, ``trainable``); each ``None`` otherwise.
    """
    if (not_swapped and fit_order) or keras is None or is_url(prefix):
        return None, None
    from .run_record import vouching_record

    vouched = vouching_record(prefix)
    if not vouched:
        return None, None
    return (None if not_swapped else vouched[0],
            vouched[0] if vouched[1]["fit_order"] and not fit_order and not trainable else None)
