"""TF1 model variables a ``.meta`` records frozen (``trainable=False``): weights kept raw.

A fine-tuned head on a frozen backbone (``get_variable(..., trainable=False)``, slim's
``arg_scope(trainable=False)``, a frozen ``batch_norm``'s ``beta``) trains and averages the
head only: ``ema.apply(tf.trainable_variables())`` never averages the backbone, and TF's own
``ema.variables_to_restore()`` maps such a variable to itself. It is a model weight all the
same, which an export must hold (raw), or a by-name load leaves it at its initial value
(review-13-attack-r22 F10).

The ``.meta`` lists it in ``variables`` (global) and in neither ``trainable_variables`` nor
``moving_average_variables``, which the classifier reads as ``other``. What else is read that
way is kept out: an optimizer's slots and an EMA's shadows (stored under their variable's name,
``<var>/<slot>``, of its shape; written by the graph's update ops), step counters and
hyperparameters (:func:`~ckpt_tools.proven_state.proven_training_state`, ``beta1_power_1``).
Without a ``.meta`` nothing proves a variable frozen: a weight without an average is then
missing one (refused; ``--allow-missing`` keeps it raw).
"""

from __future__ import annotations

from . import roles as R
from .proven_state import proven_training_state

#: :data:`ckpt_tools.raw_reasons` reason: the ``.meta`` lists it outside trainable_variables.
NOT_TRAINABLE = "not_trainable"  # raw_reasons.NOT_TRAINABLE_META


def frozen_variables(ckpt, variables, weights=(), sources=None) -> list[str]:
    """The keys of ``variables`` (key -> :class:`~ckpt_tools.checkpoint.Variable`) that the
    checkpoint's ``.meta`` proves frozen model variables, in key order; empty without one.
    Left out: those in ``weights`` (already exported) and those ``sources`` (target -> the
    key an EMA map restores it from) gives another value than their own.

    Such a key is a float ``other`` variable of the graph's ``variables`` collection, in
    neither ``trainable_variables`` nor ``moving_average_variables`` (nor local), whose name is
    not a step counter or hyperparameter, that no stored variable of its dtype and shape
    prefixes (a slot or shadow: ``<var>/<name>``), that is no zero-debiased average's
    ``biased``/``local_step`` and that no update op of the graph writes as an average or an
    optimizer's slot. A graph that lists no trainable variable at all proves
    nothing (every variable would read frozen).
    """
    meta = getattr(ckpt, "meta", None)
    if meta is None or getattr(ckpt, "objects", None) is not None:
        return []
    trainable = set(meta.keys_in("trainable_variables"))
    if not trainable:
        return []
    outside = trainable | set(meta.keys_in("moving_average_variables")) | set(
        meta.keys_in("local_variables"))
    global_keys = set(meta.keys_in("variables"))
    found = []
    taken, sources = set(weights), sources or {}
    for key, v in variables.items():
        if (key in taken or sources.get(key, key) != key or v.role != R.OTHER
                or v.dtype not in R._FLOAT or key not in global_keys
                or key in outside or proven_training_state(key, v.role, meta, None)
                or R.UNIQUIFIED.sub("", key.rpartition("/")[2]) in R.STATE_NAMES
                or _under_a_variable(key, v, variables) or _debias_state(key, variables)
                or any(f"{key}/{d}" in variables for d in ("biased", "local_step"))):
            continue
        found.append(key)
    if found:
        found = _not_updated(ckpt, found)
    return sorted(found)


def listed_frozen(ckpt, variables) -> frozenset[str]:
    """The keys ``ckpt list`` shows as frozen weights (role ``weight``, no shadow expected,
    like a Keras file's frozen layers): :func:`frozen_variables` of ``variables`` (a list of
    :class:`~ckpt_tools.checkpoint.Variable`), which export writes raw; empty without a
    ``.meta``."""
    if getattr(ckpt, "meta", None) is None or getattr(ckpt, "objects", None) is not None:
        return frozenset()
    return frozenset(frozen_variables(ckpt, {v.name: v for v in variables}))


