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
  :func:`weights_marked`) or
  ``"mixed"`` (some written raw beside the averages, e.g. batch-norm
  statistics no optimizer averages);
* ``"raw"``: with ``"mixed"``, the names written raw;
* ``"stated"`` / ``"assumed"``: what the EMA pairing rests on (``not_swapped``, ``fit_order``:
  :mod:`ckpt_tools.keras_assumed`), where anything does.

``.npz``: the archive comment, ``{"ckpt_tools": {...}}`` (``zipfile.ZipFile(p).comment``;
``np.load`` gives the arrays as before). ``.safetensors``: ``__metadata__`` keys of the same
names, whose values are strings as the format requires (lists JSON-encoded).
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


def checkpoint_record(ckpt, plan: dict[str, str], averaged, raw: bool = False) -> dict:
    """:func:`values_record` of an export of ``ckpt``, with the statements its EMA pairing
    took (``--not-swapped``, the trainer's run record, ``--fit-order``) and what it assumed;
    ``raw``: a ``--raw`` export, whose values are ``"stored"`` where :func:`swapped_in`."""
    from .keras_assumed import keras_assumptions

    if raw and not averaged and swapped_in(ckpt):
        from .restored_mark import MARKED
        from .weights_mark import raw_weights

        said = swapped_in(ckpt)
        marked = said == MARKED or said == weights_marked(ckpt)
        left = set(raw_weights(getattr(ckpt, "tools_mark", None)))
        left = [name for name, src in plan.items() if src in left]
        if marked and left:  # --exclude left them raw beside the averages
            return {"values": "mixed", "raw": left}
        return {"values": "stored", **({"weights_are_averages": True} if marked else {})}
    if not averaged:
        return values_record(plan, averaged)
    stated = [name for name in ("not_swapped", "fit_order") if getattr(ckpt, name, False)]
    assumed = [a.name for a in keras_assumptions(ckpt)]
    return values_record(plan, averaged, stated, assumed)
