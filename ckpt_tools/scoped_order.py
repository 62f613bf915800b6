"""``--apply-order ORDER:PATH`` (Python: ``apply_order="trainable:generator"``): the caller's
statement that ``ema.apply()`` got the trainable variables of the object at ``PATH`` only, in
``ORDER``. A GAN saved as ``tf.train.Checkpoint(generator=g, discriminator=d,
ema=[ema.average(v) for v in g.trainable_variables])`` with unnamed variables: G's and D's
variables share one name, dtype and shape, and the root lists its objects by name, so no order
alone tells whose averages the list holds; this statement does (review-14-attack-r25 F5).

``PATH`` is an object path as the tool names objects elsewhere (``generator``,
``model/generator`` for ``Checkpoint(model=gan)``, ``nets/0`` for ``Checkpoint(nets=[g, d])``),
and the order is computed from that sub-tree as for an attribute of the root. Several paths,
comma-separated (``trainable:generator,discriminator``), state
``ema.apply(g.trainable_variables + d.trainable_variables)``: the orders concatenated in that
order (review-15-attack-r31 F4). Like every stated order it is the caller's word, not a proof,
and the commands say so. :func:`parse_order` is the one check of an ``apply_order`` for every
entry point (CLI and Python).
"""

from __future__ import annotations

# "trainable": tf.Module.trainable_variables / .variables (attributes sorted by name, list items
# in order, dict keys sorted as strings, sub-modules after the module's own variables).
# "tracked": the order the variables were tracked, i.e. the order their attributes were
# assigned, which the object graph records (Keras' model.trainable_variables). Not creation
# order: blocks created in one order and assigned in another are tracked in the second.
APPLY_ORDERS = ("trainable", "tracked")

_SPELLING = ("expected trainable or tracked, or ORDER:PATH with PATH the object path whose "
             "trainable variables ema.apply() got (trainable:generator, "
             "trainable:model/generator, trainable:nets/0), or several comma-separated for "
             "their variables concatenated in that order (trainable:generator,discriminator)")


class ScopedOrder(str):
    """An apply order (``trainable``/``tracked``) over the variables of the objects at
    ``within`` (object paths, in the order ``apply()`` got their variables). Compares equal to
    the order it wraps, so every check of the order holds. ``numbered_lists``: stated with
    ``--numbered-lists`` (see :class:`~ckpt_tools.pairing.NumberedLists`)."""

    within: tuple[str, ...]
    numbered_lists: bool

    def __new__(cls, order: str, within, numbered_lists: bool = False) -> ScopedOrder:
        self = super().__new__(cls, order)
        self.within = (within,) if isinstance(within, str) else tuple(within)
        self.numbered_lists = bool(numbered_lists)
        return self

    def __repr__(self) -> str:
        return f"{str.__str__(self)}:{','.join(self.within)}"

    __str__ = __repr__  # messages name the statement as given: --apply-order trainable:g

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)


def parse_order(apply_order, keys: bool = True):
    """Checks an ``apply_order`` (every entry point's one check): ``"trainable:generator"`` ->
    :class:`ScopedOrder`; ``"trainable"``/``"tracked"`` (or a stated
    :class:`~ckpt_tools.pairing.NumberedLists`), None, or (with ``keys``) a sequence of
    checkpoint keys as they are.

    Example:
        >>> parse_order("trainable:model/generator").within
        ('model/generator',)
        >>> parse_order("trainable:generator,discriminator").within
        ('generator', 'discriminator')
        >>> parse_order("trainable:generator") == "trainable"
        True

    Raises:
        ValueError: anything else (``"trainable:"``, ``"fastest"``, a list without ``keys``).
    """
    if apply_order is None or isinstance(apply_order, ScopedOrder):
        return apply_order
    if isinstance(apply_order, str):
        if ":" not in apply_order:
            if apply_order not in APPLY_ORDERS:
                raise ValueError(f"apply_order {apply_order!r}: {_SPELLING}")
            return apply_order
        order, _, rest = apply_order.partition(":")
        paths = tuple(p.strip().strip("/") for p in rest.split(","))
        if order not in APPLY_ORDERS or not all(paths) or len(set(paths)) < len(paths):
            raise ValueError(f"apply_order {apply_order!r}: {_SPELLING}")
        return ScopedOrder(order, paths)
    if keys and isinstance(apply_order, (list, tuple)) and all(
            isinstance(k, str) for k in apply_order):
        return apply_order  # the order apply() got, as checkpoint keys (or a live order)
    raise ValueError(f"apply_order {apply_order!r}: {_SPELLING}")


