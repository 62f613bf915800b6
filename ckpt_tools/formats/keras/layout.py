"""What each tensor of a Keras weight file is: model weight, optimizer state or EMA copy.

Keras 3 stores values by position, never by name. What Keras 3.15 writes (checked by
``fixtures/make_keras_fixtures.py``):

- a layer's ``vars/<i>``: its trainable variables, then its non-trainable ones
  (BatchNormalization: ``gamma``, ``beta``, ``moving_mean``, ``moving_variance``; ``gamma``/``beta``
  absent when ``scale``/``center`` is off);
- the layers of a Sequential/Functional model sit in ``layers/<snake_case class name>[_N]``
  (``dense``, ``dense_1``…; ``_N`` counts per class, in model order); other sublayers sit under
  their attribute name (``query_dense``), visited alphabetically, which can differ from the
  order of ``model.trainable_variables``: such sublayers are paired by shape only;
- ``optimizer/vars/<i>`` is ``optimizer.variables``: ``iteration``, ``learning_rate`` (only when it
  is a float, not a schedule), then with ``use_ema=True`` one ``<path>_average`` per trainable
  variable in ``model.trainable_variables`` order, then ``gradient_accumulator`` copies (with
  ``gradient_accumulation_steps``), then the slots: SGD ``momentum`` per variable, Adam
  ``momentum`` and ``velocity`` interleaved per variable, and so on (``_SLOTS``).

Whether ``use_ema`` was on comes from ``config.json`` in a ``.keras`` archive; for a bare
``.weights.h5`` it is inferred from the count and shapes of the optimizer variables, and left
unknown (``None``) when two settings would write the same layout. Legacy ``.h5`` files name
every variable (``adam/dense_kernel_average``), so they are paired by name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import EmaError, VariableNotFoundError
from ..entry import TensorEntry
from .optimizer import FLOATS as _FLOATS
from .optimizer import OPTIMIZER_NAMES, Spec, fitting_use_ema, infer_use_ema, plan_optimizer

__all__ = ["KerasLayout", "Spec", "analyze", "check_stated", "fitting_use_ema",
           "infer_use_ema", "stated_keys", "to_snake_case"]

_BN = frozenset({"batch_normalization", "sync_batch_normalization"})
_STATS = frozenset({"moving_mean", "moving_variance"})
# Variable names per layer class (snake_case), in vars/<i> order; None: non-trainable names.
_VAR_NAMES = {
    **{c: ("kernel", "bias") for c in (
        "dense", "einsum_dense", "conv1d", "conv2d", "conv3d", "conv1d_transpose",
        "conv2d_transpose", "conv3d_transpose", "depthwise_conv1d", "depthwise_conv2d")},
    "separable_conv1d": ("depthwise_kernel", "pointwise_kernel", "bias"),
    "separable_conv2d": ("depthwise_kernel", "pointwise_kernel", "bias"),
    "embedding": ("embeddings",),
    "layer_normalization": ("gamma", "beta"),
    "group_normalization": ("gamma", "beta"),
    "p_re_lu": ("alpha",),
}
# Recurrent cells (the ``cell`` of LSTM/GRU/SimpleRNN/ConvLSTM, which name it themselves):
# not in ``_ORDERS``, since a 3-variable layer of unknown class need not be a cell.
_CELL_NAMES = {c: ("kernel", "recurrent_kernel", "bias") for c in (
    "lstm_cell", "gru_cell", "simple_rnn_cell", "conv_lstm_cell")}
_FROZEN_CLASSES = {"normalization": ("mean", "variance", "count")}
# config.json records a built-in layer by its exported name; the weights file's
# layers/<snake_case name> by its class name (Keras 3.15: only this one differs).
_EXPORT_NAMES = {"GroupQueryAttention": "GroupedQueryAttention"}
# Built-in layers whose sublayers Keras saves by attribute name (alphabetically) but tracks,
# and so trains, in the order their code creates them (Keras 3.15 source): (attribute, the
# name the layer gives that sublayer, or a prefix of it ending in "_") in tracking order.
# MultiHeadAttention/GroupedQueryAttention.build: query, key, gate (use_gate), value, output;
# Bidirectional.__init__: forward_layer, then backward_layer.
_ATTENTION = (("query_dense", "query"), ("key_dense", "key"), ("gate_dense", "gate"),
              ("value_dense", "value"), ("output_dense", "attention_output"))
_FIXED_SUBLAYERS = {
    "multi_head_attention": _ATTENTION,
    "grouped_query_attention": _ATTENTION,
    "bidirectional": (("forward_layer", "forward_"), ("backward_layer", "backward_")),
}
# Every layer's variables in vars/<i> order, by count: a stated ``bn/gamma`` names index 0 of a
# 4-variable layer the file names by index only (its class unknown), when all orders agree.
_ORDERS = sorted({*_VAR_NAMES.values(), ("kernel",), *_FROZEN_CLASSES.values(),
                  ("gamma", "beta", "moving_mean", "moving_variance"),
                  ("gamma", "moving_mean", "moving_variance"),
                  ("beta", "moving_mean", "moving_variance")})
def to_snake_case(name: str) -> str:
    """Keras' ``naming.to_snake_case``: ``BatchNormalization`` -> ``batch_normalization``."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


