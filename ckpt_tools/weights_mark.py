"""What a mark inside a TF checkpoint (:mod:`~ckpt_tools.tools_mark`) says of its keys named
as variables: ``"weights"``, where the writer put the averages there (``ckpt restore-ema``,
``ckpt average --ema --bake``, an average of such outputs). A TF checkpoint shows it nowhere
else: ``ckpt average`` of such an output with a raw checkpoint of its run averaged averages
with raw weights, and ``export --raw`` labelled the averages raw (review-33-attack-r128 F1).
A mark without it (every mark written before) says nothing of them: read as before.
"""

from __future__ import annotations

from .tools_mark import empty_mark

__all__ = ["raw_weights", "weights_averaged", "weights_ema_name", "with_weights"]


def with_weights(doc: dict | None, by: str, raw=(), ema_name: str | None = None) -> dict:
    """``doc`` (a mark about to be written, ``None``: none) saying that its writer ``by``
    wrote averages into the keys named as the variables, except ``raw`` (keys named as
    variables left as stored although an average of theirs is stored: ``--exclude``), and,
    where known, the EMA object's name they are the averages of (``ema_name``: two objects'
    outputs hold different averages). Marks joined from inputs (:func:`merged`) never carry
    it: each writer says what it wrote.

    Returns:
        `dict`, a new mark.
    """
    out = dict(doc) if doc else empty_mark()
    out["weights"] = {"averages": True, "by": by, **({"raw": sorted(raw)} if raw else {}),
                      **({"ema_name": ema_name} if ema_name else {})}
    return out


def weights_ema_name(doc: dict | None) -> str | None:
    """The EMA object's name whose averages the marked output's plain names hold
    (:func:`with_weights`), or ``None`` where it does not say."""
    w = (doc or {}).get("weights")
    name = w.get("ema_name") if isinstance(w, dict) else None
    return name if isinstance(name, str) else None


def weights_averaged(doc: dict | None) -> str | None:
    """Who wrote averages into the keys named as the variables of the checkpoint whose mark
    is ``doc`` (:func:`with_weights`): the writing command, or ``None`` where the mark says
    nothing of them (no mark, or one written by main before it said so)."""
    w = (doc or {}).get("weights")
    return w.get("by", "ckpt_tools") if isinstance(w, dict) and w.get("averages") else None


def raw_weights(doc: dict | None) -> list[str]:
    """The keys named as variables a marked output left raw (:func:`with_weights`)."""
    w = (doc or {}).get("weights")
    return list(w.get("raw") or []) if isinstance(w, dict) else []
