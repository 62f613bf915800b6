"""The names the CLI's filters match a TF1 key under where a renamed vtr Saver wrote it from
a variable no key stores: ``Saver({"model/" + k: v for k, v in
ema.variables_to_restore().items()})`` writes ``c`` as ``model/c/ExponentialMovingAverage``,
which a refusal names as ``--exclude 'model/c'`` (review-28-attack-r106 F2). Kept apart from
:mod:`.export_names` so that ``restore-ema`` and ``map`` import no export module.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .errors import CheckpointError
from .raw_named import raw_named_keys


def raw_written_names(ckpt: Checkpoint) -> dict[str, str]:
    """Key -> the variable a renamed vtr Saver wrote it from, for each key
    :func:`~ckpt_tools.raw_named.raw_named_keys` reads whose variable no key stores
    (``model/c/ExponentialMovingAverage`` -> ``model/c``): the name its refusal's
    ``--exclude 'model/c'`` gives, which ``export``, ``restore-ema`` and ``map`` all match
    (review-28-attack-r106 F2: only export did, restore-ema's and map's exit 3 said it
    matched no variable).

    Returns:
        `dict[str, str]`; ``{}`` for a TF2 checkpoint, without a ``.meta``, or where the
        graph cannot be read (the command then says why).
    """
    if ckpt.objects is not None or ckpt.meta is None:
        return {}
    try:
        held = raw_named_keys(ckpt)
    except CheckpointError:
        return {}
    stored = {v.name for v in ckpt.variables_unwarned()}
    return {k: t for k, t in held.items() if t not in stored}
