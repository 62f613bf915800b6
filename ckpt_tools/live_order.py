"""The order ``ema.apply()`` got a live object's variables in, read from the object itself.

``apply_order`` states which order ``ExponentialMovingAverage.apply()`` received same-named
variables in. The checkpoint records no types, so what that order is for a ``tf.Module``
holding Keras objects, or a tf_keras layer that re-assigned a sublayer in ``build()`` (Keras
then tracks it last while the object graph keeps its first place), cannot be read from the
file. Given the live object, :func:`live_order` reads it from the objects' own
``trainable_variables``, also where the object is a wrapper (``tf.train.Checkpoint(model=m)``)
around the ones that have them.
"""

from __future__ import annotations

from .live_pairing import escape_local_name, object_keys, trackable_children
from .pairing import LiveOrder

_MAX_DEPTH = 32  # wrappers nest a few levels at most; never walk a cycle


def _children(obj) -> list:
    """The live object's trackable children, in the order it lists them."""
    try:
        return list(obj._trackable_children("checkpoint").values())
    except (AttributeError, TypeError):
        return [ref.ref for ref in getattr(obj, "_checkpoint_dependencies", [])]


def _is_keras(obj) -> bool:
    """Whether ``obj`` is a Keras layer or model (tf_keras or Keras 3): its own
    ``trainable_variables`` are Keras' tracked order."""
    return callable(getattr(obj, "_flatten_layers", None))


def _sources(obj, stated: str) -> list:
    """The objects whose own ``trainable_variables`` give the stated order: ``obj`` itself
    where it has them (``"trainable"``) or is a Keras object (``"tracked"``); else those of
    its trackable children, outermost first (the model of ``tf.train.Checkpoint(model=m)``,
    the Keras models a ``tf.Module`` holds). Returns them in the object's order."""
    found: list = []
    seen: set[int] = set()

    def walk(node, depth: int) -> None:
        if id(node) in seen or depth > _MAX_DEPTH:
            return
        seen.add(id(node))
        own = getattr(node, "trainable_variables", None) if not _is_variable(node) else None
        if own is not None and (_is_keras(node) if stated == "tracked" else True):
            found.append(node)
            return
        for child in _children(node):
            walk(child, depth + 1)

    walk(obj, 0)
    return found


def keras_source(obj):
    """The one Keras layer or model whose ``trainable_variables`` a tf_keras optimizer built
    by ``fit()`` averaged: ``obj`` itself where it is one, else the only Keras object a
    wrapper without variables of its own (``tf.train.Checkpoint(model=m)``) holds outermost.

    Returns:
        The Keras object, or None where there is none or several (which one the optimizer
        was built from, and in which order their lists were joined, is not known), or where
        ``obj`` is a ``tf.Module`` (a custom loop may have built the optimizer from its own
        ``trainable_variables``, walked in another order than Keras').
    """
    if isinstance(obj, (list, tuple)) or _is_variable(obj):
        return None
    if _is_keras(obj):
        return obj
    if getattr(obj, "trainable_variables", None) is not None:
        return None
    found = _sources(obj, "tracked")
    return found[0] if len(found) == 1 else None


def _listed(obj, name: str) -> list:
    """``obj.<name>`` as a list: a property, or a method (a legacy optimizer's
    ``variables()``); empty where it is neither."""
    found = getattr(obj, name, None)
    try:
        return list(found() if callable(found) else found or ())
    except TypeError:
        return []


def _is_variable(obj) -> bool:
    import tensorflow as tf  # apply_ema checked it is installed

    return isinstance(obj, tf.Variable) or isinstance(getattr(obj, "value", None), tf.Variable)


