"""A Keras 3 model as a tree of layers, read from the weight file's groups and config.json.

:func:`build_tree` hangs every weight under the layer that owns it; :func:`flatten_tree` puts
the layers in the order Keras tracks (and so trains) them, which is what pairs the optimizer's
variables, held by position, with the model's weights. Built-in layers whose sublayers Keras
saves alphabetically but creates in code order (attention, Bidirectional) use their fixed
order; a layer of unknown class keeps its sublayers unordered (``bag``), which the caller
must then refuse or have stated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .custom_order import custom_class
from .optimizer_slots import FLOATS
from .quantized import FLOAT8_STATE, INT_NAMES, bare_quantized, float8, int_quantized
from .submodel_order import submodel_units
from .wrapped import wrapped_config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .layout import KerasLayout

_BN = frozenset({"batch_normalization", "sync_batch_normalization"})
# gamma if config.json says scale, beta if center (LayerNormalization: rms_scaling, gamma only)
_SCALED = frozenset({"layer_normalization", "group_normalization"})
# Variable names per layer class (snake_case), in vars/<i> order; None: non-trainable names.
_VAR_NAMES = {
    **{c: ("kernel", "bias") for c in (
        "dense", "einsum_dense", "conv1d", "conv2d", "conv3d", "conv1d_transpose",
        "conv2d_transpose", "conv3d_transpose", "depthwise_conv1d", "depthwise_conv2d")},
    "separable_conv1d": ("depthwise_kernel", "pointwise_kernel", "bias"),
    "separable_conv2d": ("depthwise_kernel", "pointwise_kernel", "bias"),
    "embedding": ("embeddings",),
    "layer_normalization": ("gamma", "beta"),  # scale/center may drop either: _SCALED
    "group_normalization": ("gamma", "beta"),
    "p_re_lu": ("alpha",),
}
# Recurrent cells (the ``cell`` of LSTM/GRU/SimpleRNN/ConvLSTM, which name it themselves):
# not in ``ORDERS``, since a 3-variable layer of unknown class need not be a cell.
_CELL_NAMES = {c: ("kernel", "recurrent_kernel", "bias") for c in (
    "lstm_cell", "gru_cell", "simple_rnn_cell", "conv_lstm_cell")}
# Layers named by default (dense_7) whose variables are a kernel of this rank and a bias.
_KERNEL_RANK = {"dense": 2, "conv1d": 3, "conv2d": 4, "conv3d": 5}
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
ORDERS = sorted({*_VAR_NAMES.values(), ("kernel",), *_FROZEN_CLASSES.values(),
                  ("gamma", "beta", "moving_mean", "moving_variance"),
                  ("gamma", "moving_mean", "moving_variance"),
                  ("beta", "moving_mean", "moving_variance")})


def to_snake_case(name: str) -> str:
    """Keras' ``naming.to_snake_case``: ``BatchNormalization`` -> ``batch_normalization``."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


@dataclass
class Node:
    path: str
    keys: list[str] = field(default_factory=list)
    name: str | None = None
    cls: str | None = None
    cfg: dict | None = None
    frozen: bool = False
    custom: bool = False  # config.json names a class outside Keras (registered_name)
    custom_class: str = ""  # that class (custom_order.custom_class)
    loose: bool = False  # its own variables' stored order is not proven (custom_order)
    attrs: bool = False  # holds sublayers as attributes (a subclassed model, a custom layer)
    ordered: list[Node] = field(default_factory=list)
    bag: list[Node] = field(default_factory=list)
    names_from: str | None = None  # cls unknown: the class its default name and shapes fit


