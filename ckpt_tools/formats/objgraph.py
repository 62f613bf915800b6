"""TF2 object-based checkpoints: the ``_CHECKPOINTABLE_OBJECT_GRAPH`` tensor.

TF2 keys (``model/layer-0/kernel/.ATTRIBUTES/VARIABLE_VALUE``,
``model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE``) are derived from the
object graph; reading the graph gives each key a readable object path and pairs optimizer slots
with the variable they belong to.
"""

from __future__ import annotations

from collections import deque

from ..errors import CorruptCheckpointError
from ._record import Frozen, Record

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
SLOT_MARK = "/.OPTIMIZER_SLOT/"


class Slot(Frozen):
    """An optimizer slot variable paired with its primary variable."""

    variable: str  # checkpoint key of the primary variable
    name: str  # slot name, e.g. "m", "momentum", "average"
    optimizer: str  # object path of the optimizer that owns it
    _fields = ("variable", "name", "optimizer")

    def __init__(self, variable: str, name: str, optimizer: str) -> None:
        self.__dict__.update(variable=variable, name=name, optimizer=optimizer)


class ObjectGraph(Record):
    """Readable names for the keys of a TF2 checkpoint.

    Attributes:
        paths: checkpoint key -> object path (``model/dense/kernel``), for every variable value.
        slots: checkpoint key of a slot variable -> :class:`Slot`.
        full_names: checkpoint key -> the variable's own name (``tf.Variable.name`` without
            ``:0``), which TF2 records and which pairs ``ema.average(v)`` with ``v``.
        slot_owners: ids of the nodes that record slot variables (only an optimizer does).
    """

    paths: dict[str, str]
    slots: dict[str, Slot]
    full_names: dict[str, str]
    # The graph itself, for orders TF derives from it (tf.Module.trainable_variables):
    # node id -> [(local name, child node id)] in recorded order, and node id -> variable key.
    children: dict[int, list[tuple[str, int]]]
    node_keys: dict[int, str]
    slot_owners: set[int]
    _fields = ("paths", "slots", "full_names", "children", "node_keys", "slot_owners")

    def __init__(self, paths: dict[str, str] | None = None,
                 slots: dict[str, Slot] | None = None,
                 full_names: dict[str, str] | None = None,
                 children: dict[int, list[tuple[str, int]]] | None = None,
                 node_keys: dict[int, str] | None = None,
                 slot_owners: set[int] | None = None) -> None:
        """Every mapping (and ``slot_owners``) defaults to a new empty one."""
        self.paths = {} if paths is None else paths
        self.slots = {} if slots is None else slots
        self.full_names = {} if full_names is None else full_names
        self.children = {} if children is None else children
        self.node_keys = {} if node_keys is None else node_keys
        self.slot_owners = set() if slot_owners is None else slot_owners


#: Children only an optimizer object tracks: a Keras 3 / tf_keras optimizer's step counter, a
#: LossScaleOptimizer's wrapped optimizer, a ``use_ema=True`` optimizer's list of copies.
_OPTIMIZER_MARKS = frozenset({"_iterations", "inner_optimizer", "_model_variables_moving_average"})
#: What an optimizer tracks that is not its own: the model variables it was built with.
_BORROWED = frozenset({"_trainable_variables"})


