"""What an exported file says about its own values (u16 F14): EMA averages or raw weights.

Once a ``.npz``/``.safetensors`` file leaves the terminal, nothing else tells a converter or a
colleague whether it holds the averages (the default) or the weights as saved (``--raw``).
The record, in each format's own metadata slot, which every reader of the arrays ignores:

* ``"values"``: ``"ema"`` (every tensor holds its EMA value), ``"raw"`` (none does: ``--raw``,
  or ``--allow-missing`` where no average exists), ``"stored"`` (``--raw`` on a file whose own
  weights are the averages if it was saved with its EMA swapped in, which it cannot show:
  :func:`swapped_in`; with ``"weights_are_averages": true`` where ``ckpt restore-ema``
  wrote the file, whose weights then are the averages: :mod:`ckpt_tools.restored_mark`,
  or ``ckpt restore-ema`` / ``ckpt average --ema --bake`` wrote the TF checkpoint:
  :func:`weights_marked`; and ``--raw --no-meta`` over keys named as EMA shadows, where no
  graph is read to tell which keys named as variables a swapping Saver wrote the averages
  into: review-33-attack-r128 F4) or
  ``"mixed"`` (some written raw beside the averages, e.g. batch-norm
  statistics no optimizer averages);
* ``"raw"``: with ``"mixed"``, the names written raw;
* ``"stated"`` / ``"assumed"``: what the EMA pairing rests on, where anything does: the
  statements taken (``averages_only``, ``not_swapped``, ``fit_order``, ``apply_order``…,
  and those the input's own mark says it was written under: :func:`pairing_statements`,
  review-33-attack-r128 F2) and what was assumed unstated (``fit_order``:
  :mod:`ckpt_tools.keras_assumed`).

``.npz``: the archive comment, ``{"ckpt_tools": {...}}`` (``zipfile.ZipFile(p).comment``;
``np.load`` gives the arrays as before). ``.safetensors``: ``__metadata__`` keys of the same
names, whose values are strings as the format requires (lists JSON-encoded). ``.h5``: the
root attribute ``ckpt_tools``, the record as JSON (beside which ``restore-ema --format h5``
adds its mark: :mod:`ckpt_tools.restored_mark`).
"""

from __future__ import annotations

import json

#: A zip archive comment holds at most this many bytes.
ZIP_COMMENT_MAX = 65535


def values_record(plan: dict[str, str], averaged, stated=(), assumed=()) -> dict:
    """The record of an export writing ``plan`` (output name -> source key) of which the
    names ``averaged`` got their EMA values."""
    ema = set(averaged)
    raw = [name for name in plan if name not in ema]
    values = "raw" if not ema else "ema" if not raw else "mixed"
    record: dict[str, object] = {"values": values}
    if values == "mixed":
        record["raw"] = raw
    if ema and stated:
        record["stated"] = list(stated)
    if ema and assumed:
        record["assumed"] = list(assumed)
    return record


def npz_comment(record: dict, widened: dict[str, str]) -> bytes:
    """The archive comment; lists that would not fit a zip comment give their count."""
    doc = {**record, **({"widened": widened} if widened else {})}
    for key in ("raw", "widened"):
        raw = json.dumps({"ckpt_tools": doc}, separators=(",", ":")).encode("utf-8")
        if len(raw) <= ZIP_COMMENT_MAX or key not in doc:
            continue
        doc[f"{key}_count"] = len(doc.pop(key))
    return json.dumps({"ckpt_tools": doc}, separators=(",", ":")).encode("utf-8")


