"""TF1 keys of role ``other`` (or ``tensor_average``) that a ``.meta``'s collections pair as
averages all the same.

The ``.meta``'s update ops make a key named as an average ``other`` where an op of the graph
writes its variable otherwise than ``ema.apply()`` would (a batch norm statistic's update, a
hand-written step: :func:`~ckpt_tools.meta_shadows.update_op_written`); the map's
``variables_to_restore()`` over the graph's collections (:func:`~ckpt_tools.ema_names.
from_meta`) still pairs ``<variable>/ExponentialMovingAverage`` with the variable. Where that
variable is stored under no key of its own, the key may be what an evaluation graph's
``Saver(ema.variables_to_restore())`` wrote from the variable itself: the raw value it held,
if a plain Saver restored the raw weights (review-25-attack-r88 F2). Such pairs get the save
op's check of every average whose variable is not stored
(:func:`~ckpt_tools.raw_shadows.settle_lone_averages`), never none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from . import roles as R
from .checkpoint import Checkpoint
from .variable import Variable


def other_paired(ckpt: Checkpoint, variables: Mapping[str, Variable],
                 pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Returns average key -> variable key for each of ``pairs`` (``(average key, variable
    key)``) whose average is a stored TF1 key of role ``other`` or ``tensor_average``
    (``variables``: the checkpoint's by key) and whose variable the checkpoint does not
    store; ``{}`` for TF2 and Keras files. An evaluation re-save of an EMA named with a scope
    (``name="tower/ExponentialMovingAverage"``) holds ``fc/w/tower/ExponentialMovingAverage``,
    which its name alone reads as the average of a tensor ``fc/w/tower``; under ``--ema-name
    tower/ExponentialMovingAverage`` the graph's collections pair it with ``fc/w``, and where
    that Saver restored the raw weights it was exported as ``fc/w``'s average, exit 0 (s33a)."""
    if ckpt.objects is not None:
        return {}
    stored = ckpt.entries()
    return {s: t for s, t in pairs if s != t and t not in stored and s in variables
            and variables[s].role in (R.OTHER, R.TENSOR_AVERAGE)}
