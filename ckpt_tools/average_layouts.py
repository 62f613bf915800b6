"""Averaging across the resume point of a ``ckpt train --api tf2`` run resumed across 016f6d0.

Before 016f6d0 ``ckpt train --api tf2`` kept its EMA object's averages in a mirror of the
model's paths (``ema/conv1/weights``); since then in a dict keyed by path, which
``tf.train.Checkpoint`` escapes (``ema/conv1.Sweights``). A run saved before and resumed
after it (:mod:`ckpt_tools.train.tf2_resume`) holds both: the checkpoints before the resume in
the older layout, those after in the current one. ``ckpt average`` matches inputs key by key,
so it refused them as if the older ones held no averages (review-31-attack-r113 F3); this
module names the real cause and the remedy instead (averages are never matched across keys
here: each layout is averaged among its own checkpoints).
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .errors import EmaError

#: the suffix of an object-based checkpoint's variable value key
VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
#: keys beside the averages that every ``ckpt train --api tf2`` checkpoint holds (its step and
#: loss averages), in both layouts
TRAIN_KEYS = ("step" + VALUE, "losses/cross_entropy/avg" + VALUE)
OLDER, CURRENT = "before 016f6d0", "current"


def escaped(path: str) -> str:
    """Returns how ``tf.train.Checkpoint`` names the dict key ``path`` in its object graph
    (slashes as ``.S``, dots doubled)."""
    return path.replace(".", "..").replace("/", ".S")


def _current_key(key: str) -> str | None:
    """The current layout's key of the older layout's average ``key`` (``ema/conv1/weights``
    -> ``ema/conv1.Sweights``), or None for a key that is not below ``ema/``."""
    if not (key.startswith("ema/") and key.endswith(VALUE)):
        return None
    return "ema/" + escaped(key[len("ema/"):-len(VALUE)]) + VALUE


def layouts(ckpt: Checkpoint, newest: Checkpoint) -> tuple[str, str] | None:
    """Whether ``ckpt`` and ``newest`` are two ``ckpt train --api tf2`` checkpoints whose keys
    differ only as its two layouts of the averages do.

    Returns:
        (``ckpt``'s layout, ``newest``'s layout), :data:`OLDER` and :data:`CURRENT` in some
        order; None where their keys are the same or differ otherwise (or either lacks the
        run's own keys).
    """
    have, want = set(ckpt.entries()), set(newest.entries())
    if not all(k in have and k in want for k in TRAIN_KEYS):
        return None
    only_have, only_want = have - want, want - have
    if not only_have or not only_want:
        return None
    for older, current, order in ((only_have, only_want, (OLDER, CURRENT)),
                                  (only_want, only_have, (CURRENT, OLDER))):
        mapped = {_current_key(k) for k in older}
        if None not in mapped and len(mapped) == len(older) and mapped == current:
            return order
    return None


def _named(ckpts: list[Checkpoint]) -> str:
    shown = ", ".join(c.path for c in ckpts[:3])
    return shown + (f" and {len(ckpts) - 3} more" if len(ckpts) > 3 else "")


def refuse_resumed_layouts(ckpts: list[Checkpoint]) -> None:
    """Refuses inputs that keep ``ckpt train``'s averages in its two layouts (a run resumed
    across 016f6d0), naming the inputs of each layout and what to do. It runs before the
    newest input is chosen (as the other "different models" checks do), so it names each
    layout's inputs as given, not one newest of each.

    Args:
        ckpts: the inputs, as given.

    Raises:
        EmaError: some input keeps the averages in the other layout than the last one.
    """
    last = ckpts[-1]
    found = [(ckpt, pair) for ckpt in ckpts[:-1] if (pair := layouts(ckpt, last))]
    if not found:
        return
    theirs, mine = found[0][1]
    keys = set(last.entries())
    groups = {mine: [c for c in ckpts if set(c.entries()) == keys],
              theirs: [c for c, _pair in found]}
    old, new = groups[OLDER], groups[CURRENT]
    example = sorted(set(old[0].entries()) - set(new[0].entries()))[0]
    raise EmaError(
        f"{old[0].path} and {new[0].path} keep the EMA averages under different keys "
        f"({example[:-len(VALUE)]} in {old[0].path}, {_current_key(example)[:-len(VALUE)]} in "
        f"{new[0].path}): ckpt train --api tf2's layouts before and after 016f6d0 (the run was "
        f"resumed across versions), and averages are matched by key; average the checkpoints "
        f"of each layout among themselves (the older layout: {_named(old)}; the current: "
        f"{_named(new)}); export and eval take either (the older with "
        f"--ema-name ExponentialMovingAverage)")
