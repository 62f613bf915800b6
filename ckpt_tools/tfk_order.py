"""tf_keras (Keras 2) ``use_ema`` averages in a TF-format checkpoint, paired by order.

``model.save_weights("w")`` (or ``ModelCheckpoint(..., save_weights_only=True)`` with a TF
prefix) of a model compiled with ``tf_keras.optimizers.Adam(use_ema=True)`` keeps the model as
the checkpoint's root and its optimizer as ``optimizer``. The optimizer built one average per
variable of the list it was first given (``fit()`` gives ``model.trainable_variables``), in
that order, as ``optimizer/_model_variables_moving_average/0, 1, ...`` (recorded in order), and
names each ``Adam/average/<variable name>``. Sublayers given one name (two ``Dense(6,
name="fc")`` in a subclassed model) give their weights one name, so the name pairs nothing
there; the order does, when it is known:

- the live model (``apply_ema(model, path)``): its own ``trainable_variables`` are that order
  (the code that built it in training builds it again, a layer re-assigned in ``build()``
  included), checked against every average's name, dtype and shape;
- ``--apply-order tracked`` (a statement): Keras visits a subclassed model's layers in the
  order their attributes were first assigned, which the object graph records for the root
  model; a statement, because the file cannot show that ``fit()`` built the optimizer, nor a
  layer re-assigned later (in ``build()``: the graph keeps its first place, Keras moves it
  last), nor a nested dict (Keras visits it sorted by key, the graph keeps insertion order),
  which is refused. Only a group of same-named weights that all have an average is placed: a
  frozen layer's weights have none, and the TF format does not record which were frozen.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import roles as R
from .formats.objgraph import ObjectGraph
from .pairing import open_dicts, variable_orders
from .wording import agreeing, counted


def recorded_averages(objects: ObjectGraph | None) -> list[str]:
    """Keys of the root model's optimizer's ``_model_variables_moving_average``, in its list
    order (the order the optimizer was built in); empty where the root holds no such list."""
    if objects is None:
        return []
    root = dict(objects.children.get(0, []))
    opt = root.get("optimizer")
    listed = dict(objects.children.get(opt, [])).get("_model_variables_moving_average") \
        if opt is not None else None
    if listed is None:
        return []
    kids = objects.children.get(listed, [])
    if not all(n.isdigit() for n, _ in kids):
        return []
    keys = objects.node_keys
    return [keys[c] for _n, c in sorted(kids, key=lambda kid: int(kid[0])) if c in keys]


def open_averages(objects: ObjectGraph | None, variables: dict) -> dict[str, tuple[str, ...]]:
    """The root optimizer's averages the file leaves open (several same-named weights fit):
    average key -> candidate weight keys."""
    out = {}
    for k in recorded_averages(objects):
        v = variables.get(k)
        if v is not None and v.role == R.EMA and v.ema_style == "keras" and not v.ema_of \
                and v.ema_candidates:
            out[k] = tuple(v.ema_candidates)
    return out


def order_pairs(objects: ObjectGraph | None, variables: dict,
                apply_order: str | Sequence[str] | None) -> dict[str, str]:
    """Pairs the open averages (:func:`open_averages`) by ``apply_order``: ``"tracked"`` (the
    statement, read from the object graph) or the live model's ``trainable_variables`` as
    checkpoint keys (``apply_ema`` gives them). Returns average key -> weight key; empty where
    the order does not place them (``"trainable"``, a tf.Module's order, never does)."""
    open_ = open_averages(objects, variables)
    if not open_ or apply_order is None or apply_order == "trainable":
        return {}
    if not isinstance(apply_order, str):
        return _live_pairs(objects, variables, list(apply_order), open_)
    if apply_order != "tracked":
        return {}
    order = model_root_order(objects, variable_orders(objects)["tracked"][0])
    groups: dict[frozenset, list[str]] = {}
    for a in recorded_averages(objects):  # list order: the order the optimizer was built in
        if a in open_:
            groups.setdefault(frozenset(open_[a]), []).append(a)
    out: dict[str, str] = {}
    for cands, avgs in groups.items():
        if len(avgs) != len(cands) or not all(c in order for c in cands):
            continue  # a frozen layer's weights have no average: which ones is not recorded
        if any(p for p in open_dicts(objects, sorted(cands), lambda a, b: True)):
            continue  # a nested dict (sorted by key) or a layer (assignment order)?
        if own_and_sub_holders(cands):
            continue  # a nested Model (own weights last) or a Layer (own weights first)?
        out.update(zip(avgs, sorted(cands, key=order.__getitem__), strict=True))
    # Every average, the proven ones too, must then be in that order (a layer re-assigned in
    # build() is averaged last, after a uniquely named layer the graph records after it):
    # else the statement is wrong, and nothing rests on it.
    places = [order.get(t) for a in recorded_averages(objects)
              if (t := out.get(a) or getattr(variables.get(a), "ema_of", None))]
    if None in places or any(x >= y for x, y in zip(places, places[1:], strict=False)):
        return {}
    return out


def _holder(key: str) -> str:
    """The object path of the object holding variable ``key`` (``""``: the root)."""
    path = key.split("/.ATTRIBUTES", 1)[0]
    return path.rsplit("/", 1)[0] if "/" in path else ""


def own_and_sub_holders(cands) -> list[str]:
    """Object paths (never the root) of the objects that hold one of ``cands`` (same-named
    weight keys) themselves while another sits in one of their sublayers: tf_keras visits a
    ``Model``'s own weights after its sublayers', a ``Layer``'s before, and the TF format
    does not record which the object was. Returns them sorted."""
    holders = {_holder(k) for k in cands}
    return sorted(h for h in holders if h and any(o.startswith(h + "/") for o in holders))


def model_root_order(objects: ObjectGraph | None, order: dict[str, int]) -> dict[str, int]:
    """``order`` (Keras' tracked order, a layer's own weights first) with the root's own
    weights moved after all others: the root of a ``model.save_weights`` whose optimizer
    recorded its averages is a tf_keras ``Model``, whose ``trainable_variables`` list the
    tracked sublayers' weights first and its own (``add_weight``/``tf.Variable`` attributes
    on the model) after (a ``tf.train.Checkpoint`` root holds no trainable weight of its
    own). Variables it holds in a list or dict attribute are not its own here: tf_keras
    tracks the container as a child, visited where it was assigned, as the graph records.
    Returns key -> position."""
    if objects is None or not recorded_averages(objects):
        return order
    keys = objects.node_keys
    own = {keys[c] for _n, c in objects.children.get(0, []) if c in keys}
    ranked = sorted(order, key=lambda k: (k in own, order[k]))
    return {k: i for i, k in enumerate(ranked)}


def open_dict_paths(objects: ObjectGraph | None, variables: dict) -> list[str]:
    """Object paths of nested containers that may be dicts (visited sorted by key) or layers
    (visited as assigned), which leave the open averages' order unread under ``tracked``."""
    groups = {frozenset(c) for c in open_averages(objects, variables).values()}
    return sorted({p for c in groups for p in open_dicts(objects, sorted(c), lambda a, b: True)
                   if p})


def _live_pairs(objects: ObjectGraph | None, variables: dict, live: list[str],
                open_: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """The k-th average is of the k-th live trainable variable, where every average fits its
    place: the same count, each open one among its candidates, each proven one on its own
    weight (else the live model's trainable set differs from the one the optimizer was built
    with: nothing is placed)."""
    averages = recorded_averages(objects)
    if len(averages) != len(live):
        return {}
    out = {}
    for a, w in zip(averages, live, strict=True):
        v = variables.get(a)
        if v is None or (a in open_ and w not in open_[a]) or (
                a not in open_ and v.ema_of != w):
            return {}
        if a in open_:
            out[a] = w
    return out


def has_open_averages(ckpt) -> bool:
    """Whether ``ckpt`` (a TF-format checkpoint) holds tf_keras ``use_ema`` averages that only
    an order places, and no ``ema.average(v)`` ones (which a live order would also re-pair)."""
    if ckpt.objects is None or not recorded_averages(ckpt.objects):
        return False
    variables = {v.name: v for v in ckpt.variables_unwarned()}
    if any(v.role == R.EMA and v.ema_style == "object" for v in variables.values()):
        return False
    return bool(open_averages(ckpt.objects, variables))


def stated_note(count: int) -> str:
    """The note a command prints where ``count`` tf_keras averages are paired only by the
    stated ``--apply-order tracked``. Returns the text."""
    return (f"note: {counted(count, 'average')} of the tf_keras optimizer "
            f"{agreeing(count, 'is', 'are')} paired only because you "
            "stated --apply-order tracked: that fit() built the optimizer from "
            "model.trainable_variables, which visits the model's layers in the order their "
            "attributes were first assigned (the order the checkpoint records), then the "
            "model's own weights; the file cannot check that, so this is your statement, "
            "not a proof: a custom training loop's own variable list, or a layer attribute "
            "assigned twice (in build(), or by a subclass's __init__ replacing its parent's "
            "layer: Keras then visits it last), puts these averages on the wrong weights; in "
            "Python, apply_ema(model, path) with the live model reads its real order")


_ORDER_WHY = ("the optimizer's averages of uniquely named weights are recorded in another "
              "order than the checkpoint tracks the layers in, so it was not built in that "
              "order (a layer attribute assigned twice, in build() or by a subclass "
              "replacing its parent's layer, which Keras then visits last, or a custom "
              "training loop's own variable list); ")


def tracked_gap(objects: ObjectGraph | None, variables: dict) -> str:
    """Why ``--apply-order tracked`` leaves some open averages (:func:`open_averages`)
    unplaced in this file, read before anyone states it. Returns the reason (ending in
    "; "), or "" where it places every one."""
    open_ = open_averages(objects, variables)
    if not open_ or set(open_) <= set(order_pairs(objects, variables, "tracked")):
        return ""
    nested = sorted({h for c in open_.values() for h in own_and_sub_holders(c)})
    if nested:
        return (f"{', '.join(nested[:3])} holds such a weight of its own and another in a "
                "sublayer; tf_keras visits a Model's own weights after its sublayers', a "
                "Layer's before, and the checkpoint records no types; ")
    dicts = open_dict_paths(objects, variables)
    if dicts:
        return (f"{', '.join(dicts[:3])} may be a dict, whose layers Keras visits sorted by "
                "key, or a layer, whose attributes it visits in the order they were assigned "
                "(the checkpoint records no types); ")
    return _ORDER_WHY


def refusal_text(objects: ObjectGraph | None, variables: dict, unpaired: list,
                 apply_order, examples: str) -> str:
    """Why tf_keras ``use_ema`` averages of same-named weights (``unpaired``: their
    variables) are refused, and what decides, after ``examples`` (which may average which).
    Returns the text from "cannot be paired" on."""
    groups: dict[frozenset, int] = {}
    for v in unpaired:
        groups[frozenset(v.ema_candidates)] = groups.get(frozenset(v.ema_candidates), 0) + 1
    partial = [g for g, n in groups.items() if n < len(g)]
    head = ("cannot be paired from what the checkpoint records: it names each after its "
            "variable, several weights share that name, dtype and shape, and the optimizer "
            f"records only the order it averaged them in: {examples}; ")
    live = ("in Python, pass the live model: apply_ema(model, path) reads the order from its "
            "own trainable_variables, fit()'s (and warns that it assumed so: "
            "trainable=model.trainable_variables states it, trainable=<the loop's list> a "
            "custom loop's)")
    loop = ("; if a custom training loop built it, state the loop's order: --trainable NAMES "
            "--loop-order, each weight as 'ckpt list' shows it, in the order its first "
            "apply_gradients() listed them (Python: apply_ema(model, path, "
            "trainable=that_list))")
    frozen = (f"{counted(sum(len(g) for g in partial), 'weight')} of such names have only "
              f"{counted(sum(groups[g] for g in partial), 'average')}: layers frozen when the "
              "optimizer "
              "was built have none, and the TF format keeps no trainable flags, so which were "
              "frozen is not recorded; ")
    keras = "save a .keras (model.save('x.keras') records which layers were frozen)"
    if not recorded_averages(objects):  # not a model's own save_weights(): no order read
        return (head + (frozen if partial else "") + "give the layers distinct names "
                "(tf_keras.layers.Dense(..., name=...)) when training, or " + keras)
    if apply_order is not None and not isinstance(apply_order, str):
        return (head + "the live model's trainable_variables do not match the optimizer's "
                f"{len(recorded_averages(objects))} averages in count, names or shapes (a "
                "layer frozen now that was trainable when the optimizer was built, or the "
                "other way round): freeze the same layers as in training, or pass another "
                "model")
    if partial:  # no order places part of a group
        return head + frozen + live + ", with the same layers frozen as in training; or " + keras
    why = tracked_gap(objects, variables)
    if apply_order == "tracked":
        return (head + "--apply-order tracked does not place them: " + (why or _ORDER_WHY)
                + live + loop)
    said = ("--apply-order trainable states a tf.Module's order; a tf_keras optimizer is "
            "built from Keras' model.trainable_variables: " if apply_order == "trainable"
            else "")
    if why:  # never advertise an option already known to be refused here
        return (head + said + "--apply-order tracked would not place them either: " + why
                + "the live model decides: " + live + loop)
    return (head + said + "if fit() built the optimizer (from model.trainable_variables) and "
            "no layer attribute was assigned twice (in build(), or by a subclass's __init__ "
            "replacing its parent's layer), pass --apply-order tracked (a statement the file "
            "cannot check: Keras visits the layers in the order their attributes were "
            "assigned, the last assignment moving a layer last, while the checkpoint records "
            "the first); " + live + loop)


def averages_in_weights(ckpt, variables: dict) -> bool:
    """Whether each average the root optimizer records (:func:`recorded_averages`) is paired
    with its weight by what the file proves (``ema_of`` set in ``variables``) and equals it bit
    for bit: what tf_keras' ``fit()`` leaves at its end (``finalize_variable_values`` copies the
    averages into the weights), so a checkpoint saved after it holds the averages as its
    weights, and restore-ema would change nothing (review-33-user-u33 F5). An open or missing
    pairing is ``False``: values never decide a pairing.

    Args:
        ckpt: the open checkpoint.
        variables: key -> :class:`~ckpt_tools.checkpoint.Variable`, as the listing pairs them.

    Returns:
        `bool`.
    """
    pairs = {}
    for key in recorded_averages(ckpt.objects):
        v = variables.get(key)
        if v is None or v.role != R.EMA or not v.ema_of or v.ema_of not in variables:
            return False
        pairs[key] = v.ema_of
    if not pairs:
        return False
    from .swap_assumed import same_values  # NumPy: only for such a file

    return same_values(ckpt, pairs)