@dataclass
class KerasLayout:
    """The meaning of every key of a Keras weight file (built by :func:`analyze`).

    Attributes:
        kind: ``"keras3"`` or ``"legacy"``.
        order: every key, model weights first (in Keras save order), then optimizer variables.
        model: model weight keys; ``trainable``: key -> trainable (as far as the file tells).
        paths: key -> readable Keras path (``dense/kernel``, ``sgd/dense_kernel_average``).
        optimizer_vars: optimizer variable keys in ``optimizer.variables`` order.
        optimizer: snake_case optimizer class, when known; ``optimizer_config``: its config.
        use_ema: whether the optimizer kept EMA copies (``None``: the file cannot tell).
        ema_evidence: where ``use_ema`` (and the pairing) came from, in words.
        ema_source: ``"config"`` (``config.json``), ``"layout"`` (the optimizer variables'
            count, shapes and dtypes) or ``"stated"`` (the caller's ``use_ema``).
        averages: EMA copy key -> model weight key (``None`` where it cannot be paired).
        frozen: weights of layers the config marks ``trainable=False`` (the state when the file
            was saved): the optimizer still holds copies of those frozen after it was built.
        slots: optimizer slot key -> model weight key (``None`` where unknown).
        notes: why something could not be worked out.
        ordered: ``model`` is in ``model.weights`` order throughout (no sublayers whose order
            the file does not record), so position ``i`` of a live model's weights is
            ``model[i]``.
        configured: a ``config.json`` (or legacy model config) says which layers were
            trainable when the file was saved.
        flags: the config lists the model's layers with their ``trainable`` flags (a
            Sequential/Functional model; a subclassed model's config records none).
        frozen_unproven: the flags config.json records (those at save) fit the averages, but
            so does another set of layers of the same shapes: the flags may have changed
            since the optimizer was built, so the pairings they disagree on are left open.
        unordered: key -> (bag, sublayer) for weights of sublayers whose order the file does
            not record (attributes, visited alphabetically): two weights of the same bag but
            different sublayers have no proven relative order.
        tf_keras: a tf_keras (Keras 2) ``.keras`` archive.
        optimizer_module: the optimizer's module and class as config.json records them
            (``keras.optimizers.legacy.Adam`` for a tf_keras legacy optimizer), or ``""``.
        attached: optimizers the model keeps as attributes (the keras.io GAN's
            ``d_optimizer``/``g_optimizer``): attribute path -> optimizer name. Their
            variables are in ``other``, never model weights.
        candidates: EMA copy key -> the weights it may average, where the file narrows them
            (a legacy ``.h5`` copy names its weight, which several layers share); elsewhere an
            unpaired copy's candidates are the weights of its shape and dtype.
    """

    kind: str
    order: list[str] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    trainable: dict[str, bool] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    optimizer_vars: list[str] = field(default_factory=list)
    optimizer: str | None = None
    optimizer_config: dict | None = None
    iteration: str | None = None
    learning_rate: str | None = None
    ema_offset: int = 0
    use_ema: bool | None = None
    ema_evidence: str = ""
    ema_source: str = ""  # "config", "layout" or "stated"
    averages: dict[str, str | None] = field(default_factory=dict)
    frozen: list[str] = field(default_factory=list)
    slots: dict[str, str | None] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)
    var_names: dict[str, str] = field(default_factory=dict)  # optimizer key -> Keras var name
    notes: list[str] = field(default_factory=list)
    ordered: bool = True
    configured: bool = False
    flags: bool = False
    frozen_unproven: bool = False
    unordered: dict[str, tuple] = field(default_factory=dict)
    tf_keras: bool = False
    optimizer_module: str = ""
    attached: dict[str, str] = field(default_factory=dict)
    candidates: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class _Node:
    path: str
    keys: list[str] = field(default_factory=list)
    name: str | None = None
    cls: str | None = None
    cfg: dict | None = None
    frozen: bool = False
    ordered: list[_Node] = field(default_factory=list)
    bag: list[_Node] = field(default_factory=list)


def analyze(entries: dict[str, TensorEntry], kind: str, config: dict | None = None,
            owner_names: dict[str, str] | None = None, *, read=None,
            use_ema: bool | None = None, tf_keras: bool = False,
            trainable: Sequence[str] | None = None) -> KerasLayout:
    """Works out what each key of a Keras weight file is (metadata only, no tensor data).

    Args:
        entries: key -> entry, as :class:`~ckpt_tools.formats.keras.h5.H5Reader` scans them
            (``extra`` holds
            ``owner``, ``index``, ``section`` and, for legacy files, ``weight_name``).
        kind: ``"keras3"`` or ``"legacy"``.
        config: ``config.json`` of a ``.keras`` archive (or a legacy file's model/training
            config), if any.
        owner_names: Keras 3 only: group path -> ``name`` attribute of its ``vars`` group.
        read: key -> array; gives the stored iteration count (a trained optimizer without
            per-variable state). Values never decide a pairing or ``use_ema``.
        use_ema: the caller's statement of the optimizer's ``use_ema`` (``None``: infer).
        tf_keras: a ``.keras`` archive tf_keras wrote: the optimizer variables are left to
            :func:`~ckpt_tools.formats.keras.tf_keras.adjust` (another layout).
        trainable: the caller's statement of the weights the optimizer was built with
            (a legacy ``.h5``: full weight keys, with or without ``model_weights/``), in
            ``model.trainable_variables`` order (object paths as ``paths`` gives them, or a
            prefix/segment naming a layer for all its weights). Replaces what the file
            records or leaves open (frozen layers, sublayer order).

    Raises:
        VariableNotFoundError: a ``trainable`` name matches no weight, or one already matched.

    Returns:
        `KerasLayout`.
    """
    if kind == "legacy":
        lay = _analyze_legacy(entries, config, trainable)
        if use_ema is not None and use_ema != lay.use_ema:
            lay.notes.append(f"use_ema={use_ema} was stated, but the optimizer variable names "
                             f"say use_ema={lay.use_ema}")
        return lay
    return _analyze_keras3(entries, config, owner_names or {}, read, use_ema, tf_keras,
                           trainable)