def optimizer_owned_keys(objects: ObjectGraph) -> frozenset[str]:
    """Keys of the variables an optimizer object holds (its step counter, learning rate, a
    LossScaleOptimizer's ``dynamic_scale`` and ``step_counter``, its slots and copies),
    found by what the object tracks, whatever attribute it is saved under (``opt=``,
    ``g_opt=``), or by the slot variables the graph records it owning (only an optimizer
    records them: a tf_keras legacy ``Adam``'s ``beta_1``, ``SGD(momentum=0.9)``'s
    ``momentum`` under ``opt2=``, review-21-attack-r55 F12): never a model weight. Excludes
    ``_trainable_variables`` (the model's variables it references). Cached on ``objects``."""
    cached = objects.__dict__.get("_optimizer_owned")
    if cached is not None:
        return cached
    kids = objects.children
    # the nodes that record slot variables, by node id: a "/"-joined path could be spelled by
    # another object's name too (a net saved as "a/opt" beside an optimizer at a.opt,
    # review-22-attack-r61 F2). Never the root: a graph whose root is the optimizer itself
    # holds the model's variables under it too.
    slot_owners = objects.slot_owners - {0}
    # Breadth-first from the root, as TensorFlow names keys: a variable belongs to the
    # object its shortest path runs through (a model weight an optimizer also references
    # stays the model's).
    under = {0: False}
    queue = deque([0])
    while queue:
        node = queue.popleft()
        mine = under[node] or node in slot_owners or any(
            name in _OPTIMIZER_MARKS for name, _ in kids.get(node, ()))
        for name, child in kids.get(node, ()):
            if child not in under:
                under[child] = mine and name not in _BORROWED
                queue.append(child)
    out = frozenset(k for n, k in objects.node_keys.items() if under.get(n))
    objects.__dict__["_optimizer_owned"] = out
    return out


def trained_keys(objects: ObjectGraph) -> frozenset[str]:
    """Keys of the variables the graph records an optimizer training: those it records
    slot variables for (``slot_variables.original_variable_node_id``) and those an optimizer
    object lists in its ``_trainable_variables`` (Keras 3, new tf_keras). Such a variable is
    a weight whatever its name: a Meta-SGD ``learning_rate``, a GRU-D ``decay``, a layer's
    ``iter`` (review-22-attack-r61 F1). Cached on ``objects``."""
    cached = objects.__dict__.get("_trained")
    if cached is not None:
        return cached
    out = {s.variable for s in objects.slots.values()}
    kids = objects.children
    for named in kids.values():
        if not any(name in _OPTIMIZER_MARKS for name, _ in named):
            continue
        for name, held in named:
            if name in _BORROWED:
                out.update(objects.node_keys[v] for _, v in kids.get(held, ())
                           if v in objects.node_keys)
    trained = frozenset(out)
    objects.__dict__["_trained"] = trained
    return trained


def parse_object_graph(raw: bytes, where: str = OBJECT_GRAPH_KEY) -> ObjectGraph:
    """Parses a serialized ``TrackableObjectGraph``.

    Returns:
        An :class:`ObjectGraph`.

    Raises:
        CorruptCheckpointError: if ``raw`` is not a TrackableObjectGraph.
    """
    from ._protos import TrackableObjectGraph, text  # TF2 checkpoints only: protobuf on demand

    try:
        graph = TrackableObjectGraph.FromString(raw)
    except Exception as exc:
        raise CorruptCheckpointError(f"{where}: cannot parse object graph: {exc}") from None
    nodes = graph.nodes
    if not nodes:
        return ObjectGraph()
    # Breadth-first from the root gives each node its shortest path, which is the one
    # TensorFlow uses to build checkpoint keys.
    path_of: dict[int, str] = {0: ""}
    queue = deque([0])
    while queue:
        node_id = queue.popleft()
        for child in nodes[node_id].children:
            if not 0 <= child.node_id < len(nodes):
                raise CorruptCheckpointError(
                    f"{where}: object graph child refers to node {child.node_id} "
                    f"of {len(nodes)}")
            if child.node_id not in path_of:
                parent = path_of[node_id]
                name = text(child.local_name)
                path_of[child.node_id] = f"{parent}/{name}" if parent else name
                queue.append(child.node_id)
    path_of = _layer_paths(nodes, path_of)
    out = ObjectGraph()
    key_of: dict[int, str] = out.node_keys
    for node_id, node in enumerate(nodes):
        if node.children:
            out.children[node_id] = [(text(c.local_name), c.node_id) for c in node.children]
    for node_id, node in enumerate(nodes):
        for attr in node.attributes:
            if attr.name == "VARIABLE_VALUE":
                key = text(attr.checkpoint_key)
                key_of[node_id] = key
                if attr.full_name:
                    out.full_names[key] = text(attr.full_name)
                if node_id in path_of:
                    out.paths[key] = path_of[node_id]
    for node_id, node in enumerate(nodes):
        for ref in node.slot_variables:
            slot_key = key_of.get(ref.slot_variable_node_id)
            var_key = key_of.get(ref.original_variable_node_id)
            if slot_key is None or var_key is None:
                continue
            out.slot_owners.add(node_id)
            out.slots[slot_key] = Slot(variable=var_key, name=text(ref.slot_name),
                                       optimizer=path_of.get(node_id, ""))
            if slot_key not in out.paths:
                var_path = out.paths.get(var_key, var_key)
                owner = path_of.get(node_id, "optimizer")
                out.paths[slot_key] = f"{var_path}/.{owner}/{text(ref.slot_name)}"
    return out


