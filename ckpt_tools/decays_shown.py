"""What a TF1 ``.meta``'s graph shows of the decays of averages written in
``ExponentialMovingAverage.apply()``'s form whose decay is not one ``apply()`` builds itself
(:attr:`~ckpt_tools.formats.meta_update_ops.UpdateOps.other_decay`), for the refusal that
asks for ``--ema-name`` there: the decay each such ``apply()`` reads, as
:attr:`~ckpt_tools.formats.meta_update_ops.UpdateOps.decays` spells it (``tensor 'dc5'``,
``variable 'decay'``, ``min(0.5, (1 + n) / (10 + n)) with n = tensor 'Cast'`` for a float32
``num_updates``), so the refusal says what the file shows rather than a rule of thumb
(note s29f: it said ``apply()`` builds "any decay with num_updates" itself, false for a
float32 counter).
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .meta_shadows import update_ops_of

_SHOWN = 3  # apply() calls named at most
# why a tf.while_loop body's decay is not read (Branch.loop, note s29f)
LOOPED = ("a decay in a tf.while_loop body, whose arguments are each iteration's values, "
           "so the decay or num_updates counter passed in names no node of the graph")


def other_decays_shown(ckpt: Checkpoint, averages: set[str]) -> str:
    """The decays the ``.meta``'s graph shows for the ``apply()`` calls writing ``averages``
    (keys) with a decay not its own: ``"; the .meta shows the updates of 'fast' reading decay
    min(0.5, (1 + n) / (10 + n)) with n = tensor 'Cast'"`` (at most three calls, a decay it
    does not read said so).

    Returns:
        `str`: ``""`` where no graph is read or no such ``apply()`` writes ``averages``.
    """
    read = update_ops_of(ckpt.meta) if averages else None
    if read is None:
        return ""
    ops, key = read
    labels = sorted({ops.applies.get(s, scope) for s, (_v, scope) in ops.averages.items()
                     if scope in ops.other_decay and key(s) in averages})
    if not labels:
        return ""
    said = [f"the updates of {label!r} reading "
            + (f"decay {ops.decays[label]}" if ops.decays.get(label) else LOOPED
               if label in ops.looped else "a decay it does not show")
            for label in labels[:_SHOWN]]
    more = f" and {len(labels) - _SHOWN} more" if len(labels) > _SHOWN else ""
    return "; the .meta shows " + ", ".join(said) + more