# -- Keras 3 ---------------------------------------------------------------------------------
def _optimizer_config(config: dict | None) -> tuple[str | None, dict | None]:
    opt = ((config or {}).get("compile_config") or {}).get("optimizer")
    if isinstance(opt, dict) and "class_name" in opt:
        return to_snake_case(opt["class_name"]), opt.get("config") or {}
    return None, None


_INNER = "optimizer/inner_optimizer"  # LossScaleOptimizer (mixed_float16) wraps the optimizer


def _analyze_keras3(entries, config, owner_names, read, use_ema, tf_keras,
                    trainable=None) -> KerasLayout:
    lay = KerasLayout("keras3")
    lay.attached = _attached_optimizers(entries, owner_names)
    model = {k: e for k, e in entries.items() if e.extra.get("section") == "model"
             and _owner_of(e.extra.get("owner"), lay.attached) is None}
    owner_names = {o: n for o, n in owner_names.items()
                   if _owner_of(o, lay.attached) is None}
    root = _tree(model, config, owner_names, lay.notes)
    segments: list[tuple[str, list[str]]] = []
    groups: dict[int, list[list[str]]] = {}
    _flatten(root, segments, groups)
    lay.model = [k for _, keys in segments for k in keys]
    lay.ordered = all(kind == "seq" for kind, _ in segments)
    for seg, (kind, keys) in enumerate(segments):
        if kind == "bag":
            part = {k: i for i, ks in enumerate(groups.get(seg) or []) for k in ks}
            for k in keys:  # unknown sublayers: a layer's own weights keep their order
                lay.unordered[k] = (seg, part.get(k, model[k].extra.get("owner")))
    lay.configured = config is not None
    lay.flags = isinstance((root.cfg or {}).get("layers"), list)
    _name_vars(root, model, lay, prefix=[root.name] if root.cls == "sequential" and root.name
               else [])
    if not tf_keras:  # tf_keras names its nested models' weights its own way (tf_keras.py)
        _distinct_paths(lay, model)
    lay.optimizer, lay.optimizer_config = _optimizer_config(config)
    module = (((config or {}).get("compile_config") or {}).get("optimizer") or {})
    if isinstance(module, dict):
        lay.optimizer_module = f"{module.get('module') or ''}.{module.get('class_name') or ''}"
    # mixed_float16: LossScaleOptimizer's own vars/ repeat the wrapped optimizer's variables
    # after its loss-scale state; the wrapped optimizer's vars/ hold them in the plain layout.
    owner = _INNER if any(e.extra.get("owner") == _INNER for e in entries.values()) \
        else "optimizer"
    if owner == _INNER:
        lay.notes.append("LossScaleOptimizer (mixed precision): the wrapped "
                         f"{owner_names.get(_INNER) or 'optimizer'}'s variables are used")
        if lay.optimizer == "loss_scale_optimizer":
            inner = (lay.optimizer_config or {}).get("inner_optimizer") or {}
            lay.optimizer = to_snake_case(inner.get("class_name", "")) or None
            lay.optimizer_config = inner.get("config") if lay.optimizer else None
    if lay.optimizer is None and owner_names.get(owner):
        lay.optimizer = re.sub(r"_\d+$", "", owner_names[owner])
    opt = sorted((k for k, e in entries.items() if e.extra.get("owner") == owner),
                 key=lambda k: entries[k].extra.get("index") or 0)
    lay.optimizer_vars = opt
    lay.other = [k for k, e in entries.items()
                 if (e.extra.get("section") == "optimizer" and k not in opt)
                 or _owner_of(e.extra.get("owner"), lay.attached) is not None]
    if lay.attached:
        lay.notes.append(
            f"the model keeps {len(lay.attached)} optimizer(s) as attributes ("
            + ", ".join(f"{a} ({n})" for a, n in lay.attached.items())
            + "): which weights each was built with is not recorded in a Keras weight file, "
            "so their variables (EMA copies with use_ema=True) are not paired from it; "
            "save them in a tf.train.Checkpoint (model=..., and each optimizer), which "
            "records it")
    elif lay.other and owner != _INNER:
        lay.notes.append(f"{len(lay.other)} variables of nested optimizers are not interpreted")
    # Every weight the optimizer may have been built with, in model.weights order: the
    # trainable ones and those of layers frozen since (config.json records trainable as saved).
    frozen = set(lay.frozen)
    trained = [(k, seg) for seg, (_kind, keys) in enumerate(segments) for k in keys
               if lay.trainable[k] or k in frozen]
    if tf_keras:
        lay.order = lay.model + opt + lay.other
        return lay
    if trainable:
        keys = stated_keys(lay, trainable, {k for k, _ in trained})
        if lay.flags and lay.ordered:
            found = _analyze_keras3(entries, config, owner_names, read, use_ema, tf_keras)
            proven = list(found.averages.values()) if found.averages and None not in \
                found.averages.values() else None
            check_stated(lay, keys, [k for k, _ in trained], proven)
        lay.trainable.update({k: k in set(keys) for k in lay.model})
        lay.frozen, segments, groups = [], [("seq", keys)], {}
        trained = [(k, 0) for k in keys]
        lay.notes.append(f"the {len(keys)} weights the optimizer was built with, in order, "
                         "were stated by the caller (--trainable)")
    plan_optimizer(lay, opt, entries, trained, segments, read=read, use_ema=use_ema,
                   bag_groups=groups, stated=bool(trainable),
                   layers=_layers(trained, segments, groups))
    lora = _lora_layers(config)
    if lora and lay.use_ema and (not lay.averages or None in lay.averages.values()):
        # Keras saves a LoRA layer's kernel merged with a_raw @ b_raw and not its factors:
        # no --trainable (nor apply_keras_ema) can give base + a_ema @ b_ema from this file.
        lay.notes = [n for n in lay.notes if "apply_keras_ema" not in n] + [
            f"layer(s) {', '.join(lora[:4])} have LoRA enabled (lora_rank in config.json): "
            "Keras saves their kernel merged with the LoRA update and not its factors, so the "
            "EMA copies cannot be paired with weights they apply to from this file (no "
            "--trainable fits, and "
            "apply_keras_ema refuses); use the run's tf.train.Checkpoint (ckpt restore-ema, "
            "apply_ema), which keeps the base kernel and the factors"]
    opt_name = (owner_names.get(owner) or (lay.optimizer_config or {}).get("name")
                or "optimizer")
    for key, name in lay.var_names.items():
        src = (lay.averages | lay.slots).get(key)
        if src or name in ("iteration", "learning_rate"):
            lay.paths[key] = (f"{opt_name}/{lay.paths[src].replace('/', '_')}_{name}" if src
                              else f"{opt_name}/{name}")
    lay.order = lay.model + opt + lay.other
    return lay