#: What a Keras layer (an object with a ``keras_api`` child) tracks only when saved as a
#: SavedModel (tf_keras ``model.save(..., save_format="tf")``): lists and holders that repeat
#: its weights (``variables/0``), which its TF-format checkpoint does not have.
KERAS_SAVEDMODEL_ALIASES = frozenset({
    "variables", "trainable_variables", "non_trainable_variables", "regularization_losses",
    "keras_api"})


def _layer_paths(nodes, path_of: dict[int, str]) -> dict[int, str]:
    """``path_of`` with each object a Keras SavedModel reaches through a layer's
    SavedModel-only aliases (:data:`KERAS_SAVEDMODEL_ALIASES`) given its shortest path
    without them: the path its TF-format checkpoint shows
    (``layer_with_weights-0/layer_with_weights-0/kernel``, not the root's ``variables/0``).
    Objects reachable only through an alias keep theirs; other graphs are returned as given.
    """
    from ._protos import text

    def layer(node) -> bool:
        return any(text(c.local_name) == "keras_api" for c in node.children)

    if not any(layer(n) for n in nodes):
        return path_of
    shown: dict[int, str] = {0: ""}
    queue = deque([0])
    while queue:
        node_id = queue.popleft()
        skip = KERAS_SAVEDMODEL_ALIASES if layer(nodes[node_id]) else ()
        for child in nodes[node_id].children:
            name = text(child.local_name)
            if name in skip or child.node_id in shown:
                continue
            parent = shown[node_id]
            shown[child.node_id] = f"{parent}/{name}" if parent else name
            queue.append(child.node_id)
    return {**path_of, **shown}


#: The end of the ``full_name`` a Keras 3 optimizer gives a ``use_ema`` copy
#: (``adam/dense_kernel_average``).
KERAS3_AVERAGE = "_average"


def has_keras3_averages(objects: ObjectGraph | None) -> bool:
    """Whether the object graph records a Keras 3 optimizer's ``use_ema`` copies (by the
    ``full_name`` Keras gives them). Reads names only: cheap enough for ``ckpt list``."""
    return objects is not None and any(f.endswith(KERAS3_AVERAGE)
                                       for f in objects.full_names.values())


#: TF2 optimizer slots that hold weight averages: TF Model Garden's ``ExponentialMovingAverage``
#: and TF Addons' ``MovingAverage``/``SWA`` keep ``average``; the others are spellings seen
#: elsewhere (``ckpt_tools.roles`` reads them as averages).
EMA_SLOT_NAMES = frozenset({"average", "ema", "moving_average", "swa"})


def has_slot_averages(objects: ObjectGraph | None) -> bool:
    """Whether the object graph records an optimizer slot holding weight averages
    (:data:`EMA_SLOT_NAMES`), which an EMA optimizer's ``swap_weights()`` swaps with the
    variables. Reads the slot records only: cheap enough for ``ckpt list``."""
    return objects is not None and any(s.name in EMA_SLOT_NAMES for s in objects.slots.values())


def has_swappable_averages(objects: ObjectGraph | None) -> bool:
    """Whether the object graph records averages a library can swap with the model's
    variables before a save: a Keras 3 optimizer's ``use_ema`` copies
    (``SwapEMAWeights``) or averages kept as optimizer slots (``swap_weights()``)."""
    return has_keras3_averages(objects) or has_slot_averages(objects)


def readable_name(key: str) -> str:
    """Strips TF2's ``/.ATTRIBUTES/VARIABLE_VALUE`` suffix from a key (other keys unchanged)."""
    return key[: -len(VALUE_SUFFIX)] if key.endswith(VALUE_SUFFIX) else key
