"""The names ``export`` writes a TF1 checkpoint's keys under where they are not the keys' own,
so that the CLI's ``--grep``/``--include``/``--exclude`` match them as
:func:`~ckpt_tools.export_plan.plan_export` does (review-24-attack-r77 F6): a training
``Saver(ema.variables_to_restore())`` writes ``W`` as ``W/ExponentialMovingAverage``, which
``--raw --keys-are-raw`` exports as ``W``, and ``--include W`` selected nothing, exit 3
(review-25-attack-r84 F5); a Saver of the averages alone stores ``W``'s average as
``W/ExponentialMovingAverage``, which the default export writes as ``W``.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .errors import CheckpointError
from .raw_key_names import raw_written_names
from .restored_raw import restored_raw_holders
from .saved_swaps import raw_holders


def export_names(ckpt: Checkpoint, raw: bool, ema_name: str | None = None) -> dict[str, str]:
    """Key -> the name ``export`` (``raw``: ``export --raw``) writes it under, for the keys
    whose name that is not: with ``raw``, the holders
    :func:`~ckpt_tools.export_plan.plan_export` reads (a swapping Saver's
    :func:`~ckpt_tools.saved_swaps.raw_holders`, else a ``variables_to_restore()`` Saver's
    :func:`~ckpt_tools.restored_raw.restored_raw_holders`); without, each average of a
    variable no key stores (the variable's name). It names; it decides nothing: the export
    refuses what it refuses.

    Returns:
        `dict[str, str]`; ``{}`` for a TF2 checkpoint, without a ``.meta`` under ``raw``, or
        where the graph cannot be read (the export then says why).
    """
    if ckpt.objects is not None:
        return {}
    variables = {v.name: v for v in ckpt.variables_unwarned()}
    if not raw:
        # ... and each key a renamed vtr Saver wrote from its variable under an average's
        # name (model/b/ExponentialMovingAverage, whose role is no average's): its
        # refusal's --exclude 'model/b' leaves it out (s28a)
        return {**raw_written_names(ckpt),
                **{k: v.ema_of for k, v in variables.items()
                   if v.role == R.EMA and v.ema_of and v.ema_of not in variables}}
    if ckpt.meta is None:
        return {}
    try:
        holders = raw_holders(ckpt, variables, ema_name)
        restored = restored_raw_holders(ckpt, variables)
    except CheckpointError:
        return {}
    if restored and (holders is None or set(holders.values()) == set(restored.values())):
        holders = restored
    return {k: name for name, k in (holders or {}).items() if name != k}