def _attached_optimizers(entries, owner_names: dict[str, str]) -> dict[str, str]:
    """Optimizers a model keeps as attributes (outside ``optimizer/``): attribute path ->
    name. An optimizer's ``vars/0`` is its int64 scalar ``iteration`` and Keras names it
    after its class (``adam``, ``adam_1``); a layer with an int64 first variable and such
    a name is not told apart (nor is one needed: it would hold a step, not a weight)."""
    found: dict[str, str] = {}
    for e in entries.values():
        owner = e.extra.get("owner") or ""
        name = owner_names.get(owner) or ""
        if (e.extra.get("index") == 0 and owner and owner.split("/")[0] != "optimizer"
                and e.extra.get("section") == "model" and tuple(e.shape) == ()
                and e.dtype_name == "int64"
                and re.sub(r"_\d+$", "", name) in OPTIMIZER_NAMES):
            found[owner] = name
    return found


def _owner_of(owner: str | None, attached: dict[str, str]) -> str | None:
    """The attached optimizer ``owner`` belongs to (itself or a wrapped inner optimizer)."""
    if not owner or not attached:
        return None
    return next((a for a in attached if owner == a or owner.startswith(a + "/")), None)


def _lora_layers(config) -> list[str]:
    """Names of the layers config.json records with LoRA enabled (a ``lora_rank``)."""
    found: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            cfg = node.get("config")
            if isinstance(cfg, dict) and cfg.get("lora_rank"):
                found.append(str(cfg.get("name", node.get("class_name", "?"))))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(config)
    return found


def _layers(trained, segments, groups) -> list[list[int]]:
    """Indexes into ``trained`` of each layer's weights, in model order: a ``seq`` segment is
    one layer's weights; a bag's sublayers where known, else each weight alone."""
    pos = {k: i for i, (k, _) in enumerate(trained)}
    out = []
    for seg, (kind, keys) in enumerate(segments):
        parts = [keys] if kind == "seq" else (groups.get(seg) or [[k] for k in keys])
        for part in parts:
            idx = [pos[k] for k in part if k in pos]
            if idx:
                out.append(idx)
    return out


def check_stated(lay: KerasLayout, keys: list[str], possible: list[str],
                  proven: list[str] | None) -> None:
    """Refuses a ``--trainable`` that contradicts what a Sequential/Functional config.json
    records: the order of ``model.weights`` (Keras builds ``trainable_variables`` in it) and,
    where the file proves them (``proven``: the weights its averages pair with, one set of
    layers fitting), the weights the optimizer was built with. Where several sets of layers
    fit (flags changed since the optimizer was built), the caller's set decides.

    Raises:
        EmaError: the stated order or set differs from the file's (exit 6, naming both).
    """
    from ...errors import EmaError

    def show(ks):
        return ", ".join(lay.paths.get(k, k) for k in ks[:4]) + (" ..." if len(ks) > 4 else "")

    pos = {k: i for i, k in enumerate(lay.model)}
    for a, b in zip(keys, keys[1:], strict=False):
        if pos[a] > pos[b]:
            raise EmaError(
                f"--trainable contradicts config.json: it states {show([a])} before "
                f"{show([b])}, but the model's weights (and so its trainable_variables) come "
                "in the other order; omit --trainable (the .keras records it) or state them "
                "in model order")
    if proven is None or set(keys) == set(proven):
        return
    now = [k for k in possible if lay.trainable.get(k)]
    raise EmaError(
        f"--trainable contradicts config.json: it states {len(keys)} weights ({show(keys)}), "
        f"but the file proves the optimizer was built with {len(proven)} ({show(proven)}; "
        f"{len(now)} trainable at save"
        + (f", {len(proven) - len(now)} of layers frozen since" if len(proven) > len(now)
           else "")
        + ", no other set of layers fits the averages' shapes); omit --trainable (the .keras "
        "records which layers were frozen)")


