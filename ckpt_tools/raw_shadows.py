"""TF1 keys named as averages that hold their variables' raw values.

A training script that saves with ``tf.train.Saver(ema.variables_to_restore())`` (the
evaluation mapping) writes each model variable ``w`` under its average's name,
``w/ExponentialMovingAverage``, and no average at all. The keys look exactly like a trainer's
that saved its shadows; only the ``.meta``'s save op tells them apart (see
:mod:`ckpt_tools.formats.meta_saver`).
"""

from __future__ import annotations

import re

from .checkpoint import Checkpoint
from .errors import EmaError
from .formats.meta_saver import saved_sources


def _saved_from(sources: list[str] | None, target: str) -> bool:
    """Whether every tensor saved under a key came from variable ``target`` (or its parts)."""
    part = re.compile(re.escape(target) + r"/part_\d+")
    return bool(sources) and all(s == target or part.fullmatch(s) for s in sources)


def refuse_raw_shadows(ckpt: Checkpoint, pairs) -> None:
    """Refuses pairs ``(average key, variable key)`` whose average key the ``.meta``'s save op
    wrote from the variable itself.

    Raises:
        EmaError: naming the keys, what wrote them and what the checkpoint holds (exit 6).
    """
    meta = ckpt.location.meta_path
    stored = ckpt.entries()
    # Where the variable itself is stored beside its average the trainer saved both: only
    # an average without its variable (what that Saver writes) sends us to the graph.
    averaged = [(s, t) for s, t in pairs if s != t and t not in stored]
    if not meta or not averaged:
        return
    sources = ckpt.memo("meta_saved_sources", lambda: saved_sources(meta))
    if not sources:
        return
    raw = [(s, t) for s, t in averaged if _saved_from(sources.get(s), t)]
    if raw:
        s, t = raw[0]
        raise EmaError(
            f"{ckpt.path}: {len(raw)} key(s) named as averages hold their variables' raw "
            f"values, e.g. {s}: the .meta's saver wrote it from {t} itself, as a Saver built "
            "from ema.variables_to_restore() does (it maps each average's name to its "
            "variable), so the checkpoint holds no average of them: that Saver restores the "
            "raw weights it holds into the model (tf.train.load_checkpoint reads them by "
            "these names); to keep the averages, train with a Saver of all variables "
            "(tf.train.Saver()) and use variables_to_restore() only to evaluate")
