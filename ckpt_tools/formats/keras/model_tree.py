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

from ...wording import noun
from .custom_order import custom_class
from .layer_names import BN, CELL_NAMES, FIXED_SUBLAYERS, FROZEN_CLASSES, VAR_NAMES
from .optimizer_slots import FLOATS
from .submodel_order import submodel_units
from .wrapped import wrapped_config

TYPE_CHECKING = False
if TYPE_CHECKING:
    pass

# Layers named by default (dense_7) whose variables are a kernel of this rank and a bias.
_KERNEL_RANK = {"dense": 2, "conv1d": 3, "conv2d": 4, "conv3d": 5}
# config.json records a built-in layer by its exported name; the weights file's
# layers/<snake_case name> by its class name (Keras 3.15: only this one differs).
_EXPORT_NAMES = {"GroupQueryAttention": "GroupedQueryAttention"}
# Every layer's variables in vars/<i> order, by count: a stated ``bn/gamma`` names index 0 of a
# 4-variable layer the file names by index only (its class unknown), when all orders agree.
ORDERS = sorted({*VAR_NAMES.values(), ("kernel",), *FROZEN_CLASSES.values(),
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
            node.cls = base if base in VAR_NAMES else (
                "einsum_dense" if base.endswith("dense") else None)
            if base == "cell" and node.name in CELL_NAMES:
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
    if base in BN and 2 <= len(shapes) <= 4 and len(set(shapes)) == 1 \
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
        notes.append(f"config.json does not list the {noun(len(lost), 'layer')} "
                     f"{', '.join(c.path for c in lost)}"
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
    ``FIXED_SUBLAYERS``: proven by its sublayers' attribute names and the names that layer
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
    for cls, table in FIXED_SUBLAYERS.items():
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
