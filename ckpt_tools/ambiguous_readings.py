"""What the object graph leaves open about the order of same-named variables whose averages
:mod:`ckpt_tools.ema_ambiguous` refuses to pair: the containers that may be lists or dicts,
tf.Modules or dicts, dicts or layers (each read in another order), several EMA objects'
averages kept apart, and whether any uniform reading fits the dtypes and shapes.
"""

from __future__ import annotations

from collections.abc import Callable

from .checkpoint import Checkpoint
from .pairing import list_or_dict_paths, open_containers, open_dicts, root_child, variable_orders


def alike_keys(ckpt: Checkpoint) -> Callable[[str, str], bool]:
    """Returns the test whether two keys of ``ckpt`` hold one dtype and shape (a same-named
    pair's rivals)."""
    entries = ckpt.entries()
    return lambda a, b: (entries[a].dtype, entries[a].shape) == (entries[b].dtype,
                                                                 entries[b].shape)


def several_objects(unpaired) -> list[str]:
    """The root attributes holding ``unpaired`` averages when those outnumber the variables
    they may average (``fast/0…2`` and ``slow/0…2`` for three variables): then they are several
    EMA objects' averages and no single ``apply()`` order fits them all; empty otherwise."""
    averages = {v.name for v in unpaired}
    candidates = {c for v in unpaired for c in v.ema_candidates}
    owners = sorted({root_child(a) for a in averages} - {root_child(c) for c in candidates})
    return owners if len(owners) > 1 and len(averages) > len(candidates) else []


def module_or_dict(ckpt: Checkpoint, unpaired) -> list[str]:
    """The objects holding the candidates of ``unpaired`` averages (``model/z_blocks/0``)
    when the readings of ``module.trainable_variables`` with every node-that-could-be-a-dict
    read as a dict or as a tf.Module (see :func:`~ckpt_tools.pairing.variable_orders`) order
    those candidates differently; empty when they agree (the stated order fails for another
    reason)."""
    if ckpt.objects is None:
        return []
    cands = {c for v in unpaired for c in v.ema_candidates}
    orders = variable_orders(ckpt.objects)["trainable"]
    half = len(orders) // 2  # as tf.Modules, then as dicts; lists read as lists first
    first, second = (sorted((k for k in cands if k in order), key=order.__getitem__)
                     for order in (orders[0], orders[half]))
    if first == second:  # the uniform readings agree; a container read apart may not
        entries = ckpt.entries()

        def alike(a: str, b: str) -> bool:
            return (entries[a].dtype, entries[a].shape) == (entries[b].dtype, entries[b].shape)

        return open_containers(ckpt.objects, sorted(cands), alike)
    holders = [k.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE").rpartition("/")[0]
               for k in first]
    return list(dict.fromkeys(h for h in holders if h))


def a_reading_fits(ckpt: Checkpoint, unpaired) -> bool:
    """Whether ``module.trainable_variables`` read with the objects holding variables as
    tf.Modules, or as dicts (:func:`~ckpt_tools.pairing.variable_orders`), pairs every one of
    ``unpaired`` consistently with the dtypes and shapes; False where both contradict them (the
    stated order is wrong, whatever the types)."""
    from .object_roles import pair_object_shadows

    orders = variable_orders(ckpt.objects)["trainable"]
    wanted = {v.name for v in unpaired}
    for order in (orders[0], orders[len(orders) // 2]):
        keys = sorted(order, key=order.__getitem__)
        pairing = pair_object_shadows(ckpt.entries(), ckpt.objects, ckpt.ema_names(), keys)
        if wanted <= set(pairing.pairs):
            return True
    return False


def dict_or_layer(ckpt: Checkpoint, unpaired) -> list[str]:
    """Object paths (``model/heads``) of the nodes above the candidates of ``unpaired`` that
    Keras orders one way as a dict (sorted keys) and another as a layer (assignment order;
    see :func:`~ckpt_tools.pairing.open_dicts`)."""
    if ckpt.objects is None:
        return []
    entries = ckpt.entries()
    cands = sorted({c for v in unpaired for c in v.ema_candidates})

    def alike(a: str, b: str) -> bool:
        return (entries[a].dtype, entries[a].shape) == (entries[b].dtype, entries[b].shape)

    return open_dicts(ckpt.objects, cands, alike)


def list_or_dict(ckpt: Checkpoint, unpaired) -> list[str]:
    """Object paths (``model/blocks``) of nodes with more than ten children named ``0``,
    ``1``… above the candidates of ``unpaired``: a list or a dict with digit keys, which
    ``module.trainable_variables`` visits in different orders."""
    if ckpt.objects is None:
        return []
    paths = list_or_dict_paths(ckpt.objects)
    cands = [c.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE") for v in unpaired
             for c in v.ema_candidates]
    return [p for p in paths if any(c.startswith(p + "/") for c in cands)]
