"""Why a weight keeps its raw value beside averaged ones, where the file itself says so.

A Keras optimizer keeps EMA copies only of the weights it was built with. A ``.keras``
archive's ``config.json`` records which layers were frozen (``trainable: false``) and each
layer's class, whose code creates some variables non-trainable (``Normalization``'s ``mean``
and ``variance``): such weights staying raw is what Keras evaluates them with, so commands
say so in a note instead of warning. Weights nothing explains keep the warning.
"""

from __future__ import annotations

#: ``config.json`` records the weight's layer ``trainable: false``.
FROZEN = "frozen"
#: The weight's layer class creates it ``trainable=False`` (as config.json records the layer).
NON_TRAINABLE = "non_trainable"

_SAID = {FROZEN: "in layers it records frozen (trainable: false)",
         NON_TRAINABLE: "created with trainable=False by their layer's class"}


def expected_raw(ckpt, keys) -> dict[str, str]:
    """The weights of ``keys`` (checkpoint keys without an average) whose raw value the
    file's ``config.json`` explains.

    Returns:
        `dict[str, str]`: key -> :data:`FROZEN` or :data:`NON_TRAINABLE`; empty for files
        without a Keras ``config.json`` (TF checkpoints, bare ``.weights.h5``) and for weights
        the caller's ``--trainable`` left out that config.json does not record frozen (that
        is a statement, not the file's record).
    """
    layout = getattr(getattr(ckpt, "reader", None), "keras", None)
    if layout is None or not layout.configured:
        return {}
    frozen = set(layout.frozen) | set(getattr(layout, "frozen_left_out", ()))
    fixed = set(getattr(layout, "untrainable", ()))
    found = {}
    for key in keys:
        if layout.trainable.get(key) is not False:
            continue
        if key in frozen:
            found[key] = FROZEN
        elif key in fixed:
            found[key] = NON_TRAINABLE
    return found


def expected_raw_note(reasons: dict[str, str], shown) -> str | None:
    """The note for weights :func:`expected_raw` explains (``shown``: key -> display name),
    or None where there are none."""
    if not reasons:
        return None
    parts = []
    for why, said in _SAID.items():
        names = [shown(k) for k, r in reasons.items() if r == why]
        if names:
            parts.append(f"{len(names)} {said}: {', '.join(names[:5])}"
                         + (" ..." if len(names) > 5 else ""))
    return (f"{len(reasons)} weight(s) have no EMA copy and keep their raw values, as "
            f"config.json explains: {'; '.join(parts)}")
