"""Which layer each weight of an exported ``.h5`` goes in, and in what order.

Keras' ``load_weights("x.h5")`` (``legacy_h5_format.load_weights_from_hdf5_group``) fills the
model by position: the file's ``layer_names`` are matched one for one with the weighted layers
of ``model.layers``, and each layer's ``weight_names`` with ``layer.trainable_weights +
layer.non_trainable_weights`` (a nested model's over all its layers; a layer holding another
layer, as weight tying does, counts that layer's weights too). The writer follows, from:

- a Keras 3 or tf_keras weight file (``.keras``, ``.weights.h5``): the model's layers as the
  file records them, a nested model one layer
  (:func:`~ckpt_tools.formats.keras.load_order.legacy_h5_groups`), refused where it cannot
  prove what a layer holds (a custom layer may refer to another layer's weights, which the
  file records once);
- a legacy ``.h5``: its own layer groups (:func:`~ckpt_tools.export_h5_tfk.legacy_groups`);
- a TensorFlow checkpoint of a Keras 3 model (``tf.train.Checkpoint(model=...)``): the order
  the object graph records (``model/_operations/<i>``, each layer's own variables and the
  layers it holds), each group named after its layer as its variables' recorded names give
  it (``load_weights(by_name=True)`` matches groups by layer name), refused where they do not;
- a tf_keras TF-format checkpoint: its ``layer_with_weights-N`` numbers
  (:func:`~ckpt_tools.export_h5_tfk.numbered_groups`), a nested model one layer;
- any other TensorFlow checkpoint: layers as named, each layer's weights in Keras' order by
  name, refused where that order or the layers' is not recorded.
"""

from __future__ import annotations

import re

from . import roles as R
from .checkpoint import Checkpoint
from .errors import UnsupportedFormatError
from .export_h5_tfk import INSTEAD, INSTEAD_KERAS, legacy_groups, numbered_groups, weight_rank
from .formats.keras.load_order import frozen_flags_decide, legacy_h5_groups
from .formats.objgraph import ObjectGraph

_LAYER_WITH_WEIGHTS = re.compile(r"layer_with_weights-(\d+)")
# Children of a Keras model node that are not its layers (the model's layers are _operations).
_NOT_LAYERS = frozenset({"optimizer", "_compiled_trainable_state", "_tracked", "_inbound_nodes",
                         "_outbound_nodes", "_losses", "_losses_override",
                         "call_signature_parameters", "_call_has_context_arg"})


