"""What an exported file says about its own values (u16 F14): EMA averages or raw weights.

Once a ``.npz``/``.safetensors`` file leaves the terminal, nothing else tells a converter or a
colleague whether it holds the averages (the default) or the weights as saved (``--raw``).
The record, in each format's own metadata slot, which every reader of the arrays ignores:

* ``"values"``: ``"ema"`` (every tensor holds its EMA value), ``"raw"`` (none does: ``--raw``,
  or ``--allow-missing`` where no average exists) or ``"mixed"`` (some written raw beside the
  averages, e.g. batch-norm statistics no optimizer averages);
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


def checkpoint_record(ckpt, plan: dict[str, str], averaged) -> dict:
    """:func:`values_record` of an export of ``ckpt``, with the statements its EMA pairing
    took (``--not-swapped``, the trainer's run record, ``--fit-order``) and what it assumed."""
    from .keras_assumed import keras_assumptions

    if not averaged:
        return values_record(plan, averaged)
    stated = [name for name in ("not_swapped", "fit_order") if getattr(ckpt, name, False)]
    assumed = [a.name for a in keras_assumptions(ckpt)]
    return values_record(plan, averaged, stated, assumed)
