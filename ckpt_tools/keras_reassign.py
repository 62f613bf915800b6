"""Where a stated ``--apply-order`` cannot be read from the object graph: Keras layers.

A tf_keras layer tracks its sublayers as they were last assigned: one re-assigned in
``build()`` (``self.a = Dense(...)`` again once the input size is known) is dropped from
Keras' list and appended at its end, while the object graph keeps it in its first place
(``_track_trackable(overwrite=True)``). So Keras' ``model.trainable_variables`` (what
``--apply-order tracked`` states) of same-named sublayers of one layer may follow either
order, and the file cannot tell which.

``tf.Module.trainable_variables`` of a module holding a subclassed tf_keras model or custom
layer walks that layer's Python attributes sorted by name, Keras' internal lists
(``_self_tracked_trackables``, in tracking order) before the public ones: what
``--apply-order trainable`` states is the Keras order there, and sorted by name for a
``tf.Module``; the file records no types, so where the two differ it cannot tell either.
"""

from __future__ import annotations

from .formats.objgraph import ObjectGraph
from .keras_graph import (
    attribute_names,
    is_list,
    keras_nodes,
    parting_chains,
    shortest_tree,
    tf_keras_models,
)
from .scoped_order import scope_nodes


def _partings(objects: ObjectGraph, variables, alike, starts: tuple[int, ...] | None = None):
    """For each two of ``variables`` (checkpoint keys) that are ``alike`` and part below one
    object other than the root: ``(x, y, node chain from the root to the object, local name
    of x's branch, of y's)``. ``starts``: the objects a statement ``trainable:PATH`` names,
    through which what they hold is reached (:func:`shortest_tree`)."""
    parent, local = shortest_tree(objects, starts)
    for x, y, cx, cy, d in parting_chains(objects, parent, variables, alike):
        if d >= 2:  # apart at the root: refused elsewhere
            yield x, y, cx[:d], local[cx[d]], local[cy[d]]


def _path(chain: list[int], objects: ObjectGraph,
          starts: tuple[int, ...] | None = None) -> str:
    _parent, local = shortest_tree(objects, starts)
    return "/".join(local[n] for n in chain if n in local)


def _keras_named(objects: ObjectGraph, x: str, y: str) -> bool:
    """Whether both variables bear names a Keras layer gives its weights (scoped by the
    layer's name: ``net/fc/kernel``), never a plain unnamed or named ``tf.Variable``'s
    (``Variable``, ``kernel``)."""
    return "/" in objects.full_names.get(x, "") and "/" in objects.full_names.get(y, "")


def tracked_in_layers(objects: ObjectGraph, variables, alike,
                      starts: tuple[int, ...] | None = None) -> list[str]:
    """Object paths of the objects below which two ``alike`` variables part through named
    attributes (no list, no tf_keras functional or ``Sequential`` model, whose ``layer-N``
    are ``model.layers`` order) where the object is a tf_keras layer the graph proves
    (inside a tf_keras functional or ``Sequential`` model) or may be one (the two bear
    Keras-made names): Keras' tracked order of those attributes is not recorded (a sublayer
    re-assigned in ``build()`` moves last, in tf_keras and Keras 3 alike). ``starts``: as
    in :func:`_partings`. Empty when none."""
    models = tf_keras_models(objects)
    kids = objects.children
    found = []
    for x, y, chain, _nx, _ny in _partings(objects, variables, alike, starts):
        lca = chain[-1]
        if (lca in models or is_list(kids.get(lca, []))
                or not (any(n in models for n in chain[:-1]) or _keras_named(objects, x, y))):
            continue
        found.append(_path(chain, objects, starts))
    return list(dict.fromkeys(found))


def trainable_through_layers(objects: ObjectGraph, variables, alike,
                             starts: tuple[int, ...] | None = None) -> list[str]:
    """Object paths of the objects that may be subclassed tf_keras models or layers below
    which two ``alike`` variables part: the two bear Keras-made names, the object is no list
    and lies in no object the graph marks as Keras (refused as such elsewhere).
    ``tf.Module.trainable_variables`` reads such an object's attributes sorted by name if it
    is a ``tf.Module``, in Keras' tracking order (as assigned; one re-assigned in
    ``build()`` last) if it is a Keras object, and the file records neither its type nor that
    order. ``starts``: the objects a statement ``trainable:PATH`` names, whose own order is
    read (a Keras 3 optimizer's ``_trainable_variables`` is a list: the model's Dense
    attributes it holds then part in that list, not in the model: review-24-user-u26 F13).
    Empty when none."""
    keras = keras_nodes(objects)
    kids = objects.children
    found = []
    for x, y, chain, _nx, _ny in _partings(objects, variables, alike, starts):
        lca = chain[-1]
        if (any(n in keras for n in chain) or is_list(kids.get(lca, []))
                or not _keras_named(objects, x, y)):
            continue
        found.append(_path(chain, objects, starts))
    return list(dict.fromkeys(found))


def layer_orders_open(objects: ObjectGraph, variables, alike, stated: str,
                      starts: tuple[int, ...] | None = None) -> list[str]:
    """Object paths where the stated order (``"tracked"`` or ``"trainable"``, read through
    ``starts`` where it names objects: ``trainable:optimizer``) of ``alike`` variables
    depends on Keras' tracking, which the file does not record (:func:`tracked_in_layers`,
    :func:`trainable_through_layers`). Empty when none."""
    if stated == "tracked":
        return tracked_in_layers(objects, variables, alike, starts)
    if stated == "trainable":
        return trainable_through_layers(objects, variables, alike, starts)
    return []