def stated_keys(lay: KerasLayout, names: Sequence[str], possible: set[str]) -> list[str]:
    """Model weight keys for the caller's names, in the order given.

    A name is a weight's key or object path as ``ckpt list`` shows it (``dense/kernel``), a
    layer's path (``dense``, ``encoder/block_1``) standing for its weights that can be
    trainable (``possible``; not BatchNormalization statistics) in file order, or a live
    model's ``variable.path`` (``net/blk/proj/kernel``): leading segments the file does not
    record (the model's name) are dropped, and a variable name the file does not record
    (``vars/0`` holds ``kernel``) stands for its layer's weights.

    Raises:
        VariableNotFoundError: a name matches no weight, or only weights already matched.
        EmaError: a name matches several weights (two sub-models' ``dense/kernel``), or a
            layer name would stand for weights of sublayers whose order the file does not
            record.
    """
    from ...errors import EmaError, VariableNotFoundError

    shown: dict[str, list[str]] = {}
    for k in lay.model:
        shown.setdefault(lay.paths.get(k, k), []).append(k)
    keys: list[str] = []
    last_layer: str | None = None
    # A Sequential's paths start with the model's name (s/a/kernel), which a model from
    # keras.models.load_model does not put in its variable paths (a/kernel): try both.
    firsts = {p.split("/", 1)[0] if "/" in p else None for p in shown}
    roots = [""] + [f"{r}/" for r in firsts if r and len(firsts) == 1]

    def find(name: str) -> tuple[list[str], str | None]:
        parts = name.split("/")
        for i in range(len(parts)):
            for root in roots:
                s = root + "/".join(parts[i:])
                if s in lay.model:
                    return [s], None
                if s in shown:
                    if len(shown[s]) > 1:  # two sub-models' dense/kernel: never pick one
                        raise EmaError(
                            f"--trainable {name!r} matches {len(shown[s])} weights: "
                            f"{', '.join(shown[s])}; state the one meant by that key")
                    return list(shown[s]), None
                under = [k for k in lay.model if k in possible
                         and lay.paths.get(k, k).startswith(s + "/")]
                if under:
                    _proven_order(name, s, under)
                    return under, s
        return by_suffix(name)

    def by_suffix(name: str) -> tuple[list[str], str | None]:
        """A tf_keras variable name (``fc/kernel:0``) leaves out the sub-models that hold its
        layer (``enc/fc/kernel``): the one weight or layer whose path ends with it, and a
        refusal where several do (two sub-models' ``fc``), never a pick."""
        tail = "/" + re.sub(r":\d+$", "", name)
        weights = [p for p in shown if ("/" + p).endswith(tail)]
        layers: set[str] = set()
        for p in shown:
            q = "/" + p + "/"
            at = q.find(tail + "/")
            while at >= 0:
                layers.add(q[1:at + len(tail)])
                at = q.find(tail + "/", at + 1)
        hits = weights or sorted(layers - set(shown))
        if len(hits) > 1:
            raise EmaError(
                f"--trainable {name!r} matches {len(hits)} " + ("weights" if weights else
                                                                   "layers")
                + f": {', '.join(hits[:6])}; state the one meant by its full path")
        return find(hits[0]) if hits else ([], None)

    def _proven_order(name: str, s: str, under: list[str]) -> None:
        """Refuses a layer standing for the weights of several sublayers whose order the
        file does not record (attributes, saved alphabetically: a residual block's up/down,
        Bidirectional's forward/backward): file order is not Keras' training order."""
        bags: dict[object, set] = {}
        for k in under:
            if k in lay.unordered:
                bag, part = lay.unordered[k]
                bags.setdefault(bag, set()).add(part)
        if any(len(parts) > 1 for parts in bags.values()):
            subs = sorted({lay.paths.get(k, k).rsplit("/", 1)[0] for k in under})
            raise EmaError(
                f"--trainable {name!r} stands for the weights of several sublayers ("
                f"{', '.join(subs[:4])}{' ...' if len(subs) > 4 else ''}) whose order the file "
                f"does not record, so {s!r} cannot stand for them: state its weights one by one "
                "in Keras' order, as [v.path for v in model.trainable_variables] prints them")

    def unnamed(head: str, var: str) -> list[str]:
        """The weight ``var`` of layer ``head`` whose variables the file names by index
        only (a subclassed model's BatchNormalization: bn/0..3): Keras' fixed order of that
        layer's variables gives it (gamma, beta, moving_mean, moving_variance)."""
        parts = head.split("/")
        for i in range(len(parts)):
            for root in roots:
                s = root + "/".join(parts[i:])
                own = sorted((k for k in lay.model
                              if re.fullmatch(re.escape(s) + r"/\d+", lay.paths.get(k, k))),
                             key=lambda k: int(lay.paths.get(k, k).rsplit("/", 1)[1]))
                if own:
                    at = {names.index(var) for names in _ORDERS
                          if len(names) == len(own) and var in names}
                    return [own[at.pop()]] if len(at) == 1 else []
        return []

    for raw in names:
        name = raw.strip().strip("/")
        if not name:
            continue
        hit, layer = find(name)
        if not hit and "/" in name and last_layer is not None \
                and find(name.rsplit("/", 1)[0])[1] == last_layer:
            continue  # the next variable of the layer the previous name stood for
        if not hit and "/" in name:
            hit = unnamed(*name.rsplit("/", 1))
            layer = None
        if not hit and "/" in name:  # a variable name the file does not record
            hit, layer = find(name.rsplit("/", 1)[0])
        if not hit:
            raise VariableNotFoundError(
                f"--trainable {name!r} names no weight of the file (names as 'ckpt list' shows "
                f"them, e.g. {', '.join(lay.paths.get(k, k) for k in lay.model[:3])})")
        again = [k for k in hit if k in keys]
        if again:
            raise VariableNotFoundError(
                f"--trainable {name!r} names {lay.paths.get(again[0], again[0])}, which an "
                "earlier name already stated")
        keys += hit
        last_layer = layer
    return keys