def safetensors_metadata(record: dict) -> dict[str, str]:
    """``__metadata__`` entries: strings only (the format's rule), lists as JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
            for k, v in record.items()}


def swapped_in(ckpt) -> str | None:
    """How the weights a ``--raw`` export writes would be the averages, where the file cannot
    show whether they are (``None`` where it shows they are the raw weights, or has no EMA):
    a Keras 3 file with EMA copies (or that may have them) saved after
    ``SwapEMAWeights(swap_on_epoch=True)``, an EMA optimizer's ``swap_weights()`` before the
    save, a TF1 Saver no graph file records that may have swapped."""
    from .keras_assumed import by_tf_keras, object_pairs
    from .keras_copies_equal import weights_are_copies
    from .restored_mark import MARKED, checkpoint_mark
    from .swap_assumed import saver_assumptions, slot_pairs

    layout = getattr(ckpt.reader, "keras", None)
    if layout is not None and checkpoint_mark(ckpt) is not None:  # they are (u19 F10)
        return MARKED
    if layout is None and weights_marked(ckpt):  # a TF output of ours (r128 F1)
        return weights_marked(ckpt)
    if layout is not None:
        if layout.use_ema is False or by_tf_keras(ckpt):
            return None
        if weights_are_copies(ckpt, layout):  # every copy is a weight: as after fit()
            return "the averages if it was saved after fit() ended or after SwapEMAWeights"
        return "the averages if ModelCheckpoint saved it after SwapEMAWeights"
    if object_pairs(ckpt):
        return "the averages if it was saved after SwapEMAWeights"
    if slot_pairs(ckpt):
        return "the averages if the EMA optimizer's swap_weights() ran before the save"
    if saver_assumptions(ckpt):
        return "the averages if a swapping Saver wrote it"
    return None


def weights_marked(ckpt) -> str | None:
    """What the mark inside the TF checkpoint ``ckpt`` (:mod:`~ckpt_tools.tools_mark`) says
    of its keys named as variables where a writer of ours put the averages there
    (``ckpt restore-ema``, ``ckpt average --ema --bake``: review-33-attack-r128 F1);
    ``None`` where it says nothing of them.

    Returns:
        `str`: words for the summary, naming the writer.
    """
    from .weights_mark import weights_averaged

    by = weights_averaged(getattr(ckpt, "tools_mark", None))
    if by is None:
        return None
    return f"{by} wrote this file: its keys named as variables hold the averages"


def weights_proven(ckpt) -> bool:
    """Whether the mark inside ``ckpt`` says its writer put the averages into every key named
    as a variable that has one (:func:`weights_marked`), under no statement (``stated``:
    ``--averages-only``, ``--no-meta``… decided what they hold) and no filter leaving some
    raw."""
    from .tools_mark import stated_of
    from .weights_mark import raw_weights

    mark = getattr(ckpt, "tools_mark", None)
    return bool(weights_marked(ckpt)) and not raw_weights(mark) and not stated_of(mark)


def checkpoint_record(ckpt, plan: dict[str, str], averaged, raw: bool = False,
                      apply_order: str | None = None, no_meta: bool = False) -> dict:
    """:func:`values_record` of an export of ``ckpt``, with the statements its EMA pairing
    took (:func:`pairing_statements`) and what it assumed; ``raw``: a ``--raw`` export, whose
    values are ``"stored"`` where :func:`swapped_in` (with the statements a mark inside the
    file says its plain names were written under)."""
    from .keras_assumed import keras_assumptions

    if raw and not averaged and swapped_in(ckpt):
        from .restored_mark import MARKED
        from .weights_mark import raw_weights

        said = swapped_in(ckpt)
        marked = said == MARKED or said == weights_marked(ckpt)
        left = set(raw_weights(getattr(ckpt, "tools_mark", None)))
        left = [name for name, src in plan.items() if src in left]
        stated = _written_under(ckpt) if marked else []
        if marked and left:  # --exclude left them raw beside the averages
            return {"values": "mixed", "raw": left, **({"stated": stated} if stated else {})}
        return {"values": "stored", **({"weights_are_averages": True} if marked else {}),
                **({"stated": stated} if stated else {})}
    if not averaged:
        return values_record(plan, averaged)
    stated = pairing_statements(ckpt, plan, apply_order, no_meta)
    assumed = [a.name for a in keras_assumptions(ckpt)]
    return values_record(plan, averaged, stated, assumed)


#: The statements a mark inside a checkpoint, or restore-ema's record beside it, can say its
#: input was read under (:mod:`~ckpt_tools.tools_mark`, :mod:`~ckpt_tools.restored_record`).
_MARKED = ("averages_only", "saver_def_wrote", "not_swapped", "no_meta")


def _written_under(ckpt) -> list[str]:
    """The statements the file ``ckpt`` says it was written under: its mark's ``stated``,
    ``--averages-only`` where restore-ema's record beside it states it, and those restore-ema's
    mark on a Keras file records (``not_swapped``…: review-33-attack-r128 F3)."""
    from .restored_mark import checkpoint_mark
    from .tools_mark import stated_of

    said = stated_of(getattr(ckpt, "tools_mark", None))
    record = getattr(ckpt, "restored_record", None)
    recorded = record[1] if record and isinstance(record[1], dict) else {}
    mark = checkpoint_mark(ckpt)
    return list(dict.fromkeys([k for k in _MARKED if said.get(k) or recorded.get(k)]
                              + list(mark.stated if mark is not None else ())))


def pairing_statements(ckpt, plan: dict[str, str], apply_order: str | None = None,
                       no_meta: bool = False) -> list[str]:
    """What an export of ``ckpt`` writing ``plan`` (output name -> source key) pairs its
    averages on besides what the file proves (review-33-attack-r128 F2): ``averages_only``
    where ``--averages-only`` read keys of ``plan`` as averages, ``saver_def_wrote``,
    ``not_swapped``, ``fit_order``, ``apply_order`` (``--apply-order`` given), the Keras
    statements (``use_ema``, ``optimizer``, ``trainable``), ``no_meta`` (``--no-meta`` over a
    graph or mark that decides or doubts the names), and those a mark inside the file (or
    restore-ema's record beside it) says it was written under (:func:`_written_under`).

    Returns:
        `list[str]`: the statements' names, each once (``[]``: none).
    """
    from .restored_record import recorded_statements

    stated = [k for k in ("averages_only", "saver_def_wrote")
              if k in recorded_statements(ckpt, set(plan.values()))]
    stated += [k for k in ("not_swapped", "fit_order") if getattr(ckpt, k, False)]
    stated += ["apply_order"] if apply_order else []
    layout = getattr(ckpt.reader, "keras", None)
    if layout is not None:
        stated += ["use_ema"] if layout.ema_source == "stated" else []
        stated += ["optimizer"] if getattr(layout, "stated_optimizer", None) else []
        stated += ["trainable"] if getattr(layout, "trainable_stated", False) else []
    if no_meta:
        from .no_meta_mark import silenced

        stated += ["no_meta"] if silenced(ckpt.with_meta(False)) else []
    stated += _written_under(ckpt)
    return list(dict.fromkeys(stated))