def live_order(model_or_variables, pairs: list, stated: str = "trainable") -> str | LiveOrder:
    """What ``apply_order=stated`` means for this live object, as checkpoint keys in order.

    ``"trainable"``: the object's own ``trainable_variables`` (its dicts, lists, sub-modules
    and Keras objects are known here, where the file records no types); for a wrapper without
    them (``tf.train.Checkpoint(model=m)``), those of each child that has them. ``"tracked"``:
    Keras' ``trainable_variables`` of the outermost Keras objects found from the object
    (itself, or those a wrapper or ``tf.Module`` holds), the order Keras tracked their
    sublayers in (a sublayer re-assigned in ``build()`` last), which the object graph does
    not record. Variables outside those objects keep the order read from the file
    (``LiveOrder.stated``). A list of variables has no order of its own.

    Returns:
        `LiveOrder` (keys of every variable the sources hold are ``held``; a held one missing
        from the order is not trainable), or ``stated`` itself where no object gives an order
        (a list of variables; ``"tracked"`` with no Keras object).
    """
    if isinstance(model_or_variables, (list, tuple)):
        return stated
    sources = _sources(model_or_variables, stated)
    if not sources:
        return stated
    key_of = {id(v): k for v, k in pairs}
    order: list[str] = []
    held: list[str] = []
    for src in sources:
        order.extend(key_of[id(v)] for v in _listed(src, "trainable_variables") if id(v) in key_of)
        held.extend(key_of[id(v)] for v in _listed(src, "variables") if id(v) in key_of)
    if sources == [model_or_variables]:  # all it holds: a held one not in the order is frozen
        held = list(key_of.values())
    return LiveOrder(list(dict.fromkeys(order)), held=held, stated=stated)


def _node_paths(obj) -> dict[str, object]:
    """Escaped object path (as checkpoint keys spell it, "" for ``obj``) -> live object, for
    every object reachable from ``obj``; an object reached by two paths is found at both."""
    out: dict[str, object] = {"": obj}
    seen = {id(obj)}
    queue = [(obj, "")]
    while queue:
        node, path = queue.pop(0)
        for name, child in trackable_children(node).items():
            child_path = f"{path}/{escape_local_name(name)}" if path else escape_local_name(name)
            out.setdefault(child_path, child)
            if id(child) not in seen and not _is_variable(child):
                seen.add(id(child))
                queue.append((child, child_path))
    return out


def _placed_at(obj, pairs: list) -> str | None:
    """Where ``obj`` sits in the checkpoint: "" where it is the root, ``model`` where it is
    the root's child of that name (``apply_ema(gan, ...)`` for ``Checkpoint(model=gan)``).
    None where its variables' keys do not all say one place."""
    rel = {id(v): k for k, v in object_keys(obj).items()}
    places = set()
    for v, key in pairs:
        mine = rel.get(id(v))
        if mine is None:
            continue
        if key == mine:
            places.add("")
        elif key.endswith("/" + mine):
            places.add(key[: -len(mine) - 1])
    return places.pop() if len(places) == 1 else None


def scoped_live_order(obj, pairs: list, apply_order) -> LiveOrder | None:
    """What ``apply_order="trainable:PATH"`` (or its
    :class:`~ckpt_tools.scoped_order.ScopedOrder`) means for a live object: the own
    ``trainable_variables`` of the live object at each ``PATH`` (``gan.generator`` for
    ``model/generator`` where ``obj`` is ``tf.train.Checkpoint(model=gan)`` or ``gan`` placed
    as ``model``), as checkpoint keys, concatenated in the stated order. The live object
    knows what the file cannot tell: whether its containers are lists or dicts keyed '0',
    '1'… (visited sorted as strings) (review-16-attack-r33 F11).

    Returns:
        `LiveOrder` (``held``: the keys of every variable those objects hold; ``stated``:
        the statement, read from the file for the groups they do not hold), or None where
        ``apply_order`` names no path, the object is a list of variables, or a path is not
        an object inside ``obj`` (the file's reading of the statement then stands).
    """
    from .scoped_order import parse_order, within_of

    try:
        scoped = parse_order(apply_order)
    except ValueError:  # refused where every order is checked
        return None
    if not (isinstance(scoped, str) and within_of(scoped)) or isinstance(
            obj, (list, tuple)) or _is_variable(obj):
        return None
    at = _placed_at(obj, pairs)
    if at is None:
        return None
    nodes = _node_paths(obj)
    key_of = {id(v): k for v, k in pairs}
    order: list[str] = []
    held: list[str] = []
    for path in scoped.within:
        spelled = "/".join(escape_local_name(p) for p in path.split("/"))
        if at and spelled != at and not spelled.startswith(at + "/"):
            return None
        node = nodes.get(spelled[len(at):].lstrip("/") if at else spelled)
        sources = [] if node is None else _sources(node, scoped)
        if not sources:
            return None
        for src in sources:
            order.extend(key_of[id(v)] for v in _listed(src, "trainable_variables")
                         if id(v) in key_of)
            held.extend(key_of[id(v)] for v in _listed(src, "variables") if id(v) in key_of)
    return LiveOrder(list(dict.fromkeys(order)), held=held, stated=scoped)