def _tree(model, config, owner_names, notes) -> _Node:
    owners = set(owner_names) | {e.extra["owner"] for e in model.values()}
    owners = {o for o in owners if o.split("/")[0] != "optimizer"}
    # A nested model's own directory holds no variables (tf_keras writes no name attribute
    # either): add it, so its layers hang under it and its config (trainable flag) applies.
    owners |= {"/".join(o.split("/")[:i]) for o in owners
               for i in range(2, o.count("/") + 1, 2)
               if re.fullmatch(r"(?:layers/[^/]+/)*layers/[^/]+", "/".join(o.split("/")[:i]))}
    nodes = {o: _Node(o, name=owner_names.get(o)) for o in owners}
    root = nodes.setdefault("", _Node("", name=owner_names.get("")))
    if config:
        root.cls = to_snake_case(config.get("class_name", ""))
        root.cfg = config.get("config") or {}
        root.frozen = root.cfg.get("trainable") is False
    for key, e in model.items():
        nodes[e.extra["owner"]].keys.append(key)
    for n in nodes.values():
        n.keys.sort(key=lambda k: model[k].extra.get("index") or 0)
    for path in sorted(nodes, key=lambda p: p.count("/")):
        if not path:
            continue
        parts = path.split("/")
        parent = next(nodes["/".join(parts[:i])] for i in range(len(parts) - 1, -1, -1)
                      if "/".join(parts[:i]) in nodes)
        rel = path[len(parent.path) + 1:] if parent.path else path
        node = nodes[path]
        if re.fullmatch(r"layers/[^/]+", rel):
            parent.ordered.append(node)
            node.cls = re.sub(r"_\d+$", "", rel[len("layers/"):])
        else:
            parent.bag.append(node)
            base = rel.rsplit("/", 1)[-1].lstrip("_")
            node.cls = base if base in _VAR_NAMES else (
                "einsum_dense" if base.endswith("dense") else None)
            if base == "cell" and node.name in _CELL_NAMES:
                node.cls = node.name  # LSTM names its cell "lstm_cell" itself
            elif node.cls is None:
                node.cls = _class_by_name(node, model)
    _order(root, model, notes)
    return root


def _class_by_name(node: _Node, model) -> str | None:
    """The class of a sublayer held as an attribute (``self.bn``), from the name Keras gives
    a layer by default (``batch_normalization_3``: its snake_case class), where its own
    variables' shapes fit that class: a BatchNormalization's 2-4 variables share one 1-D
    shape (so its moving statistics are not taken for trained weights)."""
    base = re.sub(r"_\d+$", "", node.name or "")
    shapes = [tuple(model[k].shape) for k in node.keys]
    if base in _BN and 2 <= len(shapes) <= 4 and len(set(shapes)) == 1 \
            and len(shapes[0]) == 1:
        return base
    return None


def _first_offset(node: _Node, model) -> float:
    offs = [model[k].extra.get("file_offset") for k in node.keys]
    offs = [o for o in offs if o is not None]
    offs += [_first_offset(c, model) for c in node.ordered + node.bag]
    return min(offs, default=float("inf"))


def _order(node: _Node, model, notes) -> None:
    layer_cfgs = (node.cfg or {}).get("layers") if isinstance(node.cfg, dict) else None
    by_name: dict[str, tuple[int, dict]] = {}
    if isinstance(layer_cfgs, list):
        used: dict[str, int] = {}
        for i, lc in enumerate(layer_cfgs):
            name = lc.get("class_name", "")
            base = to_snake_case(_EXPORT_NAMES.get(name, name))
            used[base] = used.get(base, -1) + 1
            by_name[f"{base}_{used[base]}" if used[base] else base] = (i, lc)
    for child in node.ordered:
        hit = by_name.get(child.path.rsplit("/", 1)[-1])
        if hit:
            child.cfg = hit[1].get("config") or {}
            cls = hit[1].get("class_name", "")
            child.cls = to_snake_case(_EXPORT_NAMES.get(cls, cls)) or child.cls
            if child.name is None and isinstance(child.cfg.get("name"), str):
                child.name = child.cfg["name"]  # tf_keras: the layer's name (enc, fc)
        child.frozen = node.frozen or (child.cfg or {}).get("trainable") is False
    for child in node.bag:
        child.frozen = node.frozen
    lost = [c for c in node.ordered if c.path.rsplit("/", 1)[-1] not in by_name and _holds(c)]
    if by_name and lost:  # never place a layer config.json does not list by a guess
        notes.append(f"config.json does not list the layer(s) {', '.join(c.path for c in lost)}"
                     "; EMA copies there are paired by shape only")
        node.bag, node.ordered = node.ordered + node.bag, []
    elif by_name:
        node.ordered.sort(key=lambda c: by_name.get(c.path.rsplit("/", 1)[-1],
                                                    (len(by_name), {}))[0])
    else:  # no config: Keras writes layers in model order, so data offsets follow it
        node.ordered.sort(key=lambda c: (_first_offset(c, model), _suffix(c)))
        last: dict[str, int] = {}
        for c in node.ordered:
            base, n = _suffix(c)
            if _first_offset(c, model) == float("inf"):
                continue  # holds no data: its place does not matter
            if n < last.get(base, -1):
                notes.append(f"cannot tell the order of the layers under {node.path or 'the root'}"
                             "; EMA copies there are paired by shape only")
                node.bag, node.ordered = node.ordered + node.bag, []
                break
            last[base] = n
    node.bag.sort(key=lambda c: ("~" + c.path) if c.path.rsplit("/", 1)[-1].startswith("_")
                  else c.path)  # saving_lib._name_key: attributes alphabetically, private last
    fixed = _fixed_order(node)
    if fixed is not None:
        node.ordered, node.bag = fixed, []
    for child in node.ordered + node.bag:
        _order(child, model, notes)


