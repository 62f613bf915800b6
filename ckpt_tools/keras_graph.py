"""Keras objects recognised in a TF2 object graph, and what they mean for a stated order.

A checkpoint's object graph records no types, but Keras writes some of its objects in shapes
no ``tf.Module``, dict or list takes:

- a tf_keras functional or ``Sequential`` model lists each layer as ``layer-N`` (every
  layer, by its index in ``model.layers``) and, for a layer holding weights, also as
  ``layer_with_weights-M``: two children naming one object, numbered in one order;
- a Keras 3 model or layer keeps its internals under ``_functional``, ``_operations``,
  ``_layers``.

``tf.Module.trainable_variables`` of a module holding such an object walks the object's
Python attributes sorted by name, Keras' internal ones included (a tf_keras functional
model's ``_output_layers`` come before its other layers), an order the file does not record:
``--apply-order trainable`` cannot be read from the graph there. Keras' own
``model.trainable_variables`` of a tf_keras functional model is its layers' order, which the
graph records (``layer-0``, ``layer-1``… in that order), then the model's own weights.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .formats.objgraph import ObjectGraph

_LAYER = re.compile(r"^layer(?:_with_weights)?-(\d+)$")
_KERAS3 = frozenset({"_functional", "_operations", "_layers"})


def tf_keras_models(objects: ObjectGraph) -> set[int]:
    """Nodes that are tf_keras functional or ``Sequential`` models: children ``layer-N`` and
    ``layer_with_weights-M``, each of the latter an object also listed as some ``layer-N``, in
    the same order (``layer_with_weights-0`` the first layer with weights…). Returns node
    ids."""
    out: set[int] = set()
    for node, kids in objects.children.items():
        plain = [c for n, c in kids if n.startswith("layer-") and _LAYER.match(n)]
        weighted = sorted((int(m.group(1)), c) for n, c in kids
                          if n.startswith("layer_with_weights-") and (m := _LAYER.match(n)))
        if not plain or not weighted:  # no layer with weights: no variable to order
            continue
        by_layer = sorted((int(_LAYER.match(n).group(1)), c) for n, c in kids
                          if n.startswith("layer-") and _LAYER.match(n))
        with_weights = [c for _, c in by_layer if c in {w for _, w in weighted}]
        if [c for _, c in weighted] == with_weights:
            out.add(node)
    return out


def keras_nodes(objects: ObjectGraph) -> set[int]:
    """Nodes the graph shows to be Keras objects: tf_keras functional models
    (:func:`tf_keras_models`) and Keras 3 objects (children ``_functional``, ``_operations``
    or ``_layers``). Returns node ids."""
    out = tf_keras_models(objects)
    out.update(node for node, kids in objects.children.items()
               if any(n in _KERAS3 for n, _ in kids))
    return out


def keras3_model(objects: ObjectGraph | None) -> bool:
    """Whether the graph shows a Keras 3 model or layer: an object with ``_functional``,
    ``_operations`` or ``_layers``, or a Keras 3 ``Dense``/``Conv`` layer's private
    ``_kernel`` (tf_keras tracks ``kernel``). False without a graph."""
    return objects is not None and any(
        n in _KERAS3 or n == "_kernel" for kids in objects.children.values() for n, _ in kids)


def under_keras(objects: ObjectGraph, keys) -> bool:
    """Whether any of ``keys`` (variable keys) is held by an object the graph shows to be a
    Keras model or layer (:func:`keras_nodes`), at any depth below it. A Keras optimizer is
    none: the model weights it was built with (``_trainable_variables``) are only borrowed.
    False for a ``tf.Module`` (or dict, list) holding its own ``tf.Variable``s."""
    return _below(objects, keras_nodes(objects), keys)


def under_keras3_layer(objects: ObjectGraph, keys) -> bool:
    """Whether any of ``keys`` (variable keys) is held by a Keras 3 layer: an object with a
    child ``_kernel`` (Keras 3's ``Dense``/``Conv`` kernel; tf_keras tracks ``kernel``), at
    any depth below it. A Keras 3 subclassed model shows no ``_layers`` in the graph (Keras
    tracks its layers in its own lists, which a ``tf.train.Checkpoint`` does not save), only
    its attributes, so its layers' ``_kernel`` is what shows it (review-29-attack-r109 F5).
    Returns False for a ``tf.Module``'s own ``tf.Variable``s."""
    return _below(objects, {node for node, kids in objects.children.items()
                            if any(n == "_kernel" for n, _ in kids)}, keys)


def _below(objects: ObjectGraph, roots: set[int], keys) -> bool:
    """Whether any node of ``roots`` or below them holds one of ``keys``. Returns a bool."""
    todo = list(roots)
    seen = set(todo)
    while todo:
        for _, child in objects.children.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    wanted = set(keys)
    return any(objects.node_keys.get(n) in wanted for n in seen)


def shortest_tree(objects: ObjectGraph, starts: tuple[int, ...] | None = None
                  ) -> tuple[dict[int, int], dict[int, str]]:
    """Returns each node's parent and local name on its shortest path from the root, the
    path TensorFlow names keys by (breadth first). With ``starts`` (the objects a statement
    ``trainable:PATH`` names), what they hold is reached through them, as the stated order
    walks it: a model weight a Keras optimizer also lists in its ``_trainable_variables`` is
    on ``optimizer/_trainable_variables/N`` for ``trainable:optimizer``, not on its shorter
    path through the model (review-18-user-u20 F4)."""
    parent: dict[int, int] = {}
    name: dict[int, str] = {}

    def walk(queue: list[int], seen: set[int]) -> None:
        while queue:
            node = queue.pop(0)
            for local, child in objects.children.get(node, []):
                if child not in seen:
                    seen.add(child)
                    parent[child], name[child] = node, local
                    queue.append(child)

    walk([0], {0})
    if starts:
        above = {0}
        for s in starts:  # the starts' own paths stay as they are
            node = s
            while node in parent:
                above.add(node)
                node = parent[node]
        walk(list(starts), above | set(starts))
    return parent, name


def parting_chains(objects: ObjectGraph, parent: dict[int, int], variables, alike
                   ) -> Iterator[tuple[str, str, list[int], list[int], int]]:
    """For each two of ``variables`` (checkpoint keys, ``x`` sorting first) that are
    ``alike`` and part below a common object: ``(x, y, chain of x, chain of y, depth)``,
    chains being node paths from the root along ``parent`` (:func:`shortest_tree`) and
    ``depth`` the number of nodes they share (at least the root; pairs where one chain holds
    the other are left out)."""
    def chain(node: int) -> list[int]:
        out = [node]
        while out[-1] in parent:
            out.append(parent[out[-1]])
        return out[::-1]

    wanted = set(variables)
    chains = {k: chain(n) for n, k in objects.node_keys.items() if n in parent and k in wanted}
    keys = sorted(chains)
    for i, x in enumerate(keys):
        for y in keys[i + 1:]:
            if not alike(x, y):
                continue
            cx, cy = chains[x], chains[y]
            d = 0
            while d < min(len(cx), len(cy)) and cx[d] == cy[d]:
                d += 1
            if d == 0 or d >= min(len(cx), len(cy)):
                continue  # different roots or one inside the other
            yield x, y, cx, cy, d


def keras_holders(objects: ObjectGraph, variables) -> list[str]:
    """Object paths (``model/net``) of the Keras objects (:func:`keras_nodes`) that hold any
    of ``variables`` (checkpoint keys), outermost first; empty when none does.

    Under ``--apply-order trainable`` such a variable's place in
    ``tf.Module.trainable_variables`` depends on the Keras object's Python attributes, which
    the file does not record."""
    keras = keras_nodes(objects)
    if not keras:
        return []
    wanted = set(variables)
    parent, local = shortest_tree(objects)

    def path(node: int) -> str:
        parts = []
        while node in parent:
            parts.append(local[node])
            node = parent[node]
        return "/".join(reversed(parts))

    found: list[tuple[int, str]] = []
    for node, key in objects.node_keys.items():
        if key not in wanted:
            continue
        chain = []
        while node in parent:
            node = parent[node]
            chain.append(node)
        outer = [n for n in reversed(chain) if n in keras]
        if outer:
            found.append((outer[0], path(outer[0])))
    return sorted({p for _, p in found}, key=lambda p: (p.count("/"), p))


def child_position(objects: ObjectGraph, node: int, name: str) -> int:
    """Where the child ``name`` of ``node`` stands among its children, in the order the graph
    records them (a tf_keras model's layers in ``model.layers`` order); -1 when absent."""
    for i, (n, _c) in enumerate(objects.children.get(node, [])):
        if n == name:
            return i
    return -1


def keras_trainable_text(holders: list[str], stated: bool = True,
                         tracked: bool = True) -> str:
    """Why ``--apply-order trainable`` decides nothing for variables in the Keras objects at
    ``holders`` (object paths from :func:`keras_holders`), and what does; the tail of a
    refusal (``stated``: the caller gave ``trainable``; else no order was given; ``tracked``:
    whether ``--apply-order tracked`` may be offered, i.e. the file records Keras' order).
    Returns the text."""
    shown = ", ".join(p or "the checkpoint's root" for p in holders[:3])
    more = " ..." if len(holders) > 3 else ""
    head = ("--apply-order trainable cannot be read from the file here" if stated or not
            tracked else
            "only if you know how ema.apply() was called (the file cannot check it, so a "
            "wrong statement gives wrong averages): if it got Keras' "
            "model.trainable_variables of the model, pass --apply-order tracked (Python: "
            "apply_order='tracked'); if it got a tf.Module's trainable_variables, "
            "--apply-order trainable cannot be read from the file")
    tail = ("if ema.apply() got Keras' model.trainable_variables, pass --apply-order tracked; "
            "if it got a tf.Module's trainable_variables, " if stated and tracked else "so ")
    return (f"{head}: the variables lie in Keras objects ({shown}{more}: tf_keras "
            "layer-N/layer_with_weights-N or Keras 3 _layers/_functional children), and "
            "module.trainable_variables of a tf.Module visits a Keras object through its "
            "Python attributes, Keras' internal ones included (a tf_keras functional model's "
            "_output_layers before its other layers), which the checkpoint does not record; "
            f"{tail}in Python pass the live module: apply_ema(module, path, "
            "apply_order='trainable') reads the order from its own trainable_variables; or "
            "give the layers unique names when training")


def is_list(children: list[tuple[str, int]]) -> bool:
    """Children named ``0``…``n-1``: a list (by index, also for Keras) or a dict.

    Example:
        >>> is_list([("1", 5), ("0", 4)]), is_list([("a", 4)])
        (True, False)
    """
    return bool(children) and sorted(n for n, _ in children) == sorted(
        str(i) for i in range(len(children)))


def attribute_names(children: list[tuple[str, int]]) -> bool:
    """Whether every child name could be an object's attribute (a Python identifier): a node
    with a child named ``10`` or ``a-b`` is a dict (``{"10": v, "9": v}``), never a
    ``tf.Module`` or a layer (review-15-attack-r31 F6). Only ``setattr(m, "10", v)`` defeats
    this."""
    return all(name.isidentifier() for name, _ in children)
