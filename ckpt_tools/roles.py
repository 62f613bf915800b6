"""Classify checkpoint keys: weight, EMA shadow, optimizer slot, BN statistic, step, loss average.

Names are the main evidence, since a bare ``.index`` is all many users have; a ``.meta`` graph
(collections) and a TF2 object graph (slot pairing) refine the answer when present.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

from .formats._record import Frozen
from .formats.entry import TensorEntry
from .formats.meta import MetaGraph
from .formats.objgraph import (
    OBJECT_GRAPH_KEY,
    SLOT_MARK,
    VALUE_SUFFIX,
    ObjectGraph,
    readable_name,
)
from .lazy_re import LazyPattern
from .pairing import ObjectPairing, pair_by_names

WEIGHT = "weight"
EMA = "ema"
EMA_DEBIAS = "ema_debias"
OPTIMIZER_SLOT = "optimizer_slot"
BN_STAT = "bn_stat"
STEP = "step"
LOSS_AVERAGE = "loss_average"
OTHER = "other"
ROLES = (WEIGHT, EMA, EMA_DEBIAS, OPTIMIZER_SLOT, BN_STAT, STEP, LOSS_AVERAGE, OTHER)
EMA_STYLES = ("tf1", "object", "keras", "slot")

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
# The "_1", "_2" … TensorFlow appends to a taken name (compiled once: it runs per key).
_UNIQUIFIED = re.compile(r"_\d+$")
_OPTIMIZER_PATH = LazyPattern(r"(^|/)\.?optimizer[^/]*(/|$)", re.IGNORECASE)
_HYPERPARAMETERS = frozenset({"learning_rate", "lr", "momentum_value", "decay"})
_FLOAT = frozenset({"float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
                    "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2fnuz"})


class RoleInfo(Frozen):
    """The inferred role of one key, with the key it refers to where that applies."""

    role: str
    ema_of: str | None = None  # for EMA shadows: the checkpoint key of the averaged variable
    slot_of: str | None = None  # for optimizer slots: the key of the primary variable
    # How the average is kept: "tf1" (<var>/<ema name>), "object" (TF2 ema.average(v) saved in
    # a tf.train.Checkpoint), "keras" (Keras 3 use_ema=True), "slot" (an "average" optimizer
    # slot: TF Model Garden / TF Addons).
    ema_style: str | None = None
    # For an EMA shadow the file cannot pair: the variables it may average (ema_of is None).
    candidates: tuple[str, ...] = ()
    _fields = ("role", "ema_of", "slot_of", "ema_style", "candidates")

    def __init__(self, role: str, ema_of: str | None = None, slot_of: str | None = None,
                 ema_style: str | None = None, candidates: tuple[str, ...] = ()) -> None:
        self.__dict__.update(role=role, ema_of=ema_of, slot_of=slot_of, ema_style=ema_style,
                             candidates=candidates)


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
        head, _, last = key.rpartition("/")  # _split, inline: once per key
        src = entries.get(head)
        if (src is not None and not _SLOT_RE.match(last) and last not in _STEP_NAMES
                and last not in _BN_NAMES and src.dtype == entry.dtype
                and src.shape == entry.shape and entry.dtype_name in _FLOAT):
            counts[_UNIQUIFIED.sub("", last)] += 1
    names = [n for n, _ in counts.most_common()]
    if DEFAULT_EMA_NAME in names:  # prefer TF's default on ties
        names.remove(DEFAULT_EMA_NAME)
        names.insert(0, DEFAULT_EMA_NAME)
    return names


def _ema_suffix(last: str, ema_names: set[str]) -> bool:
    return last in ema_names or _UNIQUIFIED.sub("", last) in ema_names


def classify(
    entries: Mapping[str, TensorEntry],
    meta: MetaGraph | None = None,
    objects: ObjectGraph | None = None,
    ema_names: list[str] | None = None,
    *,
    keras=None,
    apply_order: str | None = None,
    collections: dict[str, list[str]] | None = None,
) -> dict[str, RoleInfo]:
    """Returns a :class:`RoleInfo` for every key of ``entries``.

    Args:
        entries: checkpoint key -> entry.
        meta: collections from the ``.meta`` graph, if any.
        objects: the TF2 object graph, if any.
        ema_names: EMA suffixes to recognise; default: :func:`detect_ema_names` plus
            ``ExponentialMovingAverage`` and ``avg`` (the loss-average convention).
        keras: for Keras files, the reader's :class:`~ckpt_tools.formats.keras.layout.KerasLayout`.
        apply_order: for TF2 averages of same-named variables, the order ``ema.apply()`` got
            them in (:data:`ckpt_tools.pairing.APPLY_ORDERS`); default: only an average that one
            variable of its name fits (dtype, shape) is paired, the rest are ``ema`` with
            ``candidates`` and no ``ema_of``.
        collections: ``meta.collections_by_key()``, when the caller has it already (else
            computed here).
    """
    if keras is not None:
        return classify_keras(entries, keras)
    if objects is not None and objects.full_names:
        return _classify_objects(entries, objects, ema_names, apply_order)
    names = set(ema_names if ema_names is not None else detect_ema_names(entries))
    names |= {DEFAULT_EMA_NAME}
    loss_names = names | {"avg"}
    if collections is None:
        collections = meta.collections_by_key() if meta else {}
    colls = collections
    meta_vars = {v.checkpoint_key for v in meta.variables.values()} if meta else set()
    out: dict[str, RoleInfo] = {}
    for key, entry in entries.items():
        out[key] = _classify_one(key, entry, entries, names, loss_names, colls, meta_vars,
                                 meta is not None, objects)
    out.update(_scoped_shadows(entries, out, names, meta))
    out.update(_scoped_part_shadows(entries, out, meta))
    return out


def _scoped_shadows(entries, roles: dict[str, RoleInfo], names: set[str],
                    meta: MetaGraph | None) -> dict[str, RoleInfo]:
    """Averages made by ``ema.apply()`` under a ``variable_scope``: TF1 names the shadow of
    ``w`` ``<scope>/w/ExponentialMovingAverage``, whose head is no stored variable.

    Such a key is ``w``'s average when the ``.meta`` proves it: ``w`` is in
    ``moving_average_variables`` (``apply()`` ran on it, so its shadow is a global variable
    whose name ends in ``w/<ema name>``), the key is a global variable of the graph, and it is
    the only stored candidate on both sides. Otherwise (no ``.meta``, or several variables
    whose names the head ends with) it is an average with candidates and no link: it might also
    average a tensor or an unsaved variable named like its head.
    """
    out: dict[str, RoleInfo] = {}
    averaged = set(meta.keys_in("moving_average_variables")) if meta else set()
    graph_vars = {v.checkpoint_key for v in meta.variables.values()} if meta else set()
    found: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for key, info in roles.items():
        head, _, last = key.rpartition("/")  # _split, inline: once per key
        if (info.role not in (LOSS_AVERAGE, EMA) or (info.role == EMA and info.ema_of in entries)
                or head in entries or head in graph_vars):
            continue
        # A custom EMA name (name="avg") is not detected from the keys when every average
        # sits under a scope: the .meta names it (a graph variable <scope>/<w>/<name> of an
        # averaged w), and only then is it taken up here.
        if not _ema_suffix(last, names) and not (
                key in graph_vars and any(head.endswith("/" + a) for a in averaged)):
            continue
        entry = entries[key]
        cands = tuple(sorted(
            v for v in entries if head.endswith("/" + v) and roles[v].role in (WEIGHT, BN_STAT)
            and entries[v].dtype == entry.dtype and entries[v].shape == entry.shape))
        if cands:
            found.setdefault(cands[0], []).append((key, cands))
    for first, shadows in found.items():
        for key, cands in shadows:
            proven = (len(cands) == 1 and len(shadows) == 1 and first in averaged
                      and key in graph_vars
                      and not any(_split(k)[0] == first and roles[k].role == EMA
                                  for k in entries))
            out[key] = (RoleInfo(EMA, ema_of=first, ema_style="tf1") if proven else
                        RoleInfo(EMA, ema_style="tf1", candidates=cands))
    return out


def _scoped_part_shadows(entries, roles: dict[str, RoleInfo],
                         meta: MetaGraph | None) -> dict[str, RoleInfo]:
    """The shadow of a partitioned variable averaged under a ``variable_scope``, which TF1 saves
    as one key per part (``net/w//w/part_0/avg``, ``net/w//w/part_1/avg``) and the reader reads
    as one tensor (``extra["fragments"]``, see :func:`~.formats.slices.fragment_groups`).

    Its variable is proven by the ``.meta`` alone: each part's shadow is a graph variable
    ``<scope>/<part>/<name>`` saved under that part's key, for a part of a variable in
    ``moving_average_variables`` at the same offset, and TensorFlow's slot naming
    (``<full name>/`` + the shadow's name cut at the part name's length + 1) gives exactly that
    key; all parts must name one stored variable of the same dtype and shape. Otherwise (no
    ``.meta``) it is an average whose candidates are the stored variables partitioned the same.
    """
    out: dict[str, RoleInfo] = {}
    merged = {k: e for k, e in entries.items() if e.extra and e.extra.get("fragments")}
    if not merged:
        return out
    parts_of: dict[str, list] = {}  # checkpoint key -> graph variables saved under it
    averaged: list = []
    if meta is not None:
        for var in meta.variables.values():
            parts_of.setdefault(var.checkpoint_key, []).append(var)
        averaged = [meta.variables[op] for op in meta.collections.get(
            "moving_average_variables", ()) if op in meta.variables
            and meta.variables[op].partition is not None]
    shadowed = {r.ema_of for r in roles.values() if r.role == EMA and r.ema_of}
    for key, entry in merged.items():
        last = _split(key)[1]
        targets: set[str] = set()
        for member, tslice in zip(entry.extra["fragments"], entry.slices, strict=True):
            offset = tuple(s for s, _ in tslice.resolve(entry.shape))
            found = {part.checkpoint_key for shadow in parts_of.get(member, ())
                     for part in averaged
                     if shadow.name.endswith("/" + part.name + "/" + last)
                     and part.partition.full_name + "/" + shadow.name[len(part.name) + 1:]
                     == member and tuple(part.partition.var_offset) == offset}
            targets |= found if len(found) == 1 else {"", " "}  # none or several: unproven
        target = next(iter(targets)) if len(targets) == 1 else None
        same = tuple(sorted(
            k for k, e in entries.items() if k != key and e.slices and k not in merged
            and e.dtype == entry.dtype and e.shape == entry.shape
            and set(e.slices) == set(entry.slices) and roles[k].role in (WEIGHT, BN_STAT)))
        if target in same and target not in shadowed:
            out[key] = RoleInfo(EMA, ema_of=target, ema_style="tf1")
        elif same:
            out[key] = RoleInfo(EMA, ema_style="tf1", candidates=same)
    return out


def pair_object_shadows(entries, objects: ObjectGraph, ema_names=None,
                        apply_order: str | None = None,
                        container: str | None = None) -> ObjectPairing:
    """Pairs TF2 averages with their variables: Keras 3 ``use_ema`` averages by their optimizer
    path, ``ema.average(v)`` by the names TensorFlow recorded (see :mod:`ckpt_tools.pairing`).

    Returns:
        :class:`~ckpt_tools.pairing.ObjectPairing`: proven pairs, and ambiguous shadows with
        their candidates.
    """
    full = {k: objects.full_names[k] for k in entries
            if k in objects.full_names and SLOT_MARK not in k}
    names = set(ema_names or ()) | {DEFAULT_EMA_NAME}
    firsts: dict[str, TensorEntry] = {}
    for k, f in full.items():
        firsts.setdefault(f, entries[k])
    names |= set(detect_ema_names(firsts))
    keras3 = _keras3_pairs(full, entries, "average")
    keras3.update(_keras3_scoped_pairs(objects, full, entries, "average"))
    clash = _keras3_clashes(full, keras3, "average")
    rest = {k: e for k, e in entries.items() if k not in keras3 and k not in clash}
    found = pair_by_names(rest, objects, names, apply_order, container)
    return ObjectPairing(pairs={**keras3, **found.pairs},
                         ambiguous={**clash, **found.ambiguous}, set_aside=found.set_aside)


def _flat(full_name: str) -> str:
    return full_name.replace("/", "_")


def _keras3_scoped_pairs(objects: ObjectGraph, full: dict[str, str], entries,
                         suffix: str) -> dict[str, str]:
    """Keras 3 averages paired inside their own optimizer: a ``tf.train.Checkpoint`` of a
    Keras 3 optimizer records its ``_variables`` and the ``_trainable_variables`` it was built
    with (references to the model's variable objects). An average ``<opt>/<flat path>_average``
    of one optimizer is the variable of that same optimizer's ``_trainable_variables`` whose
    name flattens to ``<flat path>``: proven even when two models share variable names (a
    GAN's generator and critic both named ``net``).

    Where two of its variables flatten to one name (a layer ``x_dense`` and a block ``x``
    holding a ``dense``: both ``net_x_dense_kernel_average``), the order proves it: Keras
    builds one average per variable of ``_trainable_variables``, in that order, as one block of
    ``_variables`` (both lists recorded in order); used when every average of the optimizer
    is in that block, one per held variable, each of its variable's shape and dtype. Returns
    average key -> variable key."""
    out: dict[str, str] = {}
    keys = objects.node_keys
    for _node, kids in objects.children.items():
        named = dict(kids)
        if "_trainable_variables" not in named or "_variables" not in named:
            continue
        held = [keys[c] for _n, c in _in_order(objects.children.get(
            named["_trainable_variables"], [])) if c in keys]
        mine = [keys[c] for _n, c in _in_order(objects.children.get(named["_variables"], []))
                if c in keys]
        if any(k not in entries for k in held + mine):
            # The object graph names a tensor the index lacks (a damaged file): positions
            # prove nothing then, so this optimizer pairs nothing here.
            continue
        by_flat: dict[str, str | None] = {}
        for k in held:
            if k in full:
                f = _flat(full[k])
                by_flat[f] = k if by_flat.get(f, k) == k else None
        for k in mine:
            last = _split(full.get(k, ""))[1]
            if "/" not in full.get(k, "") or not last.endswith("_" + suffix):
                continue
            src = by_flat.get(last[: -len(suffix) - 1])
            if src is not None and src != k and entries[src].shape == entries[k].shape:
                out[k] = src
        averages = [i for i, k in enumerate(mine) if "/" in full.get(k, "")
                    and _split(full[k])[1].endswith("_" + suffix)]
        if (averages and len(averages) == len(held) and len(held) == len(set(held))
                and averages == list(range(averages[0], averages[0] + len(held)))
                and all(entries[mine[i]].shape == entries[v].shape
                        and entries[mine[i]].dtype == entries[v].dtype
                        for i, v in zip(averages, held, strict=True))):
            for i, v in zip(averages, held, strict=True):
                if out.get(mine[i], v) == v:
                    out[mine[i]] = v
    return out


def _in_order(kids: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """A tracked list's children by index (``_variables/0``, ``/1``…, ``/10``): the list's own
    order, which positional pairing relies on."""
    if all(n.isdigit() for n, _ in kids):
        return sorted(kids, key=lambda kid: int(kid[0]))
    return kids


def _keras3_clashes(full: dict[str, str], paired: dict[str, str],
                    suffix: str) -> dict[str, tuple[str, ...]]:
    """Keras 3 averages (``<opt>/<flat path>_average``) left unpaired because several
    variables carry that path (two models of the same name): average key -> candidates."""
    by_flat: dict[str, list[str]] = {}
    for k, f in full.items():
        by_flat.setdefault(_flat(f), []).append(k)
    out = {}
    for k, f in full.items():
        last = _split(f)[1]
        if k in paired or "/" not in f or not last.endswith("_" + suffix):
            continue
        cands = [c for c in by_flat.get(last[: -len(suffix) - 1], []) if c != k]
        if len(cands) > 1:
            out[k] = tuple(cands)
    return out


_KERAS3_SLOTS = ("momentum", "velocity", "m", "v", "vhat", "accumulator", "accumulators",
                 "delta_accumulator", "average_gradient", "moment", "momentums", "velocities")


def _keras3_pairs(full: dict[str, str], entries, suffix: str) -> dict[str, str]:
    """Keras 3 optimizers name their variables ``<optimizer>/<var path, '/' as '_'>_<what>``
    (``sgd/net_dense_kernel_average``): returns key -> key of the model variable, for ``what`` ==
    ``suffix``, when shapes agree and exactly one variable has that path."""
    flat: dict[str, str | None] = {}

    def add(name: str, key: str) -> None:  # two variables flattening alike: neither is proven
        flat[name] = key if flat.get(name, key) == key else None

    for k, f in full.items():
        add(f.replace("/", "_"), k)
    # TensorFlow names a subclassed model's variables <model>/<variable> while Keras paths
    # read <model>/<layer>/<variable>: the layer part is the key's object path below the root
    # attribute (``model/zeta/_kernel`` -> ``sub_zeta_kernel``).
    attr = "/.ATTRIBUTES/VARIABLE_VALUE"
    for k, f in full.items():
        parts = k[: -len(attr)].split("/") if k.endswith(attr) else []
        if len(parts) > 2 and parts[0] != "optimizer" and "/" in f:
            add("_".join([f.split("/")[0]] + [p.lstrip("_") for p in parts[1:]]), k)
    out = {}
    for k, f in full.items():
        last = _split(f)[1]
        if "/" in f and last.endswith("_" + suffix):
            src = flat.get(last[: -len(suffix) - 1])
            if src is not None and src != k and entries[src].shape == entries[k].shape:
                out[k] = src
    return out


def _classify_objects(entries, objects: ObjectGraph, ema_names,
                      apply_order: str | None = None) -> dict[str, RoleInfo]:
    """TF2 keys say where an object sits, not what it is; the variables' own names (recorded
    as ``full_name``) follow TF1 conventions, so classify by those."""
    pairing = pair_object_shadows(entries, objects, ema_names, apply_order)
    pairs = pairing.pairs
    full_of = {k: objects.full_names[k] for k in entries
               if k in objects.full_names and SLOT_MARK not in k}
    keras_slots: dict[str, str] = {}
    for slot in _KERAS3_SLOTS:
        keras_slots.update(_keras3_pairs(full_of, entries, slot))
    by_name: dict[str, TensorEntry] = {}
    for key, entry in entries.items():
        full = objects.full_names.get(key)
        if full and SLOT_MARK not in key and key not in pairs and key not in pairing.ambiguous:
            by_name.setdefault(full, entry)
    names = set(detect_ema_names(by_name)) | {DEFAULT_EMA_NAME}
    plain = ObjectGraph(paths=objects.paths, slots=objects.slots)
    tf_keras = _tf_keras_optimizer_vars(full_of, entries, objects)
    out = {}
    for key, entry in entries.items():
        full = objects.full_names.get(key)
        if "/.ATTRIBUTES/" in key and not key.endswith(VALUE_SUFFIX):
            # Other saveables: lookup-table keys/values (DenseHashTable, MutableHashTable),
            # iterator and config state. Not weights, so never "missing" an average.
            out[key] = RoleInfo(OTHER)
        elif key in tf_keras:
            out[key] = tf_keras[key]
        elif key in pairs:
            keras3 = full_of.get(key, "").endswith("_average")
            out[key] = RoleInfo(EMA, ema_of=pairs[key], ema_style="keras" if keras3 else "object")
        elif key in pairing.ambiguous:
            out[key] = RoleInfo(EMA, ema_style="object", candidates=pairing.ambiguous[key])
        elif key in keras_slots:
            out[key] = RoleInfo(OPTIMIZER_SLOT, slot_of=keras_slots[key])
        elif full_of.get(key, "").rpartition("/")[2] in ("iteration", "iterations") and \
                "/" in full_of.get(key, ""):
            out[key] = RoleInfo(STEP)
        elif full and SLOT_MARK not in key:
            ri = _classify_one(full, entry, by_name, names, names | {"avg"}, {}, set(), False,
                               None)
            # A name-based link would point at a name, not a key: keep only the role. An
            # average of a tensor (a loss: a scalar) is a loss average; one of a variable
            # the checkpoint does not store (saved apart from its model) stays an average,
            # of nothing here.
            out[key] = RoleInfo(ri.role) if ri.role != EMA else (
                RoleInfo(EMA, ema_style="object") if entry.shape else RoleInfo(LOSS_AVERAGE))
        else:
            out[key] = _classify_one(key, entry, entries, names, names | {"avg"}, {}, set(),
                                     False, plain)
    for key, entry in entries.items():
        # Scalars owned by an optimizer object (momentum, decay, beta_1…) are hyperparameters.
        path = objects.paths.get(key, readable_name(key))
        if out[key].role == WEIGHT and entry.shape == () and _OPTIMIZER_PATH.search(path):
            out[key] = RoleInfo(OTHER)
        # A Keras 3 optimizer's own variables (``<opt>/_variables/<i>`` beside
        # ``<opt>/_iterations``) are its state, never model weights, whatever their names
        # (Adafactor's factored r and c are named after the variable: adafactor/kernel).
        owner = _KERAS3_OPT_VAR.match(key)
        if owner and out[key].role in (WEIGHT, OTHER) and \
                f"{owner.group(1)}_iterations{VALUE_SUFFIX}" in entries:
            out[key] = RoleInfo(OPTIMIZER_SLOT)
    return out


_KERAS3_OPT_VAR = LazyPattern(r"^((?:[^/]+/)*)_variables/\d+" + re.escape(VALUE_SUFFIX) + "$")


# tf_keras (Keras 2) optimizers (tf.keras.optimizers.* since TF 2.11) name their variables
# "<optimizer name>/<what>/<model variable name>": Adam/m/dense/kernel, SGD/average/dense/kernel.
_TF_KERAS_VAR = LazyPattern(r"^([^/]+)/([A-Za-z_]+)/(.+)$")


def _tf_keras_optimizer_vars(full_of: dict[str, str], entries,
                             objects: ObjectGraph) -> dict[str, RoleInfo]:
    """Roles of tf_keras optimizer variables, found by their name and their place under an
    optimizer in the object graph; ``average`` ones (``use_ema=True``) are paired with the
    variable of that name, or left with their candidates when several fit."""
    # An optimizer is known by its attribute name (optimizer=, generator_optimizer=) or by
    # what it tracks: `_iterations` beside its `_variables` (opt=, g_opt=: any name).
    owners = tuple({p[: -len("_iterations")] for k in entries
                    if (p := objects.paths.get(k, "")).endswith("/_iterations")})

    def optimizer_owned(k: str) -> bool:
        path = objects.paths.get(k, readable_name(k))
        return bool(_OPTIMIZER_PATH.search(path)) or path.startswith(owners)

    model: dict[str, list[str]] = {}
    for k, f in full_of.items():
        if not optimizer_owned(k):
            model.setdefault(f, []).append(k)
    placed = _tf_keras_positions(full_of, entries, objects)
    out: dict[str, RoleInfo] = {}
    for k, f in full_of.items():
        m = _TF_KERAS_VAR.match(f)
        if not m or not optimizer_owned(k):
            continue
        fitting = [v for v in model.get(m.group(3), ()) if entries[v].shape == entries[k].shape]
        if not fitting:
            continue
        one = fitting[0] if len(fitting) == 1 else (
            placed[k] if placed.get(k) in fitting else None)
        if m.group(2) == "average":
            out[k] = RoleInfo(EMA, ema_of=one, ema_style="keras",
                              candidates=() if one else tuple(sorted(fitting)))
        else:
            out[k] = RoleInfo(OPTIMIZER_SLOT, slot_of=one)
    return out


_LAYER_CHAIN = LazyPattern(r"((?:layer_with_weights-\d+/)+)[^/]+")


def _tf_keras_positions(full_of: dict[str, str], entries,
                        objects: ObjectGraph) -> dict[str, str]:
    """tf_keras ``model.save_weights()`` in TF format, averages of same-named weights (two
    nested models both holding a layer ``fc``: ``Adam/average/fc/kernel`` twice): the root
    is the model, ``optimizer`` its compiled optimizer, which built one average per variable
    of ``model.trainable_variables``, in that order, as its ``_model_variables_moving_average``
    list (recorded in order). ``model.trainable_variables`` follows ``model.layers``, as the
    ``layer_with_weights-N`` numbering does; so among the weights of one name, dtype and shape
    the k-th average is the k-th weight in that numbering, where the optimizer holds exactly
    one average per such weight (none frozen: otherwise which were trainable is not
    recorded). Returns average key -> weight key, only for such groups."""
    root = dict(objects.children.get(0, []))
    if "optimizer" not in root or not any(n.startswith("layer_with_weights-") for n in root):
        return {}
    keys = objects.node_keys
    listed = dict(objects.children.get(root["optimizer"], [])).get(
        "_model_variables_moving_average")
    if listed is None:
        return {}
    averages = [keys[c] for _n, c in _in_order(objects.children.get(listed, [])) if c in keys]

    def group(key: str, name: str) -> tuple:
        return name, entries[key].dtype, entries[key].shape

    by_group: dict[tuple, list[str]] = {}
    for k in averages:
        m = _TF_KERAS_VAR.match(full_of.get(k, ""))
        if m is None or k not in entries:
            return {}  # not the tf_keras layout: positions prove nothing
        by_group.setdefault(group(k, m.group(3)), []).append(k)
    weights: dict[tuple, list[tuple[tuple[int, ...], str]]] = {}
    for k, f in full_of.items():
        chain = _LAYER_CHAIN.fullmatch(objects.paths.get(k, ""))
        if chain and k in entries:
            where = tuple(int(i) for i in re.findall(r"layer_with_weights-(\d+)", chain[1]))
            weights.setdefault(group(k, f), []).append((where, k))
    out: dict[str, str] = {}
    for g, avgs in by_group.items():
        mine = sorted(weights.get(g, []))
        if len(avgs) > 1 and len(mine) == len(avgs) and \
                len({where for where, _ in mine}) == len(mine):
            out.update(zip(avgs, [k for _, k in mine], strict=True))
    return out


def _classify_one(key, entry, entries, names, loss_names, colls, meta_vars, has_meta, objects):
    if key == OBJECT_GRAPH_KEY:
        return _PLAIN[OTHER]
    if SLOT_MARK in key:  # TF2: <var>/.OPTIMIZER_SLOT/<optimizer>/<slot>/.ATTRIBUTES/...
        slot = objects.slots.get(key) if objects else None
        var_part, _, rest = key.partition(SLOT_MARK)
        slot_name = slot.name if slot else _split(readable_name(rest))[1]
        primary = slot.variable if slot else var_part + "/.ATTRIBUTES/VARIABLE_VALUE"
        if slot_name in EMA_SLOT_NAMES:
            return RoleInfo(EMA, ema_of=primary, ema_style="slot")
        return RoleInfo(OPTIMIZER_SLOT, slot_of=primary)
    path = readable_name(key)
    head, _, last = path.rpartition("/")  # _split, inline: once per key
    in_colls = colls.get(key, [])
    if "trainable_variables" in in_colls and entry.dtype_name in _FLOAT:
        # The graph trains it: a weight, whatever its name (a Meta-SGD layer/learning_rate,
        # a GRU-D decay, a neural-ODE step); shadows, slots and counters are not trainable.
        return _PLAIN[WEIGHT]
    # Zero-debias helpers live under the average: <x>/<ema>/biased, <x>/<ema>/local_step.
    if last in _DEBIAS and head and _ema_suffix(_split(head)[1], loss_names):
        return _PLAIN[EMA_DEBIAS]
    if last in _STEP_NAMES or path.endswith("optimizer/iter") or key == "global_step":
        return _PLAIN[STEP]
    if last in _HYPERPARAMETERS:
        return _PLAIN[OTHER]
    src = entries.get(head) if head else None
    if head and _ema_suffix(last, names if src is not None else loss_names):
        if src is not None and src.dtype == entry.dtype and src.shape == entry.shape:
            return RoleInfo(EMA, ema_of=head, ema_style="tf1")
        if src is None:
            # The source is not stored: a loss (a tensor, never saved) or an unsaved variable.
            if has_meta and head in meta_vars:
                return RoleInfo(EMA, ema_of=head, ema_style="tf1")
            if has_meta or "loss" in head.lower() or last == "avg":
                return _PLAIN[LOSS_AVERAGE]
            return RoleInfo(EMA, ema_of=head, ema_style="tf1")
    if src is not None and _SLOT_RE.match(last):
        return RoleInfo(OPTIMIZER_SLOT, slot_of=head)
    if last in _BN_NAMES:
        return _PLAIN[BN_STAT]
    if in_colls:
        if "trainable_variables" in in_colls:
            return _PLAIN[WEIGHT]
        if "moving_average_variables" in in_colls:
            return _PLAIN[BN_STAT]
        return _PLAIN[OTHER]
    if has_meta and key in meta_vars:
        return _PLAIN[OTHER]
    return _PLAIN[WEIGHT if entry.dtype_name in _FLOAT else OTHER]


# One shared RoleInfo per role that refers to no other key (RoleInfo is frozen): most keys
# of a large checkpoint get one of these, and building 3,000 of them was ~1 ms of a listing.
_PLAIN = {role: RoleInfo(role)
          for role in (BN_STAT, EMA_DEBIAS, LOSS_AVERAGE, OTHER, STEP, WEIGHT)}


# What a checkpoint root records as its own counters (tf.train.Checkpoint's save_counter, a
# step a training loop attaches to the root): step-dependent whatever their dtype.
_ROOT_COUNTERS = frozenset({"save_counter", "step", "global_step", "iterations", "iter"})
# Names of step-dependent optimizer state a TF1 graph keeps outside its trainable variables.
_STATE_NAMES = _STEP_NAMES | _HYPERPARAMETERS | {"current_loss_scale", "good_steps"}


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
        head, last = _split(v.name)
        m = _ADAM_POWER.match(last)
        if m and v.dtype in _FLOAT and tuple(v.shape) in ((), (1,)):
            powers.setdefault((head, m.group(2) or ""), {})[m.group(1)] = v.name
    if not powers:
        return frozenset()
    paired = False
    for v in variables:
        if v.role != OPTIMIZER_SLOT or not v.slot_of:
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
    if role == EMA_DEBIAS:
        return True
    if role not in (STEP, OTHER):
        return False
    if meta is not None:
        if key in meta.keys_in("trainable_variables"):
            return False
        if key in meta.keys_in("global_step"):
            return True
    if objects is not None and (key in objects.paths or key.endswith(VALUE_SUFFIX)):
        path = objects.paths.get(key) or readable_name(key)
        return bool(_OPTIMIZER_PATH.search(path)) or path in _ROOT_COUNTERS
    if meta is None:
        return objects is None and key in adam_powers
    if key not in {v.checkpoint_key for v in meta.variables.values()}:
        return False
    return _split(readable_name(key))[1] in _STATE_NAMES


def classify_keras(entries: Mapping[str, TensorEntry], layout) -> dict[str, RoleInfo]:
    """Roles of a Keras weight file's keys, from its
    :class:`~ckpt_tools.formats.keras.layout.KerasLayout`.

    Model weights are ``weight`` (non-trainable BatchNormalization ``moving_mean`` and
    ``moving_variance`` are ``bn_stat``), ``iteration`` is ``step``, ``learning_rate`` is
    ``other``, the ``use_ema=True`` copies are ``ema`` (``ema_of`` = the model weight's key) and
    the remaining optimizer variables ``optimizer_slot``.

    Example:
        >>> ckpt = open_checkpoint("fixtures/keras_ema/model.keras")  # doctest: +SKIP
        >>> classify_keras(ckpt.entries(), ckpt.reader.keras)["optimizer/vars/2"].ema_of
        'layers/dense/vars/0'
    """
    out: dict[str, RoleInfo] = {}
    for key, entry in entries.items():
        if key in layout.averages:
            # unpaired (the file cannot tell): every weight it may average (those its name
            # names, where the file records one; else those of its shape and dtype), so that
            # list says it cannot be paired rather than "no shadow"
            named = layout.candidates.get(key)
            cands = () if layout.averages[key] is not None else tuple(
                named) if named else tuple(
                k for k in layout.model if k in entries and k != key
                and entries[k].shape == entry.shape and entries[k].dtype == entry.dtype
                and (layout.trainable.get(k) or k in layout.frozen))
            out[key] = RoleInfo(EMA, ema_of=layout.averages[key], ema_style="keras",
                                candidates=cands)
        elif key == layout.iteration:
            out[key] = RoleInfo(STEP)
        elif key in layout.slots:
            out[key] = RoleInfo(OPTIMIZER_SLOT, slot_of=layout.slots[key])
        elif key in layout.trainable:
            last = layout.paths.get(key, key).rsplit("/", 1)[-1]
            if not layout.trainable[key] and last in _BN_NAMES:
                out[key] = RoleInfo(BN_STAT)
            elif layout.kind == "keras3" and entry.extra.get("index") is None:
                # a named constant a layer saves (TextVectorization's idf_weights), not one
                # of model.weights
                out[key] = RoleInfo(OTHER)
            else:
                out[key] = RoleInfo(WEIGHT if entry.dtype_name in _FLOAT else OTHER)
        else:  # learning_rate, variables of nested optimizers
            out[key] = RoleInfo(OTHER)
    return out
