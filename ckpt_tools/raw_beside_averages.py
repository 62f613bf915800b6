"""Keys named as variables that hold their variables' RAW values beside keys named as
variables that hold their AVERAGES, as a TF1 ``.meta``'s save op records them.

``Saver({"w": w, "b": ema.average(b)})`` saves ``w`` raw (``ema.apply()`` averaged it too,
its average unsaved) and ``b``'s average under ``b``. The default export refused it saying
the keys named as variables hold their averages and that ``--raw`` gives "the averages";
``--raw`` then wrote raw ``w`` beside ``b``'s average, exit 0, its ``--json`` listing both as
raw (review-25-attack-r88 F3). :func:`raw_beside_own_averages` names the raw ones, so the
refusals say what each key holds and ``--raw`` refuses the mix.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .ema_updates import shadow_owners
from .save_op import written_sources
from .saved_keys import PART, held_variable
from .weight_keys_averaged import averages_under_variable_names
from .wording import agreeing, counted


def raw_beside_own_averages(ckpt: Checkpoint) -> dict[str, str]:
    """Key -> the shadow ``ema.apply()`` writes for the variable it holds, for each key the
    ``.meta``'s save op wrote from the variable it is named as (its raw value: ``w`` from
    ``w``), where the graph's update ops average that variable, and where some other key
    named as a variable holds that variable's average
    (:func:`~ckpt_tools.weight_keys_averaged.averages_under_variable_names`: ``b`` from
    ``b/ExponentialMovingAverage``).

    Returns:
        `dict` key -> shadow (op name, whole: no ``/part_N``); ``{}`` where no key holds its
        variable's average under the variable's name, or none beside it holds an averaged
        variable raw, or nothing records the save op or the update ops.
    """
    named = averages_under_variable_names(ckpt)
    if not named:
        return {}
    sources = written_sources(ckpt) or {}
    shadow_of: dict[str, str] = {}
    for shadow, var in sorted((shadow_owners(ckpt) or {}).items()):
        shadow_of.setdefault(PART.sub("", var), PART.sub("", shadow))
    out = {}
    for key, src in sorted(sources.items()):
        held = held_variable(src) if src else None
        if key not in named and held == key and key in shadow_of:
            out[key] = shadow_of[key]
    return out


def saved_under(ckpt: Checkpoint, shadow: str) -> str | None:
    """The key the save op wrote ``shadow`` (whole) under, or ``None`` where it wrote it
    under none (the average is not in the file)."""
    for key, src in sorted((written_sources(ckpt) or {}).items()):
        if src and held_variable(src) == shadow:
            return key
    return None


def mixed_said(ckpt: Checkpoint) -> str:
    """What the keys of such a mixed Saver hold, for a refusal: ``"key b holds b's average
    b/ExponentialMovingAverage while key w holds w's raw value (its average
    w/ExponentialMovingAverage, which ema.apply() writes, is not saved)"`` with counts where
    there are more; ``""`` where :func:`raw_beside_own_averages` finds none."""
    raw = raw_beside_own_averages(ckpt)
    if not raw:
        return ""
    named = averages_under_variable_names(ckpt)
    a, h = next(iter(sorted(named.items())))
    r, s = next(iter(raw.items()))
    where = saved_under(ckpt, s)
    return (f"{counted(len(named), 'key')} named as variables "
            f"{agreeing(len(named), 'holds', 'hold')} those variables' averages (e.g. "
            f"key {a} holds {a}'s average {h}) while {counted(len(raw), 'key')} named as variables "
            f"averaged by ema.apply() hold their raw values (e.g. key {r} holds {r}'s raw "
            "value; its average " + s + (f" is saved under {where}" if where else
                                          ", which ema.apply() writes, is not saved")
            + f"), as a Saver({{'{r}': {r}, '{a}': ema.average({a})}}) writes them")