def build_tree(model, config, owner_names, notes) -> Node:
    owners = set(owner_names) | {e.extra["owner"] for e in model.values()}
    owners = {o for o in owners if o.split("/")[0] != "optimizer"}
    # A nested model's own directory holds no variables (tf_keras writes no name attribute
    # either): add it, so its layers hang under it and its config (trainable flag) applies.
    owners |= {"/".join(o.split("/")[:i]) for o in owners
               for i in range(2, o.count("/") + 1, 2)
               if re.fullmatch(r"(?:layers/[^/]+/)*layers/[^/]+", "/".join(o.split("/")[:i]))}
    nodes = {o: Node(o, name=owner_names.get(o)) for o in owners}
    root = nodes.setdefault("", Node("", name=owner_names.get("")))
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
            parent.attrs = True
            base = rel.rsplit("/", 1)[-1].lstrip("_")
            node.cls = base if base in _VAR_NAMES else (
                "einsum_dense" if base.endswith("dense") else None)
            if base == "cell" and node.name in _CELL_NAMES:
                node.cls = node.name  # LSTM names its cell "lstm_cell" itself
            elif node.cls is None:
                node.cls = _class_by_name(node, model)
                node.names_from = None if node.cls else _names_by_name(node, model)
    _order(root, model, notes)
    return root


def _class_by_name(node: Node, model) -> str | None:
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


def _names_by_name(node: Node, model) -> str | None:
    """The class whose variable names a sublayer of unknown class held as an attribute
    (``self.fc = Dense(16)`` in a custom layer) shows, from the name Keras gives a layer by
    default (``dense_7``): a Dense's or Conv's one or two floating variables are a kernel of
    that class's rank and a bias as long as its last axis (``dense_7/kernel``, ``…/bias``).
    For names only: the class stays unknown to everything else (load order, refusals)."""
    base = re.sub(r"_\d+$", "", node.name or "")
    shapes = [tuple(model[k].shape) for k in node.keys]
    if base in _KERNEL_RANK and len(shapes) in (1, 2) and len(shapes[0]) == _KERNEL_RANK[base] \
            and shapes[1:] in ([], [shapes[0][-1:]]) \
            and all(model[k].dtype_name in FLOATS for k in node.keys):
        return base
    return None


def _first_offset(node: Node, model) -> float:
    offs = [model[k].extra.get("file_offset") for k in node.keys]
    offs = [o for o in offs if o is not None]
    offs += [_first_offset(c, model) for c in node.ordered + node.bag]
    return min(offs, default=float("inf"))


def _wrapped_classes(node: Node) -> None:
    """The class of each layer a built-in wrapper holds (:mod:`.wrapped`): r32 F14."""
    for child in node.ordered + node.bag if not node.custom else ():
        said = wrapped_config(node.cls, node.cfg, child.path.rsplit("/", 1)[-1])
        if said is not None:
            cls = said["class_name"]
            child.cls = to_snake_case(_EXPORT_NAMES.get(cls, cls))
            child.cfg = said["config"] if isinstance(said.get("config"), dict) else {}
            child.custom_class = custom_class(said)
            child.custom = bool(child.custom_class)


def _order(node: Node, model, notes) -> None:
    _wrapped_classes(node)
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
            # Keras' own classes have no registered name or their own (Functional); a
            # registered one is "package>Class" (tf_keras: its nested Functional's module is
            # tf_keras.src.engine.functional)
            child.custom = bool(custom_class(hit[1]))
            child.custom_class = custom_class(hit[1])
            if child.name is None and isinstance(child.cfg.get("name"), str):
                child.name = child.cfg["name"]  # tf_keras: the layer's name (enc, fc)
        child.frozen = node.frozen or (child.cfg or {}).get("trainable") is False
    for child in node.bag:
        child.frozen = node.frozen
    lost = [c for c in node.ordered if c.path.rsplit("/", 1)[-1] not in by_name and holds(c)]
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


def _fixed_order(node: Node) -> list[Node] | None:
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
    held = [c for c in node.bag if holds(c)]  # a Dropout/Softmax holds nothing: no place
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


def holds(node: Node) -> bool:
    """Whether ``node`` or a sublayer of it holds weights."""
    return bool(node.keys) or any(holds(c) for c in node.ordered + node.bag)


def _suffix(node: Node) -> tuple[str, int]:
    m = re.fullmatch(r"(.*?)(?:_(\d+))?", node.path.rsplit("/", 1)[-1])
    return m.group(1), int(m.group(2) or 0)