def _fixed_order(node: _Node) -> list[_Node] | None:
    """The sublayers of ``node`` in Keras' tracking order where Keras fixes it, else ``None``.

    A layer holding exactly one sublayer (an RNN's ``cell``) and no ``layers/`` list: its own
    weights come first, then the sublayer's (``Layer.weights``). A built-in layer of
    ``_FIXED_SUBLAYERS``: proven by its sublayers' attribute names and the names that layer
    gives them (``query``, ``attention_output``; ``forward_lstm``), which a custom layer with
    other sublayers does not match; a class known from the path or config.json must be that
    one (a subclass may build its sublayers in another order).
    """
    if node.ordered or not node.bag:
        return None
    held = [c for c in node.bag if _holds(c)]  # a Dropout/Softmax holds nothing: no place
    empty = [c for c in node.bag if c not in held]
    if len(held) <= 1:
        return held + empty
    attrs = {c.path.rsplit("/", 1)[-1].lstrip("_"): c for c in held}
    for cls, table in _FIXED_SUBLAYERS.items():
        if node.cls is not None and node.cls != cls:
            continue  # a class the file names (a subclass, a custom layer) may order them anew
        names = dict(table)
        if len(attrs) != len(held) or not set(attrs) <= set(names):
            continue
        if not all(c.name == names[a] or (names[a].endswith("_") and c.name is not None
                                          and c.name.startswith(names[a]))
                   for a, c in attrs.items()):
            continue
        required = {a for a, _ in table} - {"gate_dense"}
        if required <= set(attrs):
            return [attrs[a] for a, _ in table if a in attrs] + empty
    return None


def _holds(node: _Node) -> bool:
    """Whether ``node`` or a sublayer of it holds weights."""
    return bool(node.keys) or any(_holds(c) for c in node.ordered + node.bag)


def _suffix(node: _Node) -> tuple[str, int]:
    m = re.fullmatch(r"(.*?)(?:_(\d+))?", node.path.rsplit("/", 1)[-1])
    return m.group(1), int(m.group(2) or 0)


def _flatten(node: _Node, out: list[tuple[str, list[str]]],
             groups: dict[int, list[list[str]]] | None = None) -> None:
    """Model weight keys in ``model.weights`` order, as ("seq"|"bag", keys) runs.

    ``groups`` gets, for each bag whose sublayers hold no bag themselves, the keys of each
    sublayer in their own (known) order: Keras builds ``trainable_variables`` sublayer by
    sublayer, so only the order of these groups is unknown.
    """
    if node.keys:
        out.append(("seq", list(node.keys)))
    if node.bag:
        inner: list[tuple[str, list[str]]] = []
        parts: list[list[str]] = []
        for child in node.ordered + node.bag:
            mine: list[tuple[str, list[str]]] = []
            _flatten(child, mine)
            inner += mine
            if mine:
                parts.append([k for kind, ks in mine for k in ks] if all(
                    kind == "seq" for kind, _ in mine) else [])
        keys = [k for _, ks in inner for k in ks]
        if keys:
            if groups is not None and all(parts):
                groups[len(out)] = parts
            out.append(("bag", keys))
    else:
        for child in node.ordered:
            _flatten(child, out, groups)


def _var_names(node: _Node, n: int) -> list[tuple[str | None, bool]]:
    cfg = node.cfg or {}
    if node.cls in _BN:
        if node.cfg:
            lead = (["gamma"] if cfg.get("scale", True) else []) + (
                ["beta"] if cfg.get("center", True) else [])
        else:  # 3 variables: gamma or beta (scale/center off), which is unknown here
            lead = {4: ["gamma", "beta"], 3: [None]}.get(n, [None] * max(n - 2, 0))
        out = [(v, True) for v in lead] + [("moving_mean", False), ("moving_variance", False)]
        return (out + [(None, True)] * n)[:n]
    if node.cls in _FROZEN_CLASSES:
        return [(v, False) for v in _FROZEN_CLASSES[node.cls][:n]] + [(None, False)] * (
            n - len(_FROZEN_CLASSES[node.cls]))
    names = list(_VAR_NAMES.get(node.cls, _CELL_NAMES.get(node.cls, ())))
    if names and cfg.get("use_bias") is False and "bias" in names:
        names.remove("bias")
    return [(v, True) for v in names[:n]] + [(None, True)] * (n - len(names))


def _name_vars(node: _Node, model, lay: KerasLayout, prefix: list[str]) -> None:
    chain = prefix + ([node.name] if node.path and node.name else [])
    # A subclassed model's own weights (self.add_weight in the model): Keras' path is
    # <model name>/<variable name> (net/mix); the file records the name only, not "mix".
    own = chain or ([node.name] if not node.path and node.name else [])
    for key, (var, trainable) in zip(node.keys, _var_names(node, len(node.keys)), strict=False):
        e = model[key]
        # Named entries (TextVectorization's tf_idf ``idf_weights``) are constants a layer's
        # save_own_variables writes, not variables: the optimizer never sees them.
        constant = e.extra.get("index") is None
        could = trainable and not constant and e.dtype_name in _FLOATS
        lay.trainable[key] = could and not node.frozen
        if could and node.frozen:
            lay.frozen.append(key)
        lay.paths[key] = "/".join(own + [var or str(e.extra.get("index"))])
    for child in node.ordered + node.bag:
        _name_vars(child, model, lay, chain)


def _distinct_paths(lay: KerasLayout, model) -> None:
    """Two sublayers given the same name (``self.a = Dense(4, name="fc")``, ``self.b = ...``)
    would show, export and be stated as the same ``fc/kernel``: their weights are named by the
    attributes that hold them instead (``a/kernel``, ``b/kernel``), which the file records."""
    seen: dict[str, list[str]] = {}
    for k in lay.model:
        seen.setdefault(lay.paths[k], []).append(k)
    for keys in seen.values():
        if len(keys) < 2:
            continue
        for k in keys:
            owner = model[k].extra.get("owner") or ""
            attrs = [p for p in owner.split("/") if p and p != "layers"]
            lay.paths[k] = "/".join(attrs + [lay.paths[k].rsplit("/", 1)[-1]])


# -- legacy .h5 ------------------------------------------------------------------------------
_ITER = frozenset({"iteration", "iter", "iterations"})
_LR = frozenset({"learning_rate", "lr"})