def layer_order_text(objects: ObjectGraph, candidates, alike, apply_order: str | None,
                     otherwise: str, keep: bool = False) -> str:
    """The tail of a refusal of same-named ``candidates`` (checkpoint keys), given the one
    built so far (``otherwise``; ``keep``: it names a cause of its own, kept first): where
    the stated ``apply_order`` rests on Keras' tracking order (see
    :func:`layer_orders_open`), why the file cannot read it and the way that decides (the
    live object in Python); where another statement would (no order or ``"trainable"``
    stated), that added. Returns the text (``otherwise`` where Keras' tracking decides
    nothing)."""
    layers = tracked_in_layers(objects, candidates, alike)
    held = trainable_through_layers(objects, candidates, alike)
    live = ("in Python pass the live object as it was saved: apply_ema(model, path, "
            "apply_order=...) or apply_ema(tf.train.Checkpoint(model=model), path, "
            "apply_order=...) reads the order from its own trainable_variables; or give the "
            "layers unique names when training")
    why_layers = (f"{_shown(layers)} is or may be a tf_keras layer (in a tf_keras "
                  "functional or Sequential model, or holding Keras-named weights such as "
                  "fc/kernel), and Keras' model.trainable_variables lists its same-named "
                  "sublayers in the order they were last assigned: one re-assigned in build() "
                  "(self.a = Dense(...) again once the input size is known) comes last while "
                  "the checkpoint keeps its first place")
    why_held = (f"{_shown(held)} may be a subclassed tf_keras model or custom layer held by a "
                "tf.Module, whose trainable_variables then visits its sublayers in Keras' "
                "tracking order (as assigned; one re-assigned in build() last), or a "
                "tf.Module, which visits them sorted by attribute name; the checkpoint "
                "records no types")
    stated = {"tracked": why_layers if layers else "",
              "trainable": why_held if held else ""}.get(apply_order or "", "")
    if stated and keep:
        return f"{otherwise}; and, as well, {stated}"
    if stated:
        return f"--apply-order {apply_order} cannot be read from the file here: {stated}; {live}"
    if apply_order is None and layers and held:
        return ("neither --apply-order tracked nor trainable can be read from the file here: "
                f"{why_layers}; and {why_held}; {live}")
    added = [f"--apply-order {o} cannot be read from the file here: {why}"
             for o, why, found in (("tracked", why_layers, layers),
                                   ("trainable", why_held, held and apply_order is None))
             if found]
    if not added:
        return otherwise
    said = "in Python pass the live" in otherwise  # the way out is named already
    return f"{otherwise}; but {'; and '.join(added)}{'' if said else '; ' + live}"


def _shown(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (" ..." if len(paths) > 3 else "")


def reassignable(objects: ObjectGraph, variables, alike,
                 starts: tuple[int, ...] | None = None) -> list[str]:
    """Object paths of the objects below which a stated order put two ``alike`` variables
    (checkpoint keys it paired) in the order the graph records their named attributes in:
    if such an object is a tf_keras layer or subclassed model that re-assigned one of them in
    ``build()`` (or, under ``"trainable"``, one held by a ``tf.Module``), Keras tracked them
    otherwise, which the file cannot show. Lists and tf_keras functional or ``Sequential``
    models (``layer-N``: ``model.layers`` order) are exempt. ``starts``: as in
    :func:`_partings`. Empty when none."""
    models = tf_keras_models(objects)
    kids = objects.children
    found = []
    for _x, _y, chain, _nx, _ny in _partings(objects, variables, alike, starts):
        lca = chain[-1]
        if (lca in models or is_list(kids.get(lca, []))
                or not attribute_names(kids.get(lca, []))):  # a dict {"10": v}: no attributes
            continue
        found.append(_path(chain, objects, starts))
    return list(dict.fromkeys(found))


def reassign_note(objects: ObjectGraph, entries, pairs: dict[str, str],
                  apply_order: str) -> tuple[str, list[str]]:
    """The note for pairings a stated ``apply_order`` made that rest on Keras having tracked
    the sublayers as the graph records them (:func:`reassignable`): ``(text, object paths)``,
    or ``("", [])`` where none does."""
    def alike(a: str, b: str) -> bool:
        return (objects.full_names.get(a) == objects.full_names.get(b)
                and (entries[a].dtype, entries[a].shape) == (entries[b].dtype, entries[b].shape))

    paths = reassignable(objects, sorted(set(pairs.values())), alike,
                         scope_nodes(objects, apply_order))
    if not paths:
        return "", []
    live = (f"in Python, apply_ema(model, path, apply_order='{apply_order}') or "
            "apply_ema(tf.train.Checkpoint(model=model), path, apply_order="
            f"'{apply_order}') with the live object reads its real order")
    if apply_order == "tracked":
        return (f"note: --apply-order tracked here reads the same-named children of "
                f"{_shown(paths)} in the order the checkpoint lists them (as first assigned); "
                "a tf_keras layer or subclassed model that re-assigned one of them in build() "
                "(self.w = ... again once the input size is known) tracked that one last, "
                "which the checkpoint cannot show: if yours did, these averages are on the "
                f"wrong variables; {live}", paths)
    return (f"note: --apply-order trainable here reads {_shown(paths)} as a tf.Module "
            "(attributes sorted by name); if it is a subclassed tf_keras model or custom layer "
            "held by a tf.Module, trainable_variables follow Keras' tracking order instead "
            "(as assigned; one re-assigned in build() last), which the checkpoint cannot "
            f"show: then these averages may be on the wrong variables; {live}", paths)
