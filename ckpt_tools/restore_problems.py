"""What :mod:`.restore` says when a graph's variables cannot be restored: one problem line
per variable, in the file's own terms, and what decides."""

from __future__ import annotations

from .checkpoint import Checkpoint


def no_average_line(ckpt: Checkpoint, key: str, ema_name: str, owner: str | None = None) -> str:
    """A problem line for ``key``, which has no average, in the file's own terms: a TF1 Saver
    names the shadow after its variable (``owner``: the variable whose average that name is,
    when ``ema.apply()`` ran inside a ``variable_scope``); a TF2 checkpoint holds what was
    saved of ``ema.average(v)``."""
    if ckpt.objects is None and owner not in (None, key):
        return f"{key} (no shadow of its own; {key}/{ema_name} is {owner}'s average)"
    if ckpt.objects is None:
        return f"{key} (no shadow {key}/{ema_name})"
    return (f"{key.removesuffix('/.ATTRIBUTES/VARIABLE_VALUE')} (no average: its "
            "ema.average(v) is not saved)")


def restore_advice(problems: list[str]) -> str:
    """What decides, for the problems :func:`_plan` found."""
    if any("(no shadow " in p for p in problems):
        return ("; pass allow_missing=True to restore their raw values, or var_list= without "
                "them")
    if any("(no average: " in p for p in problems):
        return ("; pass allow_missing=True to restore their raw values, or save every "
                "averaged variable's ema.average(v) (tf.train.Checkpoint(model=model, "
                "ema=[ema.average(v) for v in variables]))")
    if any("(not in the checkpoint" in p for p in problems):
        return "; pass var_list= with the variables the checkpoint holds"
    return ""


def entry_mismatch(ckpt: Checkpoint, key: str, src: str, shape, dtype_name: str) -> str | None:
    entry = ckpt.entry(src)
    if tuple(entry.shape) != tuple(shape) or entry.dtype_name != dtype_name:
        return (f"{key}: checkpoint {src!r} is {entry.dtype_name}{list(entry.shape)} but the "
                f"variable is {dtype_name}{list(shape)}")
    return None
