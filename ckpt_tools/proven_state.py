"""Which variables are proven step-dependent training state, not model weights.

Averaging (:mod:`ckpt_tools.average_write`) copies such state from the newest checkpoint
instead of averaging it, and :mod:`ckpt_tools.frozen_meta` keeps it out of the frozen weights.
Names alone never prove it; what does is the ``.meta``'s collections, a TF2 object path through
an optimizer or the root's counters, or TF1 Adam's beta powers beside their slots. Moved out of
:mod:`ckpt_tools.roles` (which classifies keys by name and still answers these two names) to
keep that module to its one concern, the per-key role.
"""

from __future__ import annotations

from . import roles as R
from .formats.meta import MetaGraph
from .formats.objgraph import VALUE_SUFFIX, ObjectGraph, optimizer_owned_keys, readable_name
from .lazy_re import LazyPattern

# What a checkpoint root records as its own counters (tf.train.Checkpoint's save_counter, a
# step a training loop attaches to the root): step-dependent whatever their dtype.
_ROOT_COUNTERS = frozenset({"save_counter", "step", "global_step", "iterations", "iter"})


# TF1 AdamOptimizer's non-slot state (``beta1_power_1`` when a graph has several Adams).
_ADAM_POWER = LazyPattern(r"^(beta[12])_power(_\d+)?$")


def tf1_adam_powers(variables) -> frozenset[str]:
    """Returns the keys of TF1 ``AdamOptimizer``'s ``beta1_power``/``beta2_power`` (beta^t:
    step-dependent state) that the layout the optimizer writes proves, without a ``.meta``:
    both powers, float scalars with one suffix, beside at least one variable holding the
    optimizer's two slots ``<var>/<name>`` and ``<var>/<name>_1`` of its own shape and dtype
    (``layer/W/Adam``, ``layer/W/Adam_1``). A lone scalar of that name proves nothing.

    Args:
        variables: the checkpoint's :class:`~ckpt_tools.checkpoint.Variable` records.
    """
    by_name = {v.name: v for v in variables}
    powers: dict[tuple[str, str], dict[str, str]] = {}
    for v in variables:
        head, last = R.split_key(v.name)
        m = _ADAM_POWER.match(last)
        if m and v.dtype in R.FLOAT_DTYPES and tuple(v.shape) in ((), (1,)):
            powers.setdefault((head, m.group(2) or ""), {})[m.group(1)] = v.name
    if not powers:
        return frozenset()
    paired = False
    for v in variables:
        if v.role != R.OPTIMIZER_SLOT or not v.slot_of:
            continue
        twin = by_name.get(v.name + "_1")
        var = by_name.get(v.slot_of)
        if twin is not None and twin.slot_of == v.slot_of and var is not None and \
                v.shape == twin.shape == var.shape and v.dtype == twin.dtype == var.dtype:
            paired = True
            break
    if not paired:
        return frozenset()
    return frozenset(k for found in powers.values() if len(found) == 2
                     for k in found.values())


def proven_training_state(key: str, role: str, meta: MetaGraph | None,
                          objects: ObjectGraph | None,
                          adam_powers: frozenset[str] = frozenset()) -> bool:
    """Returns whether the variable stored under ``key`` is proven step-dependent training
    state (an optimizer's or the checkpoint's bookkeeping), not a model weight.

    Names alone never prove it (a Meta-SGD ``layer/learning_rate``, a GRU-D ``decay``, a
    neural-ODE ``step`` are trained weights). Proven are: the zero-debias helpers of an
    average (``role`` ``ema_debias``); a ``step``/``other`` variable in the ``.meta``'s
    ``global_step`` collection, or TF1 state the ``.meta`` lists outside
    ``trainable_variables`` whose name is a counter or hyperparameter (``beta1_power``,
    ``learning_rate``); in a TF2 object checkpoint, a ``step``/``other`` variable whose object
    path runs through an optimizer (``optimizer/learning_rate``, ``optimizer/iter``) or a
    counter of the root itself (``save_counter``, ``step``); in a TF1 checkpoint without a
    ``.meta``, Adam's beta powers that :func:`tf1_adam_powers` proves (``adam_powers``). A
    variable the ``.meta`` lists as trainable is never state.
    """
    if role == R.EMA_DEBIAS:
        return True
    if role not in (R.STEP, R.OTHER):
        return False
    if meta is not None:
        if key in meta.keys_in("trainable_variables"):
            return False
        if key in meta.keys_in("global_step"):
            return True
    if objects is not None and (key in objects.paths or key.endswith(VALUE_SUFFIX)):
        path = objects.paths.get(key) or readable_name(key)
        return bool(R.OPTIMIZER_PATH.search(path)) or path in _ROOT_COUNTERS or \
            key in optimizer_owned_keys(objects)
    if meta is None:
        return objects is None and key in adam_powers
    if key not in {v.checkpoint_key for v in meta.variables.values()}:
        return False
    return R.split_key(readable_name(key))[1] in R.STATE_NAMES
