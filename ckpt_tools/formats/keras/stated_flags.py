"""A ``--trainable`` that contradicts the flags config.json records (review-14-attack-r26 F4).

config.json records each layer's ``trainable`` flag when the file was saved, not when the
optimizer was built: a layer unfrozen since (gradual unfreezing) is trainable in config.json
but was not built with, one frozen since (after training) the reverse. So neither a listed
frozen layer nor a left-out trainable one alone is a contradiction. A statement that does
both (lists a weight config.json records frozen and leaves out one it records trainable) is
what swapping two layers of the same shapes by mistake looks like: it is taken, with a note
naming both (the averages land on the frozen weight, the trainable one stays raw).
"""

from __future__ import annotations


def contradicted(lay, stated: list[str], entries: dict) -> tuple[str, str] | None:
    """``(a stated weight config.json records frozen, a left-out one it records trainable)``
    of the same shape and dtype, or ``None``. Call before the statement replaces the flags."""
    if not lay.configured or not lay.frozen:
        return None
    said = set(stated)
    frozen = [k for k in stated if k in set(lay.frozen)]
    left = [k for k in lay.model if lay.trainable.get(k) and k not in said]
    def spec(k):
        e = entries.get(k)
        return None if e is None else (tuple(e.shape), e.dtype)

    for a in frozen:
        b = next((k for k in left if spec(k) is not None and spec(k) == spec(a)), None)
        if b is not None:
            return a, b
    return None


def note(lay) -> str | None:
    """The CLI note for :func:`contradicted`'s pair, kept in ``lay.stated_flags``."""
    pair = getattr(lay, "stated_flags", None)
    if not pair:
        return None
    a, b = (lay.paths.get(k, k) for k in pair)
    return (f"note: --trainable lists {a}, which config.json records frozen (trainable=False) "
            f"when the file was saved, and leaves out {b}, which it records trainable: right "
            f"only if {a}'s layer was frozen and {b}'s unfrozen after the optimizer was built; "
            f"otherwise {a} gets another weight's average and {b} stays raw")
