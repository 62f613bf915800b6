"""TF1 variables of a ``.meta``'s training graph that nothing writes, named like an average
(review-18-attack-r39 F8, TF1 form).

A pruning mask ``dense/kernel/mask`` beside ``dense/kernel`` makes ``mask`` read as an EMA
name; a causal-mask buffer ``attn/mask`` (no ``attn`` stored) was then read as an average of a
tensor and left out of every export, and the pruning mask, which no ``AssignMovingAvg`` op
writes beside its variable's true average, as an optimizer's slot, dropped with no word. Where
the graph runs ``ema.apply()`` (its ``AssignMovingAvg`` updates are read) and no op at all
writes such a variable (no update, no optimizer's ``Apply*``, no assign: only its initializer
and the Saver's restore), it is no average and no optimizer's state but a frozen variable of
the model, which ``variables_to_restore()`` restores raw: a weight.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import roles as R


def unwritten_variables(entries: Mapping, roles: Mapping, meta) -> dict:
    """New roles: :data:`~ckpt_tools.roles.WEIGHT` (``other`` where no stored variable is
    its head, which :mod:`~ckpt_tools.frozen_meta` then reads as frozen) for each key read by
    its name alone as a loss's or tensor's average (no stored head) or as a slot of a
    variable averaged elsewhere (``<w>/mask``, its last part no optimizer slot's name), that
    the ``.meta`` lists as a variable outside ``trainable_variables`` and that no op of a
    graph with ``ema.apply()`` updates writes."""
    if meta is None:
        return {}
    from .meta_shadows import update_ops_of  # reads the graph: only here

    graph = {v.checkpoint_key for v in meta.variables.values()}
    trained = set(meta.keys_in("trainable_variables"))
    keys = [k for k, ri in roles.items() if k in graph and k not in trained and "/" in k
            and tuple(entries[k].shape) and entries[k].dtype_name in R._FLOAT
            and (ri.role in (R.LOSS_AVERAGE, R.TENSOR_AVERAGE)
                 and k.rpartition("/")[0] not in entries
                 or ri.role == R.OPTIMIZER_SLOT and ri.slot_of == k.rpartition("/")[0]
                 and not R.SLOT_RE.match(k.rpartition("/")[2]))]
    read = update_ops_of(meta) if keys else None
    if read is None:
        return {}
    ops, key = read
    if not ops.averages:  # no ema.apply() update here (an eval graph): nothing is shown
        return {}
    # an optimizer's input (reads: a gradient accumulator) is no weight either
    written = {key(s) for s in (*ops.averages, *ops.slots, *ops.reads, *ops.writers,
                                *ops.tensors)}
    # One no stored variable prefixes (attn/mask) is read as the .meta's other globals are,
    # so frozen_meta shows it a frozen weight (no shadow expected) and export notes it raw.
    return {k: R.RoleInfo(R.WEIGHT if k.rpartition("/")[0] in entries else R.OTHER)
            for k in keys if k not in written}
