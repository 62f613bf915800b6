"""Classify checkpoint keys: weight, EMA shadow, optimizer slot, BN statistic, step, loss average.

Names are the main evidence, since a bare ``.index`` is all many users have; a ``.meta`` graph
(collections) and a TF2 object graph (slot pairing) refine the answer when present.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from .entry import TensorEntry
from .meta import MetaGraph
from .objgraph import OBJECT_GRAPH_KEY, SLOT_MARK, ObjectGraph, readable_name

WEIGHT = "weight"
EMA = "ema"
EMA_DEBIAS = "ema_debias"
OPTIMIZER_SLOT = "optimizer_slot"
BN_STAT = "bn_stat"
STEP = "step"
LOSS_AVERAGE = "loss_average"
OTHER = "other"
ROLES = (WEIGHT, EMA, EMA_DEBIAS, OPTIMIZER_SLOT, BN_STAT, STEP, LOSS_AVERAGE, OTHER)

DEFAULT_EMA_NAME = "ExponentialMovingAverage"
# Slot names of TF1 optimizers (tf.compat.v1.train.*Optimizer) and TF2/Keras optimizers.
_SLOT_RE = re.compile(
    r"^(Momentum|Adam|Adam_1|RMSProp|RMSProp_1|Adagrad|AdagradDA|Ftrl|Ftrl_1|Adadelta|Adadelta_1|"
    r"ProximalAdagrad|Adamax|Adamax_1|Nadam|Nadam_1|LazyAdam|LazyAdam_1|"
    r"m|v|vhat|momentum|accumulator|gradient_accumulator|gradient_squared_accumulator|"
    r"linear|rms|mg|ms|mom|velocity|delta_accumulator)(_\d+)?$"
)
# TF2 slots that are weight averages (TF Addons MovingAverage, Model Garden EMA optimizer).
EMA_SLOT_NAMES = frozenset({"average", "ema", "moving_average", "swa"})
_STEP_NAMES = frozenset({"global_step", "beta1_power", "beta2_power", "save_counter", "iter",
                         "iterations", "iteration", "num_updates", "step"})
_BN_NAMES = frozenset({"moving_mean", "moving_variance", "moving_var", "running_mean",
                       "running_var", "moving_stddev"})
_DEBIAS = frozenset({"biased", "local_step"})
_FLOAT = frozenset({"float16", "bfloat16", "float32", "float64"})


@dataclass(frozen=True)
class RoleInfo:
    """The inferred role of one key, with the key it refers to where that applies."""

    role: str
    ema_of: str | None = None  # for EMA shadows: the checkpoint key of the averaged variable
    slot_of: str | None = None  # for optimizer slots: the key of the primary variable
    ema_style: str | None = None  # "tf1" (<var>/<ema name>) or "slot" (TF2 optimizer slot)


def _split(key: str) -> tuple[str, str]:
    head, _, last = key.rpartition("/")
    return head, last


def detect_ema_names(entries: Mapping[str, TensorEntry]) -> list[str]:
    """Returns the EMA suffixes used in ``entries``, most frequent first.

    A suffix ``S`` counts when ``<var>/S`` and ``<var>`` are both stored with the same dtype and
    shape and ``S`` is not an optimizer slot name: that is what ``ExponentialMovingAverage``
    (default name or ``name='avg'``) writes.

    Example:
        >>> detect_ema_names(open_checkpoint("fixtures/linear_v2").entries())  # doctest: +SKIP
        ['ExponentialMovingAverage']
    """
    counts: Counter[str] = Counter()
    for key, entry in entries.items():
        head, last = _split(key)
        src = entries.get(head)
        if (src is not None and not _SLOT_RE.match(last) and last not in _STEP_NAMES
                and last not in _BN_NAMES and src.dtype == entry.dtype
                and src.shape == entry.shape and entry.dtype_name in _FLOAT):
            counts[re.sub(r"_\d+$", "", last)] += 1
    names = [n for n, _ in counts.most_common()]
    if DEFAULT_EMA_NAME in names:  # prefer TF's default on ties
        names.remove(DEFAULT_EMA_NAME)
        names.insert(0, DEFAULT_EMA_NAME)
    return names


def _ema_suffix(last: str, ema_names: set[str]) -> bool:
    return last in ema_names or re.sub(r"_\d+$", "", last) in ema_names


def classify(
    entries: Mapping[str, TensorEntry],
    meta: MetaGraph | None = None,
    objects: ObjectGraph | None = None,
    ema_names: list[str] | None = None,
) -> dict[str, RoleInfo]:
    """Returns a :class:`RoleInfo` for every key of ``entries``.

    Args:
        entries: checkpoint key -> entry.
        meta: collections from the ``.meta`` graph, if any.
        objects: the TF2 object graph, if any.
        ema_names: EMA suffixes to recognise; default: :func:`detect_ema_names` plus
            ``ExponentialMovingAverage`` and ``avg`` (the loss-average convention).
    """
    names = set(ema_names if ema_names is not None else detect_ema_names(entries))
    names |= {DEFAULT_EMA_NAME}
    loss_names = names | {"avg"}
    colls = meta.collections_by_key() if meta else {}
    meta_vars = {v.checkpoint_key for v in meta.variables.values()} if meta else set()
    out: dict[str, RoleInfo] = {}
    for key, entry in entries.items():
        out[key] = _classify_one(key, entry, entries, names, loss_names, colls, meta_vars,
                                 meta is not None, objects)
    return out


def _classify_one(key, entry, entries, names, loss_names, colls, meta_vars, has_meta, objects):
    if key == OBJECT_GRAPH_KEY:
        return RoleInfo(OTHER)
    if SLOT_MARK in key:  # TF2: <var>/.OPTIMIZER_SLOT/<optimizer>/<slot>/.ATTRIBUTES/...
        slot = objects.slots.get(key) if objects else None
        var_part, _, rest = key.partition(SLOT_MARK)
        slot_name = slot.name if slot else _split(readable_name(rest))[1]
        primary = slot.variable if slot else var_part + "/.ATTRIBUTES/VARIABLE_VALUE"
        if slot_name in EMA_SLOT_NAMES:
            return RoleInfo(EMA, ema_of=primary, ema_style="slot")
        return RoleInfo(OPTIMIZER_SLOT, slot_of=primary)
    path = readable_name(key)
    head, last = _split(path)
    in_colls = colls.get(key, [])
    # Zero-debias helpers live under the average: <x>/<ema>/biased, <x>/<ema>/local_step.
    if last in _DEBIAS and head and _ema_suffix(_split(head)[1], loss_names):
        return RoleInfo(EMA_DEBIAS)
    if last in _STEP_NAMES or path.endswith("optimizer/iter") or key == "global_step":
        return RoleInfo(STEP)
    src = entries.get(head) if head else None
    if head and _ema_suffix(last, names if src is not None else loss_names):
        if src is not None and src.dtype == entry.dtype and src.shape == entry.shape:
            return RoleInfo(EMA, ema_of=head, ema_style="tf1")
        if src is None:
            # The source is not stored: a loss (a tensor, never saved) or an unsaved variable.
            if has_meta and head in meta_vars:
                return RoleInfo(EMA, ema_of=head, ema_style="tf1")
            if has_meta or "loss" in head.lower() or last == "avg":
                return RoleInfo(LOSS_AVERAGE)
            return RoleInfo(EMA, ema_of=head, ema_style="tf1")
    if src is not None and _SLOT_RE.match(last):
        return RoleInfo(OPTIMIZER_SLOT, slot_of=head)
    if last in _BN_NAMES:
        return RoleInfo(BN_STAT)
    if in_colls:
        if "trainable_variables" in in_colls:
            return RoleInfo(WEIGHT)
        if "moving_average_variables" in in_colls:
            return RoleInfo(BN_STAT)
        return RoleInfo(OTHER)
    if has_meta and key in meta_vars:
        return RoleInfo(OTHER)
    return RoleInfo(WEIGHT if entry.dtype_name in _FLOAT else OTHER)