def flatten_tree(node: Node, out: list[tuple[str, list[str]]],
                 groups: dict[int, list[list[str]]] | None = None,
                 tf_keras: bool = False) -> None:
    """Model weight keys in ``model.weights`` order, as ("seq"|"bag", keys) runs.

    ``groups`` gets, for each bag whose sublayers hold no bag themselves, the keys of each
    sublayer in their own (known) order: Keras builds ``trainable_variables`` sublayer by
    sublayer, so only the order of these groups is unknown. ``tf_keras``: a layer holding
    weights of its own and sublayers with weights may be a tf_keras ``Model`` (which lists
    its own weights after its sublayers') or a ``Layer`` (before): its own weights are one
    more part of the bag of its sublayers.
    """
    mixed = tf_keras and bool(node.keys) and any(holds(c) for c in node.ordered + node.bag)
    if node.keys and node.loose and not mixed:  # stored order not proven: each its own part
        if groups is not None:
            groups[len(out)] = [[k] for k in node.keys]
        out.append(("bag", list(node.keys)))
    elif node.keys and not mixed:
        out.append(("seq", list(node.keys)))
    units = submodel_units(node)  # nested models' layers, where their order proves nothing
    if node.bag or units is not None or mixed:
        inner: list[tuple[str, list[str]]] = []
        parts: list[list[str]] = []
        if mixed:
            inner.append(("bag" if node.loose else "seq", list(node.keys)))
            parts.append([] if node.loose else list(node.keys))
        for child in node.ordered + node.bag if units is None else units:
            mine: list[tuple[str, list[str]]] = []
            flatten_tree(child, mine, tf_keras=tf_keras)
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
            flatten_tree(child, out, groups, tf_keras)


def _var_names(node: Node, n: int, first_dtype: str | None = None
               ) -> list[tuple[str | None, bool]]:
    """The names (``None``: not proven, shown by index) and trainability of a layer's ``n``
    variables in vars/<i> order. A flag that drops a variable (``scale``/``center``,
    ``use_bias``) is taken from config.json only; without it a name is given only where the
    count leaves no choice (one variable of a LayerNormalization is gamma or beta; a quantized
    layer, ``first_dtype`` (vars/0's) not a float or more variables than its names, as
    :func:`~.quantized.bare_quantized` reads it)."""
    cfg = node.cfg or {}
    lead = _lead(cfg, node.cls == "layer_normalization") if node.cfg else None
    if node.cls in _BN:
        if lead is None or len(lead) + 2 != n:  # 3 variables: gamma or beta, unknown here
            lead = {4: ["gamma", "beta"], 3: [None]}.get(n, [None] * max(n - 2, 0))
        out = [(v, True) for v in lead] + [("moving_mean", False), ("moving_variance", False)]
        return (out + [(None, True)] * n)[:n]
    if node.cls in _FROZEN_CLASSES:
        return [(v, False) for v in _FROZEN_CLASSES[node.cls][:n]] + [(None, False)] * (
            n - len(_FROZEN_CLASSES[node.cls]))
    if node.cls in _SCALED:
        if lead is None or len(lead) != n:  # not recorded: only both name themselves
            lead = ["gamma", "beta"] if n == 2 else []
        return [(v, True) for v in lead] + [(None, True)] * (n - len(lead))
    cls = node.cls or node.names_from
    names = list(_VAR_NAMES.get(cls, _CELL_NAMES.get(cls, ())))
    if "bias" in names and (cfg.get("use_bias") is False or node.cls == "einsum_dense"
                            and "bias_axes" in cfg and cfg["bias_axes"] is None):
        names.remove("bias")
    if node.cfg and node.cls in ("dense", "einsum_dense") and float8(cfg) \
            and n == len(names) + len(FLOAT8_STATE):  # no optimizer variables: not trainable
        return [(v, True) for v in names] + [(v, False) for v in FLOAT8_STATE]
    quantized = int_quantized(node.cls, node.cfg, "bias" in names, n) if node.cfg else \
        bare_quantized(node.cls, first_dtype, n)
    if quantized is not None:
        return quantized
    float_first = first_dtype is None or first_dtype in FLOATS
    if "bias" in names and not node.cfg and (n > len(names) or not float_first):
        names = names[:names.index("bias")]
    return [(v, True) for v in names[:n]] + [(None, True)] * (n - len(names))