def h5_layers(plan: dict[str, str], ckpt: Checkpoint,
              weights: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Output names grouped by layer, in the order Keras' ``load_weights`` fills them.

    Args:
        plan: output name -> source key (the average's key for an averaged weight).
        ckpt: the checkpoint exported.
        weights: output name -> the model weight's key (where the source is its average);
            names missing are their own source's weight.

    Raises:
        UnsupportedFormatError: the file does not prove what Keras would fill: a Keras 3
            layer of a class that may hold another layer's weights, a subclassed model's
            layer order, a nested model whose order the frozen flags decide where the file
            does not record them; from a TensorFlow checkpoint, a layer holding weights whose
            order in Keras is not known (custom names), or two layers of the same weight names
            and shapes whose order in the model is not recorded.
    """
    of = {n: (weights or {}).get(n, src) for n, src in plan.items()}
    layout = getattr(ckpt.reader, "keras", None)
    if layout is not None and layout.tree is not None:
        return _keras3_layers(plan, ckpt, of, layout, layout.tree)
    if layout is not None and layout.tf_keras and layout.kind == "keras3":
        _refuse_tf_keras_outside_layers(ckpt, layout, of)
        if layout.named is not None:  # tf_keras .keras/.weights.h5: its tree, as Keras 3's
            return _keras3_layers(plan, ckpt, of, layout, layout.named)
    if layout is not None and layout.kind == "legacy":  # the file's own layer groups

        def owner(key: str) -> tuple[str, int]:
            extra = ckpt.entry(key).extra
            group = extra.get("owner") if extra.get("section") == "model" else None
            return (group or "").removeprefix("model_weights/"), extra.get("index") or 0

        return legacy_groups(ckpt.path, of, owner, layout.model)
    if ckpt.format in ("keras", "h5"):
        return _by_prefix(plan)
    if ckpt.objects is not None:
        found = _graph_layers(plan, ckpt, of)
        if found is None:  # tf_keras' TF format: layer_with_weights-N, in model.layers order
            found = numbered_groups(ckpt.path, of, _spec(ckpt))
        if found is not None:
            return found
    return _named_layers(plan, ckpt)


def _refuse_tf_keras_outside_layers(ckpt: Checkpoint, layout, of: dict[str, str]) -> None:
    """Refuses an .h5 of a tf_keras ``.keras``/``.weights.h5`` whose exported weights are not
    all under ``layers/``: a subclassed model saves its layers by attribute name (not in
    ``model.layers`` order, by which tf_keras' ``load_weights`` fills an .h5) and its own
    weights outside any layer; the groups written would not load as this model (a layer-count
    error by position, nothing at all by name).

    Raises:
        UnsupportedFormatError: naming a weight outside ``layers/`` (exit 5).
    """
    outside = [n for n, key in of.items() if key in set(layout.model)
               and not key.startswith("layers/")]
    if outside:
        raise UnsupportedFormatError(
            f"{ckpt.path}: {outside[0]!r} is saved outside the model's layers (a subclassed "
            "tf_keras model keeps its layers by attribute name, not in model.layers order, "
            "and its own weights outside any layer), and tf_keras' load_weights fills an .h5 "
            f"layer by layer in model.layers order; {INSTEAD}")


def _by_prefix(plan: dict[str, str]) -> dict[str, list[str]]:
    layers: dict[str, list[str]] = {}
    for name in plan:
        layers.setdefault(name.rpartition("/")[0] or name, []).append(name)
    return layers


def _spec(ckpt: Checkpoint):
    return lambda key: (tuple(ckpt.entry(key).shape), ckpt.entry(key).dtype_name)


def _keras3_layers(plan, ckpt, of, layout, tree) -> dict[str, list[str]]:
    groups, why = legacy_h5_groups(tree, layout.trainable,
                                   None if layout.configured else _spec(ckpt))
    if why:
        raise UnsupportedFormatError(
            f"{ckpt.path}: cannot write an .h5 that Keras' load_weights (which fills it by "
            f"position) loads as this model: {why}; {INSTEAD_KERAS}")
    name_of = {key: n for n, key in of.items()}
    layers = {layer: [name_of[k] for k in keys if k in name_of] for layer, keys in groups}
    layers = {layer: names for layer, names in layers.items() if names}
    placed = {n for names in layers.values() for n in names}
    lost = [n for n in plan if n not in placed]
    if lost:  # a weight outside the model's layers: where Keras would want it is unknown
        raise UnsupportedFormatError(
            f"{ckpt.path}: {', '.join(repr(n) for n in lost[:3])} belong to no layer of the "
            f"model, and an .h5 is loaded by position; {INSTEAD}")
    return layers


def _layer_nodes(graph: ObjectGraph, node: int) -> list[int]:
    """A Keras 3 model node's layers, in ``model.layers`` order (``_operations/<i>``)."""
    ops = dict(graph.children.get(node, ())).get("_operations")
    kids = graph.children.get(ops, []) if ops is not None else []
    if not all(name.isdigit() for name, _ in kids):
        return []
    return [c for _, c in sorted(kids, key=lambda kid: int(kid[0]))]


def _weights_of(graph: ObjectGraph, node: int, stack: tuple[int, ...], problems: list[str],
                leaves: list[list[str]]) -> list[tuple[str, str]]:
    """``layer.weights`` of a layer node as (key, variable name): its own variables (in
    Keras' order by name), then those of the layers it holds, each once; each layer's own
    keys are appended to ``leaves``. Two or more own variables whose order in Keras is not
    known are added to ``problems``."""
    kids = graph.children.get(node, [])
    own = [(graph.node_keys[c], name) for name, c in kids if c in graph.node_keys]
    ranks = [weight_rank(name) for _, name in own]
    if len(own) > 1 and (None in ranks or len(set(ranks)) != len(ranks)):
        problems.append(", ".join(repr(name.lstrip("_")) for _, name in own))
        ranks = list(range(len(own)))
    out = [kv for _, kv in sorted(zip(ranks, own, strict=True), key=lambda rk: rk[0] or 0)]
    seen = {k for leaf in leaves for k in leaf}
    if any(k not in seen for k, _ in out):
        leaves.append([k for k, _ in out if k not in seen])
    layers = _layer_nodes(graph, node)
    if layers or "_operations" in dict(kids):
        subs = layers
    else:
        subs = [c for name, c in kids if c not in graph.node_keys and name not in _NOT_LAYERS]
    for sub in subs:
        if sub not in stack:
            out += [kv for kv in _weights_of(graph, sub, (*stack, sub), problems, leaves)
                    if kv not in out]
    return out


def _graph_layers(plan, ckpt, of) -> dict[str, list[str]] | None:
    """The layers of the one Keras 3 model in the object graph holding every exported weight,
    in the order the graph records (``None`` when no such model is recorded).

    Raises:
        UnsupportedFormatError: a layer of that model holds two or more variables whose order
            in Keras is not known (custom names).
    """
    graph = ckpt.objects
    depth = {0: 0}
    queue = [0]
    for node in queue:  # breadth first: the model nearest the root is the one saved
        for _, c in graph.children.get(node, ()):
            if c not in depth:
                depth[c] = depth[node] + 1
                queue.append(c)
    wanted = set(of.values())
    found = []
    for node in sorted(graph.children, key=lambda n: depth.get(n, len(depth))):
        layers = _layer_nodes(graph, node)
        problems: list[str] = []
        leaves: list[list[list[str]]] = [[] for _ in layers]
        per_layer = [_weights_of(graph, layer, (node, layer), problems, leaves[i])
                     for i, layer in enumerate(layers)]
        if layers and wanted <= {k for kvs in per_layer for k, _ in kvs}:
            found.append((depth.get(node), layers, per_layer, problems, leaves))
    if not found or (len(found) > 1 and found[0][0] == found[1][0]):
        return None
    _, layers, per_layer, problems, leaves = found[0]
    if problems:
        raise UnsupportedFormatError(
            f"{ckpt.path}: a layer holds {problems[0]}, whose order in the Keras layer is not "
            "recorded in a TensorFlow checkpoint, and an .h5 is loaded by position within "
            f"each layer; {INSTEAD}")
    stat = {v.name for v in ckpt.variables_unwarned() if v.role == R.BN_STAT}
    name_of = {key: n for n, key in of.items()}
    labels = _layer_labels(ckpt, layers, per_layer, name_of)
    out: dict[str, list[str]] = {}
    for i, kvs in enumerate(per_layer):
        trainable = {k: k not in stat for leaf in leaves[i] for k in leaf}
        if not frozen_flags_decide(leaves[i], trainable, _spec(ckpt)):
            names = [name_of.get(k, k) for k, _ in kvs]
            raise UnsupportedFormatError(
                f"{ckpt.path}: which of the layers holding {', '.join(names[:4])}"
                f"{', ...' if len(names) > 4 else ''} are frozen decides the order Keras' "
                "load_weights fills them in, and a TensorFlow checkpoint does not record it; "
                f"{INSTEAD}")
        keys = [k for k, _ in kvs if k in name_of]
        names = [name_of[k] for k in keys if k not in stat] + [name_of[k] for k in keys
                                                               if k in stat]
        if names:
            out[labels[i]] = names
    return out


def _layer_labels(ckpt: Checkpoint, layers: list[int], per_layer: list[list[tuple[str, str]]],
                  name_of: dict[str, str]) -> list[str | None]:
    """Each layer's name, as Keras' ``load_weights(by_name=True)`` matches an .h5's groups
    (``layer.name``), from the names TensorFlow recorded for its variables; ``None`` for a
    layer none of whose weights is exported (``name_of``: exported key -> output name).

    Keras 3 creates a layer's weights in the layer's own name scope (``add_weight``), nested
    in the scopes of the layers building it: a weight is named ``<scopes>/<layer>/<weight>``
    (``sequential/a/kernel`` in a Sequential, whose build scopes its layers; ``hidden/kernel``
    in a Functional model, whose layers are built before it). A layer holding weights of its
    own is named by the segment before them, all alike and every such layer under the same
    scopes; a nested model (weights only in the layers it holds) by the segment after those
    scopes. A layer holding only weights another layer holds (weight tying) gets a label no
    layer has: by name Keras fills nothing from it, and the weights from their owner's group.

    Raises:
        UnsupportedFormatError: a layer's name is not recorded so (a nested model built
            before the model holding it, a variable made outside ``add_weight``), or two
            layers would have the same name: by name Keras would fill nothing (exit 0) or
            the wrong layer.
    """
    graph = ckpt.objects
    split = {k: (graph.full_names.get(k) or "").split("/") for kvs in per_layer for k, _ in kvs}
    labels: list[str | None] = [None] * len(layers)
    scopes = set()
    for i, layer in enumerate(layers):
        own = [graph.node_keys[c] for _, c in graph.children.get(layer, ())
               if c in graph.node_keys]
        heads = {tuple(split[k][:-1]) for k in own if len(split[k]) > 1}
        if own and len(heads) == 1 and all(len(split[k]) > 1 for k in own):
            head = heads.pop()
            labels[i] = head[-1]
            scopes.add(head[:-1])
    # Every layer of one model is built under the same scopes; layers named under different
    # ones (a variable made outside add_weight) leave the model's own unknown.
    scope = next(iter(scopes)) if len(scopes) == 1 else None
    if len(scopes) > 1:
        labels = [None] * len(layers)
    for i, kvs in enumerate(per_layer):
        if labels[i] is None and scope is not None and kvs:
            deep = [split[k] for k, _ in kvs]
            heads = {tuple(p[:len(scope) + 1]) for p in deep}
            if len(heads) == 1 and all(len(p) > len(scope) + 2 for p in deep):
                head = heads.pop()
                labels[i] = head[-1] if head[:-1] == scope else None
    named = {label for label in labels if label is not None}
    held = {k for i, kvs in enumerate(per_layer) if labels[i] is not None for k, _ in kvs}
    out: list[str | None] = []  # None: a layer none of whose weights is exported
    for i, kvs in enumerate(per_layer):
        label = labels[i]
        if label is None and kvs and all(k in held for k, _ in kvs):
            label = f"tied_{i}"  # weights only another layer holds: filled by name from it
            while label in named or label in out:
                label += "_"
        if (label is None or label in out) and any(k in name_of for k, _ in kvs):
            shown = [name_of.get(k, k) for k, _ in kvs]
            raise UnsupportedFormatError(
                f"{ckpt.path}: the name of the layer holding {', '.join(shown[:3])}"
                f"{', ...' if len(shown) > 3 else ''} is not recorded in this TensorFlow "
                "checkpoint (Keras' load_weights(by_name=True) fills an .h5's layers by "
                f"name); {INSTEAD}")
        out.append(label if any(k in name_of for k, _ in kvs) else None)
    return out


def _named_layers(plan: dict[str, str], ckpt: Checkpoint) -> dict[str, list[str]]:
    layers = _by_prefix(plan)
    for layer, names in layers.items():
        if len(names) < 2:
            continue
        ranks = [weight_rank(n) for n in names]
        if None in ranks or len(set(ranks)) != len(ranks):
            raise UnsupportedFormatError(
                f"{ckpt.path}: layer {layer!r} holds {', '.join(repr(n) for n in names)}, "
                "whose order in the Keras layer is not recorded in a TensorFlow checkpoint, "
                "and an .h5 is loaded by position within each layer; export .npz or "
                ".safetensors (read by name) instead")
        layers[layer] = [n for _, n in sorted(zip(ranks, names, strict=True))]
    numbered = {layer: _LAYER_WITH_WEIGHTS.fullmatch(layer) for layer in layers}
    if layers and all(numbered.values()):
        # tf_keras' save_weights (TF format) numbers its model's layers that hold weights in
        # model.layers order (layer_with_weights-N): the order Keras loads an .h5 by.
        return {layer: layers[layer] for layer in sorted(
            layers, key=lambda n: int(numbered[n].group(1)))}
    # Keras 3 loads an .h5's layers by position too (tf_keras by name with by_name=True),
    # checking only each weight's shape: two layers holding weights of the same names and
    # shapes would load into each other, and a TensorFlow checkpoint does not record the
    # layers' order in the model. A TF2 checkpoint (of a subclassed Keras model, the usual
    # case) refuses on shapes alone: a Dense kernel and an Embedding's table alike load
    # into each other without a word.
    by_shape = ckpt.objects is not None
    seen: dict[tuple, str] = {}
    for layer, names in layers.items():
        signature = tuple((None if by_shape else n.rpartition("/")[2],
                           tuple(ckpt.entry(plan[n]).shape)) for n in names)
        if signature in seen:
            raise UnsupportedFormatError(
                f"{ckpt.path}: layers {seen[signature]!r} and {layer!r} hold weights of the same "
                f"{'shapes' if by_shape else 'names and shapes'}, and a TensorFlow checkpoint "
                "does not record their order in the model, by which Keras loads an .h5 "
                "(checking shapes only); export .npz or .safetensors (read by name), or "
                "restore-ema to a checkpoint, instead")
        seen[signature] = layer
    return layers