def renamed_frozen(ckpt, variables) -> frozenset[str]:
    """The weights (of ``variables``, a list of :class:`~ckpt_tools.checkpoint.Variable`)
    stored under keys a ``Saver(var_list=dict)`` renamed (``{"net/" + v.op.name: v}``) whose
    graph variable the ``.meta`` lists in ``variables`` and in neither
    ``trainable_variables`` nor ``moving_average_variables``: frozen, as :func:`listed_frozen`
    reads a plain Saver's, their collections read through the save op
    (:func:`~ckpt_tools.saved_keys.renamed_collections`); export keeps them raw so too
    (:func:`~ckpt_tools.saved_keys.translated_pairs`; review-19-attack-r45 F6).

    Returns:
        their keys; empty without a ``.meta`` listing trainable variables."""
    meta = getattr(ckpt, "meta", None)
    if meta is None or getattr(ckpt, "objects", None) is not None \
            or not meta.collections.get("trainable_variables"):
        return frozenset()
    from .saved_keys import renamed_keys  # builds on checkpoint

    renamed = renamed_keys(ckpt)
    listed = {"trainable_variables", "moving_average_variables"}
    return frozenset(v.name for v in variables if v.role == R.WEIGHT and v.name in renamed
                     and "variables" in v.collections and not listed & set(v.collections))


def _under_a_variable(key: str, v, variables) -> bool:
    """Whether a stored variable of ``v``'s dtype and shape prefixes ``key`` (``<var>/...``):
    the layout of an optimizer's slot or an EMA's shadow, whatever its name."""
    parts = key.split("/")
    for i in range(1, len(parts)):
        head = variables.get("/".join(parts[:i]))
        if head is not None and head.dtype == v.dtype and tuple(head.shape) == tuple(v.shape):
            return True
    return False


def _debias_state(key: str, variables) -> bool:
    """Whether ``key`` is the ``biased`` or ``local_step`` of a zero-debiased moving average
    (``assign_moving_average(..., zero_debias=True)``; tf_slim's
    ``batch_norm(zero_debias_moving_mean=True)``): ``<h>/biased[_N]`` beside
    ``<h>/local_step[_N]``, a scalar of its dtype, as TF's ``_zero_debias`` makes them. ``<h>``
    is the average's name under the variable scope it was updated in, so it need not be stored
    (``bn/bn/moving_mean/local_step`` of ``bn/moving_mean``): the average's bookkeeping, never
    a model weight (review-14-attack-r28 F6)."""
    head, _, last = key.rpartition("/")
    base = R.UNIQUIFIED.sub("", last)
    if not head or base not in R._DEBIAS:
        return False
    tail = last[len(base):]
    biased = variables.get(f"{head}/biased{tail}")
    step = variables.get(f"{head}/local_step{tail}")
    return (biased is not None and step is not None and biased.dtype == step.dtype
            and tuple(step.shape) == ())


def _not_updated(ckpt, keys: list[str]) -> list[str]:
    """``keys`` less those the ``.meta``'s update ops write as an EMA's shadow or an
    optimizer's slot (:mod:`~ckpt_tools.formats.meta_updates`), or as any moving average's
    (an ``AssignSub`` under ``AssignMovingAvg``: a tensor's too, or a zero-debiased one), and
    those an optimizer's update op reads as its state (a momentum or learning-rate variable,
    a gradient accumulator: ``reads``), no model weight."""
    from .meta_shadows import update_ops_of

    read = update_ops_of(ckpt.meta)
    if read is None:
        return keys
    ops, key = read
    written = {key(op) for op in (*ops.averages, *ops.slots, *ops.reads)}
    written |= {key(op) for op in _moving_average_targets(ckpt.meta.path)}
    return [k for k in keys if k not in written]


def _moving_average_targets(path: str) -> set[str]:
    """The variable ops an ``AssignSub`` of an ``AssignMovingAvg`` scope writes in the
    ``.meta`` (or SavedModel) at ``path``: every moving average's shadow, whatever it
    averages."""
    from .errors import CheckpointError
    from .formats.graph_def import read_graphs, through_reads

    try:
        graphs = read_graphs(path)
    except (OSError, CheckpointError):
        return set()
    return {through_reads(g.nodes, node.inputs[0]) for g in graphs
            for name, node in g.nodes.items()
            if node.op in ("AssignSub", "AssignSubVariableOp") and node.inputs
            and "AssignMovingAvg" in name}