def _lead(cfg: dict, rms: bool) -> list[str | None] | None:
    """``gamma``/``beta`` as config.json's ``scale``/``center`` create them (with
    LayerNormalization's ``rms_scaling``, gamma only), or ``None`` where a flag is not a
    boolean."""
    scale, center = cfg.get("scale", True), cfg.get("center", True)
    rms_scaling = cfg.get("rms_scaling", False) if rms else False
    if not all(isinstance(f, bool) for f in (scale, center, rms_scaling)):
        return None
    return (["gamma"] if scale or rms_scaling else []) + (
        ["beta"] if center and not rms_scaling else [])


def _given_name(parent: Node, child: Node) -> str | None:
    """The name a built-in layer of ``_FIXED_SUBLAYERS`` gives the sublayer ``child`` where the
    file records none (tf_keras writes no name attribute): its MultiHeadAttention names
    ``_query_dense`` "query" in its code, as Keras 3 does (``mha/query/kernel``, not
    ``multi_head_attention/_query_dense/kernel``). Only for a class config.json names and no
    custom class, and a full name (not a prefix such as Bidirectional's ``forward_``)."""
    if child.name is not None or parent.cfg is None or parent.custom:
        return None
    given = dict(_FIXED_SUBLAYERS.get(parent.cls or "", ())).get(
        child.path.rsplit("/", 1)[-1].lstrip("_"))
    return given if given and not given.endswith("_") else None


def name_vars(node: Node, model, lay: KerasLayout, prefix: list[str],
              given: str | None = None) -> None:
    own_name = node.name or given
    chain = prefix + ([own_name] if node.path and own_name else [])
    # A subclassed model's own weights (self.add_weight in the model): Keras' path is
    # <model name>/<variable name> (net/mix); the file records the name only, not "mix".
    own = chain or ([node.name] if not node.path and node.name else [])
    named = _var_names(node, len(node.keys), model[node.keys[0]].dtype_name if node.keys
                       else None)
    for key, (var, trainable) in zip(node.keys, named, strict=False):
        e = model[key]
        # Named entries (TextVectorization's tf_idf ``idf_weights``) are constants a layer's
        # save_own_variables writes, not variables: the optimizer never sees them.
        constant = e.extra.get("index") is None
        could = trainable and not constant and e.dtype_name in FLOATS
        lay.trainable[key] = could and not node.frozen
        if could and node.frozen:
            lay.frozen.append(key)
        elif not trainable and not constant and (e.dtype_name in FLOATS or var in INT_NAMES):
            # an int8 layer's kernel_scale is no float8 state, though named like one
            (lay.float8_state if var in FLOAT8_STATE and float8(node.cfg or {})
             else lay.untrainable).append(key)
        # a named entry shows the name it is stored under (idf_weights), never "None"
        stored = key.rpartition("/")[2] if constant else str(e.extra.get("index"))
        lay.paths[key] = "/".join(own + [(not constant and var) or stored])
    for child in node.ordered + node.bag:
        name_vars(child, model, lay, chain, _given_name(node, child))


def distinct_paths(lay: KerasLayout, model) -> None:
    """Two sublayers given the same name (``self.a = Dense(4, name="fc")``, ``self.b = ...``)
    would show, export and be stated as the same ``fc/kernel``: their weights are named by the
    attributes that hold them instead (``a/kernel``, ``b/kernel``), which the file records."""
    seen: dict[str, list[str]] = {}
    for k in lay.model:
        seen.setdefault(lay.paths[k], []).append(k)
    # by layer too: one named from config.json (fc/kernel), its namesake the config does not
    # list by its variables' indices (fc/0) (review-12-attack-r18 F7)
    layers: dict[str, list[str]] = {}
    for k in lay.model:
        if "/" in lay.paths[k]:
            layers.setdefault(lay.paths[k].rsplit("/", 1)[0], []).append(k)
    for keys in layers.values():
        if len({model[k].extra.get("owner") or "" for k in keys}) > 1:
            seen[f"//{len(seen)}"] = keys
    for keys in seen.values():
        if len(keys) < 2:
            continue
        for k in keys:
            owner = model[k].extra.get("owner") or ""
            attrs = [p for p in owner.split("/") if p and p != "layers"]
            lay.paths[k] = "/".join(attrs + [lay.paths[k].rsplit("/", 1)[-1]])