def within_of(apply_order) -> tuple[str, ...] | None:
    """The object paths an ``apply_order`` (or a live order's ``stated``) confines
    ``ema.apply()``'s variables to, or None."""
    return getattr(apply_order, "within", None) or getattr(
        getattr(apply_order, "stated", None), "within", None)


def scope_nodes(objects, apply_order) -> tuple[int, ...] | None:
    """The object-graph nodes at the paths an ``apply_order`` names (``trainable:model/generator``),
    in its order, or None where it names none.

    Raises:
        OptionError: a path that the checkpoint's objects do not hold (exit 2), naming what
            the object it stops at holds.
    """
    from .errors import OptionError

    within = within_of(apply_order)
    if not within:
        return None
    said = getattr(apply_order, "stated", None) or apply_order
    nodes = []
    for path in within:
        node, walked = 0, []
        for part in path.split("/"):
            kids = dict(objects.children.get(node, []))
            if part not in kids:
                where = f"the object '{'/'.join(walked)}'" if walked else "the checkpoint's root"
                raise OptionError(
                    f"--apply-order {said} (Python: apply_order='{said}'): {where} has no "
                    f"object named '{part}'; it holds: {', '.join(sorted(kids)) or 'nothing'} "
                    "(give the path of the object whose trainable variables ema.apply() got, "
                    "as 'ckpt list' names it, e.g. trainable:<attribute>/<attribute>: "
                    "which object is yours to say, the file does not record it)")
            node = kids[part]
            walked.append(part)
        nodes.append(node)
    return tuple(nodes)


def keys_under(objects, nodes) -> set[str]:
    """Checkpoint keys of the variables the objects ``nodes`` hold, at any depth."""
    seen, todo = set(nodes), list(nodes)
    while todo:
        node = todo.pop()
        for _, child in objects.children.get(node, []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return {objects.node_keys[n] for n in seen if n in objects.node_keys}


def scope_paths(keys) -> list[str]:
    """Object paths of the objects just below the deepest object holding every one of
    ``keys`` (``model/discriminator``, ``model/generator`` for a GAN saved as
    ``Checkpoint(model=gan)``): what ``--apply-order ORDER:PATH`` would name; empty for fewer
    than two such objects."""
    parts = [k.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE").split("/") for k in keys]
    if not parts:
        return []
    depth = 0
    while all(len(p) > depth + 1 for p in parts) and len({p[depth] for p in parts}) == 1:
        depth += 1
    paths = sorted({"/".join(p[:depth + 1]) for p in parts if len(p) > depth + 1})
    return paths if len(paths) > 1 else []


def scope_hint(keys) -> str:
    """``"; if ema.apply() got ... state it: --apply-order trainable:PATH ..."`` for averages
    whose candidates ``keys`` lie under several objects, else ``""``."""
    paths = scope_paths(keys)
    if not paths:
        return ""
    # Placeholders, never one of the paths: the file does not say which object (or which
    # order) apply() got, and a sorted example would be a guess a user could copy.
    return (f"; if ema.apply() got one of these objects' trainable variables (a GAN's "
            f"generator) state its object path: --apply-order trainable:PATH, PATH one of "
            f"{', '.join(paths)}, or several, concatenated in the order apply() got them "
            f"(ema.apply(a.trainable_variables + b.trainable_variables)): --apply-order "
            f"trainable:PATH1,PATH2 (the names above are sorted, not that order; Python: "
            f"apply_order='trainable:PATH'); your statement, not a proof")
