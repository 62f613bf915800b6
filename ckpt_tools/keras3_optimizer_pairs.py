"""Keras 3 optimizer variables in a TF2 object checkpoint, paired with the model variables
they belong to: by the lists the optimizer records in order (``_trainable_variables``,
``_variables``, ``_model_variables_moving_average``: :func:`keras3_scoped_pairs`) and by the
names it gives them, ``<optimizer>/<var path, '/' as '_'>_<what>`` (:func:`keras3_pairs`;
:func:`keras3_clashes` for a name several variables carry). Used by
:mod:`~ckpt_tools.object_roles` for ``use_ema`` averages and slots."""

from __future__ import annotations

from .formats.objgraph import ObjectGraph
from .roles import split_key


def _flat(full_name: str) -> str:
    """``full_name`` as a Keras 3 optimizer flattens it into its variables' names."""
    return full_name.replace("/", "_")


def keras3_scoped_pairs(objects: ObjectGraph, full: dict[str, str], entries,
                        suffix: str) -> dict[str, str]:
    """Keras 3 averages paired inside their own optimizer: a ``tf.train.Checkpoint`` of a
    Keras 3 optimizer records its ``_variables`` and the ``_trainable_variables`` it was built
    with (references to the model's variable objects). An average ``<opt>/<flat path>_average``
    of one optimizer is the variable of that same optimizer's ``_trainable_variables`` whose
    name flattens to ``<flat path>``: proven even when two models share variable names (a
    GAN's generator and critic both named ``net``).

    Where two of its variables flatten to one name (a layer ``x_dense`` and a block ``x``
    holding a ``dense``: both ``net_x_dense_kernel_average``), the order proves it: Keras
    builds one average per variable of ``_trainable_variables``, in that order, as one block of
    ``_variables`` (both lists recorded in order); used when every average of the optimizer
    is in that block, one per held variable, each of its variable's shape and dtype. Returns
    average key -> variable key."""
    out: dict[str, str] = {}
    keys = objects.node_keys
    for _node, kids in objects.children.items():
        named = dict(kids)
        if "_trainable_variables" not in named or "_variables" not in named:
            continue
        held = [keys[c] for _n, c in _in_order(objects.children.get(
            named["_trainable_variables"], [])) if c in keys]
        mine = [keys[c] for _n, c in _in_order(objects.children.get(named["_variables"], []))
                if c in keys]
        if any(k not in entries for k in held + mine):
            # The object graph names a tensor the index lacks (a damaged file): positions
            # prove nothing then, so this optimizer pairs nothing here.
            continue
        by_flat: dict[str, str | None] = {}
        for k in held:
            if k in full:
                f = _flat(full[k])
                by_flat[f] = k if by_flat.get(f, k) == k else None
        for k in mine:
            last = split_key(full.get(k, ""))[1]
            if "/" not in full.get(k, "") or not last.endswith("_" + suffix):
                continue
            src = by_flat.get(last[: -len(suffix) - 1])
            if src is not None and src != k and entries[src].shape == entries[k].shape:
                out[k] = src
        listed = [keys[c] for _n, c in _in_order(objects.children.get(
            named.get("_model_variables_moving_average", -1), [])) if c in keys]
        if (listed and len(listed) == len(held) == len(set(held)) == len(set(listed))
                and all(k in entries for k in listed)
                and all(entries[a].shape == entries[v].shape
                        and entries[a].dtype == entries[v].dtype
                        for a, v in zip(listed, held, strict=True))):
            # Keras builds _model_variables_moving_average[i] for _trainable_variables[i]:
            # both lists recorded in order prove each pair, whatever the names (two weight
            # paths flattening to one average name: review-14-attack-r27 F6)
            out.update(zip(listed, held, strict=True))
            continue
        averages = [i for i, k in enumerate(mine) if "/" in full.get(k, "")
                    and split_key(full[k])[1].endswith("_" + suffix)]
        if (averages and len(averages) == len(held) and len(held) == len(set(held))
                and averages == list(range(averages[0], averages[0] + len(held)))
                and all(entries[mine[i]].shape == entries[v].shape
                        and entries[mine[i]].dtype == entries[v].dtype
                        for i, v in zip(averages, held, strict=True))):
            for i, v in zip(averages, held, strict=True):
                if out.get(mine[i], v) == v:
                    out[mine[i]] = v
    return out


def _in_order(kids: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """A tracked list's children by index (``_variables/0``, ``/1``…, ``/10``): the list's own
    order, which positional pairing relies on."""
    if all(n.isdigit() for n, _ in kids):
        return sorted(kids, key=lambda kid: int(kid[0]))
    return kids


def keras3_clashes(full: dict[str, str], paired: dict[str, str],
                   suffix: str) -> dict[str, tuple[str, ...]]:
    """Keras 3 averages (``<opt>/<flat path>_average``) left unpaired because several
    variables carry that path (two models of the same name): average key -> candidates."""
    by_flat: dict[str, list[str]] = {}
    for k, f in full.items():
        by_flat.setdefault(_flat(f), []).append(k)
    out = {}
    for k, f in full.items():
        last = split_key(f)[1]
        if k in paired or "/" not in f or not last.endswith("_" + suffix):
            continue
        cands = [c for c in by_flat.get(last[: -len(suffix) - 1], []) if c != k]
        if len(cands) > 1:
            out[k] = tuple(cands)
    return out


#: What a Keras 3 optimizer names its slot variables after (``<opt>/<flat path>_<what>``).
KERAS3_SLOTS = ("momentum", "velocity", "m", "v", "vhat", "accumulator", "accumulators",
                 "delta_accumulator", "average_gradient", "moment", "momentums", "velocities")


def keras3_pairs(full: dict[str, str], entries, suffix: str) -> dict[str, str]:
    """Keras 3 optimizers name their variables ``<optimizer>/<var path, '/' as '_'>_<what>``
    (``sgd/net_dense_kernel_average``): returns key -> key of the model variable, for ``what`` ==
    ``suffix``, when shapes agree and exactly one variable has that path."""
    flat: dict[str, str | None] = {}

    def add(name: str, key: str) -> None:  # two variables flattening alike: neither is proven
        flat[name] = key if flat.get(name, key) == key else None

    for k, f in full.items():
        add(f.replace("/", "_"), k)
    # TensorFlow names a subclassed model's variables <model>/<variable> while Keras paths
    # read <model>/<layer>/<variable>: the layer part is the key's object path below the root
    # attribute (``model/zeta/_kernel`` -> ``sub_zeta_kernel``).
    attr = "/.ATTRIBUTES/VARIABLE_VALUE"
    for k, f in full.items():
        parts = k[: -len(attr)].split("/") if k.endswith(attr) else []
        if len(parts) > 2 and parts[0] != "optimizer" and "/" in f:
            add("_".join([f.split("/")[0]] + [p.lstrip("_") for p in parts[1:]]), k)
    out = {}
    for k, f in full.items():
        last = split_key(f)[1]
        if "/" in f and last.endswith("_" + suffix):
            src = flat.get(last[: -len(suffix) - 1])
            if src is not None and src != k and entries[src].shape == entries[k].shape:
                out[k] = src
    return out
