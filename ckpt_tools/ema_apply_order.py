"""TF2 EMA pairings that rest on the order ``ema.apply()`` got the variables in
(``apply_order``, ``--apply-order``): where the option applies, which pairings rest on it alone,
and the checkpoint's variables re-paired under it. Split out of :mod:`ckpt_tools.emamap`.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_several import split_ema_names
from .errors import EmaError, OptionError
from .formats._record import replace
from .object_roles import pair_object_shadows
from .pairing import APPLY_ORDERS
from .scoped_order import within_of
from .tfk_order import order_pairs as tf_keras_order_pairs


def refuse_apply_order(ckpt: Checkpoint, apply_order: str | None) -> None:
    """Refuses ``apply_order`` given for a Keras file or a name-based (TF1) checkpoint, where
    it cannot apply.

    ``apply_order`` states the order ``ema.apply()`` got a TF2 object checkpoint's variables
    in. A Keras optimizer averages the model's weights in the model's order, which the file
    records (or ``trainable=``/``--trainable`` states), so the option would silently change
    nothing.

    Raises:
        OptionError: ``apply_order`` is given and ``ckpt`` is a Keras file or has no object
            graph (exit 2).
    """
    if apply_order is not None and getattr(ckpt.reader, "keras", None) is not None:
        raise OptionError(
            f"{ckpt.path}: --apply-order (Python: apply_order=) states the order "
            "ema.apply() got a TF2 checkpoint's variables in; it does not apply to Keras "
            "files, whose optimizer averages the model's weights in the model's order "
            "(recorded in the file, or stated with --trainable): omit it")
    if apply_order is not None and ckpt.objects is None:
        raise OptionError(
            f"{ckpt.path}: --apply-order (Python: apply_order=) states the order "
            "ema.apply() got a TF2 object checkpoint's same-named variables in; this "
            "checkpoint is name-based (TF1 Saver), where each average is keyed by its "
            "variable's name, so it would change nothing: omit it")


def stated_pairings(ckpt: Checkpoint, apply_order: str | None,
                    ema_name: str | None = None) -> dict[str, str]:
    """The pairings that rest only on the caller's ``apply_order`` (averages the file alone
    cannot place, paired under the stated order; with ``ema_name``, as
    :func:`~ckpt_tools.emamap.ema_map` pairs them for it).

    Returns:
        `dict[str, str]`: average key -> variable key; empty without ``apply_order``, for
        non-TF2 checkpoints, or when the file proves every pairing by itself.
    """
    refuse_apply_order(ckpt, apply_order)
    if apply_order is None or ckpt.objects is None:
        return {}
    proven = pair_object_shadows(ckpt.entries(), ckpt.objects, None, None)
    found = dict(_tf_keras_order_pairs(ckpt, apply_order))
    for name in split_ema_names(ema_name) or [None]:
        stated = pair_object_shadows(ckpt.entries(), ckpt.objects, None, apply_order,
                                     container=name)
        # an attribute chosen (--ema-name fast): only its averages rest on the statement
        mine = name is not None and any(s.split("/", 1)[0] == name for s in stated.pairs)
        found.update((s, v) for s, v in stated.pairs.items() if s not in proven.pairs
                     and (not mine or s.split("/", 1)[0] == name))
    return found


def read_alike(ckpt: Checkpoint, pairs: dict[str, str], apply_order=None) -> list[str]:
    """For ``--apply-order trainable`` pairs (from :func:`stated_pairings`): the object paths
    of containers read as one type with others holding the same children, on which the
    pairing also rests (:func:`~ckpt_tools.pairing.containers_read_alike`; read through the
    objects ``apply_order`` names, ``trainable:optimizer``); empty if none."""
    from .pairing import containers_read_alike
    from .scoped_order import scope_nodes

    if not pairs or ckpt.objects is None:
        return []
    return containers_read_alike(ckpt.objects, ckpt.entries(), sorted(set(pairs.values())),
                                 scope_nodes(ckpt.objects, apply_order))


def _tf_keras_order_pairs(ckpt: Checkpoint, apply_order) -> dict[str, str]:
    """:func:`~ckpt_tools.tfk_order.order_pairs` of ``ckpt`` under ``apply_order``, computed
    once per open checkpoint (a command's notes and its map both need it)."""
    if apply_order is None or ckpt.objects is None:
        return {}
    key = ("tf_keras_order_pairs",
           apply_order if isinstance(apply_order, str) else tuple(apply_order))
    return ckpt.memo(key, lambda: tf_keras_order_pairs(
        ckpt.objects, {v.name: v for v in ckpt.variables_unwarned()}, apply_order))


def no_order_text() -> str:
    """The close of the refusal where neither ``--apply-order`` pairs any of the averages
    (:func:`an_order_pairs`): it offered ``--apply-order trainable`` and ``tracked``, each then
    refused as leaving two orders (review-33-attack-r129 M3), so neither is offered; the live
    objects, which know their own types, are named instead.

    Returns:
        `str`: the clause."""
    return ("neither --apply-order trainable nor --apply-order tracked pairs them here (each, "
            "stated, is refused: the checkpoint does not record which of the objects holding "
            "them are tf.Modules, Keras layers or dicts, which visit their variables in "
            "different orders); give the variables unique names (tf.Variable(..., name=...)) "
            "when training, or, in Python, pass the live objects, which know their types: "
            "apply_ema(module, path, apply_order='trainable') (a Keras model: "
            "apply_order='tracked') reads the order from their own trainable_variables")


def an_order_pairs(ckpt: Checkpoint, unpaired, ema_name: str | None) -> bool:
    """Whether stating an ``apply_order`` (either of :data:`~ckpt_tools.pairing.APPLY_ORDERS`)
    pairs one of the ``unpaired`` averages: if neither does, ``--apply-order`` is not the
    option that decides."""
    keys = {v.name for v in unpaired}
    for order in APPLY_ORDERS:
        try:
            stated = paired_variables(ckpt, order, ema_name)
        except EmaError:
            continue
        if any(stated[k].ema_of for k in keys if k in stated):
            return True
    return False


def a_path_decides(ckpt: Checkpoint, unpaired, ema_name: str | None) -> str | None:
    """Where the ``unpaired`` averages were saved as a list (``ema=[ema.average(v) for v in
    g.trainable_variables]``: entries in ``apply()``'s order; a dict keyed by name may have
    collapsed same-named ones, which no order places) and their candidates lie under several
    objects holding more variables than there are averages (a GAN's generator and
    discriminator): the statement ``--apply-order ORDER:PATH`` that pairs every one of them
    with PATH one of those objects (``"--apply-order trainable:PATH"``), or None where no
    single object's order does (review-16-attack-r33 F9: ``list`` said no option decides)."""
    import re

    from .scoped_order import ScopedOrder, scope_paths

    keys = {v.name for v in unpaired}
    cands = {c for v in unpaired for c in v.ema_candidates}
    listed = re.compile(r"[^/]+/\d+/\.ATTRIBUTES/VARIABLE_VALUE")
    if ckpt.objects is None or len(cands) <= len(keys) or len(
            {k.split("/", 1)[0] for k in keys}) != 1 or not all(listed.fullmatch(k)
                                                               for k in keys):
        return None
    for order in APPLY_ORDERS:
        for path in scope_paths(cands):
            try:
                stated = paired_variables(ckpt, ScopedOrder(order, path), ema_name)
            except (EmaError, OptionError, ValueError):
                continue
            if all(k in stated and stated[k].ema_of for k in keys):
                return f"--apply-order {order}:PATH"
    return None


def optimizer_decides(ckpt: Checkpoint, unpaired, ema_name: str | None
                      ) -> tuple[str | None, tuple[str, ...]]:
    """Where every candidate of the ``unpaired`` averages is a variable a Keras optimizer lists
    in its ``_trainable_variables`` (the variables it was built with, recorded in order: its
    ``var_list`` at build, whatever list the loop's first ``opt.apply_gradients()`` got): that
    optimizer's object path, where the statement ``--apply-order trainable:PATH`` pairs every
    one of them. A Keras 3 subclassed model names its variables like itself
    (``net/kernel``), and keeps blocks held in a Python list out of ``tf.train.Checkpoint``'s
    object graph: the optimizer's list is then the one recorded order of them
    (review-18-user-u20 F4). Like every stated order it is the caller's word
    (``ema.apply()`` got that same list), not a proof. Where several saved optimizers list
    every candidate and their orders pair them differently (a warm-up SGD built on
    ``model.trainable_variables``, then Adam on body + head), the file shows there is no one
    recorded order: none is offered (review-19-attack-r44 F5).

    Returns:
        `tuple`: the path to offer (or None) and the paths of the optimizers whose recorded
        orders disagree (empty unless they do)."""
    from .keras_graph import shortest_tree
    from .scoped_order import ScopedOrder

    if ckpt.objects is None:
        return None, ()
    objects = ckpt.objects
    cands = {c for v in unpaired for c in v.ema_candidates}
    keys = {v.name for v in unpaired}
    parent, local = shortest_tree(objects)
    found: dict[str, tuple | None] = {}  # path -> the pairing its order gives (None: none)
    for node, kids in sorted(objects.children.items()):
        names = dict(kids)
        if "_iterations" not in names or "_trainable_variables" not in names:
            continue  # an optimizer tracks its step counter and the variables it was built with
        held = {objects.node_keys.get(c) for _, c in objects.children.get(
            names["_trainable_variables"], [])}
        if not cands <= held or node not in parent:
            continue
        parts, at = [], node
        while at in parent:
            parts.append(local[at])
            at = parent[at]
        path = "/".join(reversed(parts))
        try:
            stated = paired_variables(ckpt, ScopedOrder("trainable", path), ema_name)
        except (EmaError, OptionError, ValueError):
            found[path] = None
            continue
        found[path] = tuple(sorted((k, stated[k].ema_of) for k in keys if k in stated)) if all(
            k in stated and stated[k].ema_of for k in keys) else None
    readings = set(found.values())
    if len(readings) > 1 and readings - {None}:
        return None, tuple(found)
    return next((p for p, r in found.items() if r is not None), None), ()


def optimizer_text(path: str, apply_order) -> str:
    """What decides averages whose candidates the Keras optimizer at ``path`` lists in its
    ``_trainable_variables`` (:func:`optimizer_decides`): the statement that ``ema.apply()``
    got that very list; ``apply_order``, a plain order the caller stated that did not pair
    them. The optimizer's list is its ``var_list`` at build, not necessarily
    ``model.trainable_variables`` (a hand-built body + head is another order), so the text
    claims no more (review-19-attack-r44 F2).

    Returns:
        `str`: the refusal's closing clause."""
    return (_stated_text(apply_order) + f"the Keras optimizer saved as '{path}' records the "
            "order it was built with (its var_list at build: the list its first "
            "apply_gradients() got, which is model.trainable_variables only if the loop "
            "passed that; a hand-built var_list such as body + head is another order); it "
            "pairs correctly only if ema.apply() got the same list, in the same order: if so, "
            f"state it: --apply-order trainable:{path} (Python: apply_order='trainable:{path}', "
            f"{_python_objects(path)}); your statement, not a proof: the file cannot check "
            "it, and a wrong one puts every average on another variable; for any other order "
            "no option can tell")


def optimizers_disagree_text(paths, apply_order) -> str:
    """The refusal's closing clause where the Keras optimizers at ``paths`` each list every
    candidate in their ``_trainable_variables`` but pair them differently
    (:func:`optimizer_decides`): the file shows their orders differ, so none is offered.

    Returns:
        `str`: the refusal's closing clause."""
    named = " and ".join(f"'{p}'" for p in paths)
    return (_stated_text(apply_order) + f"the Keras optimizers saved as {named} record "
            "different orders (each its var_list at build), and the file does not say which "
            "list, if either, ema.apply() got: no option is offered; only if you know "
            "ema.apply() got the very list, in the same order, that one of them was built "
            f"with, --apply-order trainable:PATH ({', '.join(paths)}) states it: your "
            "statement, not a proof, and a wrong one puts every average on another variable")


def _stated_text(apply_order) -> str:
    """Why a plain ``apply_order`` the caller stated did not pair them (empty if none)."""
    return (f"--apply-order {apply_order} gives no one pairing of them (a Keras 3 model's "
            "object graph need not show the order Keras visits its layers in: layers kept "
            "in a Python list are not in it at all); " if apply_order else "")


def _python_objects(path: str) -> str:
    """What ``apply_ema`` is given for ``trainable:<path>``: the optimizer the checkpoint keys
    the model's weights through, built first (review-19-user-u21 F2: the model alone reaches
    no layer kept in a Python list)."""
    where = (f"apply_ema(tf.train.Checkpoint(model=model, {path}=opt), path, ...)"
             if path.isidentifier() else f"the model and the optimizer placed as saved ({path})")
    return f"with opt.build(model.trainable_variables) first and {where}"


def lists_decide(ckpt: Checkpoint, unpaired, ema_name: str | None,
                 prefer: str | None = None) -> str | None:
    """Where objects with more than ten children named ``0``, ``1``… hold the candidates of
    ``unpaired`` (a list or a dict keyed ``"0"``…: the file cannot tell): the statement that
    pairs every one of them read as lists (``--apply-order trainable --numbered-lists``, else
    the ``tracked`` one; ``prefer``, the order the caller stated, first), or None where
    neither does."""
    from .pairing import list_or_dict_paths, numbered_lists

    if ckpt.objects is None:
        return None
    paths = list_or_dict_paths(ckpt.objects)
    cands = [c for v in unpaired for c in v.ema_candidates]
    if not any(c.startswith(p + "/") for p in paths for c in cands):
        return None
    keys = {v.name for v in unpaired}
    scoped = [prefer] if within_of(prefer) else []  # trainable:model/generator (r31 F6)
    for order in scoped + sorted(APPLY_ORDERS, key=lambda o: o != prefer):
        try:
            stated = paired_variables(ckpt, numbered_lists(order), ema_name)
        except EmaError:
            continue
        if all(k in stated and stated[k].ema_of for k in keys):
            return f"--apply-order {order} --numbered-lists"
    return None


def paired_variables(ckpt: Checkpoint, apply_order: str | None,
                      ema_name: str | None = None) -> dict:
    """The checkpoint's variables by key; with ``apply_order``, TF2 averages re-paired under it
    (and, where default-named EMA objects share one counter, under ``ema_name``'s attribute:
    see ``container`` in :func:`~ckpt_tools.pairing.pair_by_names`)."""
    variables = {v.name: v for v in ckpt.variables_unwarned()}
    if apply_order is None or ckpt.objects is None:
        return variables
    for key, of in _tf_keras_order_pairs(ckpt, apply_order).items():
        variables[key] = replace(variables[key], ema_of=of, ema_candidates=())
    pairing = pair_object_shadows(ckpt.entries(), ckpt.objects, None, apply_order,
                                    container=ema_name)
    for key, v in list(variables.items()):
        if v.role == R.EMA and v.ema_style == "object":
            if key in pairing.set_aside:  # another EMA object's: not the one chosen
                variables[key] = replace(v, ema_of=None, ema_candidates=())
            elif key in pairing.pairs:
                variables[key] = replace(v, ema_of=pairing.pairs[key], ema_candidates=())
            elif key in pairing.ambiguous:
                variables[key] = replace(v, ema_of=None,
                                         ema_candidates=pairing.ambiguous[key])
    shadow = {v.ema_of: k for k, v in variables.items() if v.role == R.EMA and v.ema_of}
    for key, v in list(variables.items()):
        if v.role != R.EMA and v.ema != shadow.get(key):
            variables[key] = replace(v, ema=shadow.get(key))
    return variables
