"""A TF2 checkpoint whose saved model holds no variable (review-30-user-u32 F5).

A Keras 3 model whose only layers sit in a list attribute (``self.blocks = [Dense(8), ...]``)
keeps that list in its own ``TrackedList``, which ``tf.train.Checkpoint`` does not save: the
file records the model object and none of its weights. Saved as
``tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in m.trainable_variables])``, it holds
averages of variables it does not store, and "save them with the model" is the call that was
made. TF's object graph reaches the layers' variables only through an optimizer's list of the
variables it trains, so saving the optimizer too and stating ``--apply-order
trainable:optimizer`` reads them (the README's remedy, checked in
``tests/test_keras3_layer_list_orphans.py``).
"""

from __future__ import annotations

from .formats.objgraph import ObjectGraph


def empty_children(objects: ObjectGraph, held: set[str]) -> list[str]:
    """The root's children, other than those named in ``held`` and ``save_counter``, under
    which the object graph records no variable.

    Returns:
        `list`: their names, in recorded order (``[]`` where every child holds one).
    """
    out = []
    for name, child in objects.children.get(0, []):
        if name in held or name == "save_counter":
            continue
        seen, todo = {child}, [child]
        while todo:
            node = todo.pop()
            if node in objects.node_keys:
                break
            for _n, c in objects.children.get(node, []):
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
        else:
            out.append(name)
    return out


def unsaved_layers_advice(empty: list[str]) -> str:
    """What :func:`~ckpt_tools.ema_missing.refuse_orphans` says where ``empty`` (from
    :func:`empty_children`) names the objects saved without a variable.

    Returns:
        `str`: the cause (a Keras 3 layer list, which the checkpoint does not save) and the
        remedy that reads such a model's weights.
    """
    named = ", ".join(empty)
    return (f"{named} holds no variable at all: a Keras 3 model keeps layers assigned in a "
            "list attribute (self.blocks = [Dense(...), ...]) in a TrackedList, which "
            "tf.train.Checkpoint does not save, so the weights are stored only where an "
            "optimizer lists them; save the optimizer too (tf.train.Checkpoint(model=model, "
            "optimizer=optimizer, ema=[...])) and state --apply-order trainable:optimizer")