def _analyze_legacy(entries, config, trainable=None) -> KerasLayout:
    lay = KerasLayout("legacy")
    lay.model = [k for k, e in entries.items() if e.extra.get("section") == "model"]
    lay.optimizer_vars = [k for k, e in entries.items() if e.extra.get("section") == "optimizer"]
    # tf_keras names an optimizer variable after its weight's layer/variable name only
    # (Adam/average/dense/kernel): a transfer-learning head may repeat the base's names, so a
    # name can match several weights; such a variable is never paired to "the first".
    by_path: dict[str, list[str]] = {}
    flat: dict[str, list[str]] = {}
    for key in lay.model:
        path = entries[key].extra["weight_name"]
        lay.paths[key] = path
        last = path.rsplit("/", 1)[-1]
        lay.trainable[key] = last not in _STATS and entries[key].dtype_name in _FLOATS
        by_path.setdefault(path, []).append(key)
        flat.setdefault(path.replace("/", "_"), []).append(key)
    for keys in by_path.values():
        if len(keys) > 1:  # say which layer (base/dense/kernel): list, map, export keep apart
            for key in keys:
                lay.paths[key] = key.removeprefix("model_weights/")
    stated = _legacy_stated(lay, trainable) if trainable is not None else None
    opt_cfg = ((config or {}).get("training_config") or {}).get("optimizer_config") or {}
    if opt_cfg.get("class_name"):
        lay.optimizer = to_snake_case(opt_cfg["class_name"])
        lay.optimizer_config = opt_cfg.get("config") or {}
    seen: dict[tuple[str, str], int] = {}  # (slot, weight name) -> optimizer variables so far
    for key in lay.optimizer_vars:
        name = entries[key].extra["weight_name"]
        lay.paths[key] = name
        rest = name.split("/", 1)[1] if "/" in name else name
        if rest in _ITER:
            lay.iteration = key
            continue
        if rest in _LR:
            lay.learning_rate = key
            continue
        slot, cands = _legacy_slot(rest, by_path, flat)
        target = cands[0] if len(cands) == 1 and stated is None else None
        if stated is not None and cands:
            # the caller's model.trainable_variables order: the k-th optimizer variable of
            # this slot and name belongs to the k-th stated weight of that name
            wname = entries[cands[0]].extra["weight_name"]
            k = seen.get((slot, wname), 0)
            seen[(slot, wname)] = k + 1
            mine = [w for w in stated if entries[w].extra["weight_name"] == wname]
            target = mine[k] if k < len(mine) else None
            if target is not None and entries[target].shape != entries[key].shape:
                raise EmaError(f"--trainable: {target} (shape {list(entries[target].shape)}) "
                               f"cannot be the weight of {name} (shape "
                               f"{list(entries[key].shape)}); state the weights in "
                               f"model.trainable_variables order")
        elif len(cands) > 1:
            lay.candidates[key] = tuple(cands)
            shown = ", ".join(c.removeprefix("model_weights/") for c in cands)
            lay.notes.append(
                f"{key} names {entries[cands[0]].extra['weight_name']}, the name of "
                f"{len(cands)} weights "
                f"({shown}), and the file does not record which the optimizer "
                f"built it for (a layer's trainable flag at save may differ from when the "
                f"optimizer was built); pass --trainable with the weights the optimizer was "
                f"built with, in model.trainable_variables order, as full names like these "
                f"(`ckpt list` shows them all)")
        (lay.averages if slot == "average" else lay.slots)[key] = target
    if stated is not None:
        n = sum(1 for v in lay.averages.values() if v is not None)
        if lay.averages and (n != len(lay.averages) or len(stated) != len(lay.averages)):
            raise EmaError(f"--trainable names {len(stated)} weights, but the file holds "
                           f"{len(lay.averages)} EMA copies of which {n} match the stated "
                           f"names; state every weight the optimizer was built with, in "
                           f"model.trainable_variables order")
    if lay.averages:
        lay.use_ema, lay.ema_evidence = True, "optimizer variable names (*_average)"
    else:
        lay.use_ema = bool((lay.optimizer_config or {}).get("use_ema"))
        lay.ema_evidence = "optimizer variable names (no *_average)"
    lay.order = list(entries)
    return lay


def _legacy_stated(lay: KerasLayout, names: Sequence[str]) -> list[str]:
    """The model weight keys a legacy ``--trainable`` names, in its order: each a full key
    (``model_weights/base/dense/kernel``) or one without ``model_weights/`` (``:0`` allowed).

    Raises:
        VariableNotFoundError: a name matches no weight, or one already named.
    """
    out: list[str] = []
    for raw in names:
        name = raw.removesuffix(":0").strip("/")
        hits = [k for k in lay.model if k == name or k == "model_weights/" + name]
        if len(hits) != 1 or hits[0] in out:
            raise VariableNotFoundError(
                f"--trainable {raw!r} names no weight of the file"
                + (" not already named" if hits else "")
                + f"; give full names as `ckpt list` shows them ({', '.join(lay.model[:4])}"
                + (" ..." if len(lay.model) > 4 else "") + ")")
        out.append(hits[0])
    return out


def _legacy_slot(rest: str, by_path: dict[str, list[str]], flat: dict[str, list[str]]):
    """``dense_kernel_average`` (Keras 3), ``average/dense/kernel`` (Keras 2.11+) or
    ``dense/kernel/m`` (Keras 2 legacy optimizers) -> (slot name, the model weight keys of
    that name: one, several when layers share names, or none)."""
    parts = rest.split("_")
    for i in range(len(parts) - 1, 0, -1):
        head = "_".join(parts[:i])
        if head in flat:
            return "_".join(parts[i:]), flat[head]
    first, _, tail = rest.partition("/")
    if tail in by_path:
        return first, by_path[tail]
    head, _, last = rest.rpartition("/")
    if head in by_path:
        return last, by_path[head]
    if rest.endswith(("_average", "/average")) or rest.startswith("average/"):
        return "average", []
    return rest, []
