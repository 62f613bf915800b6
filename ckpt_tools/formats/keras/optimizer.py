"""Keras 3 optimizer variables: which are the iteration, the learning rate, EMA copies, slots.

``optimizer/vars/<i>`` is ``optimizer.variables`` in creation order (Keras 3.15): ``iteration``,
``learning_rate`` when it is a float, then ``BaseOptimizer.build``: one ``average`` per trainable
variable (``use_ema=True``) and one ``gradient_accumulator`` per variable
(``gradient_accumulation_steps``), then the subclass' slots (``_SLOTS``). A layout is checked
against the shapes and dtypes of the trainable weights; for a bare ``.weights.h5`` (no config)
every setting is tried and ``use_ema`` is decided only when exactly one value fits.
"""

from __future__ import annotations

from collections import Counter

Spec = tuple[tuple[int, ...], int]  # (shape, TensorFlow dtype enum)
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})

# Optimizer slots written after the EMA copies, per class (Keras 3.15 build() methods), as
# variants of groups: ("b", name) one per trainable variable, ("i", names) interleaved per
# variable, ("s", name) one scalar. Chosen from the optimizer config where known.
_ADAM = lambda c: [("i", ("momentum", "velocity"))] + (  # noqa: E731
    [("b", ("velocity_hat",))] if c.get("amsgrad") else [])
_SLOTS = {
    "sgd": lambda c: [("b", ("momentum",))] if c.get("momentum") else [],
    "adam": _ADAM, "adam_w": _ADAM,
    "nadam": lambda c: [("i", ("momentum", "velocity")), ("s", ("variable",))],
    "adamax": lambda c: [("i", ("momentum", "norm"))],
    "adagrad": lambda c: [("b", ("accumulator",))],
    "adadelta": lambda c: [("i", ("accumulated_grad", "accumulated_delta_var"))],
    "ftrl": lambda c: [("i", ("accumulator", "linear"))],
    "lamb": lambda c: [("i", ("momentum", "velocity"))],
    "lion": lambda c: [("b", ("momentum",))],
    "rm_sprop": lambda c: [("b", ("velocity",))] + (
        [("b", ("momentum",))] if c.get("momentum") else []) + (
        [("b", ("average_gradient",))] if c.get("centered") else []),
}
# Hyperparameter settings to try when no config says which (a bare .weights.h5).
_VARIANTS = [{}, {"momentum": 0.9}, {"amsgrad": True}, {"centered": True},
             {"momentum": 0.9, "centered": True}]


def spec(entry) -> Spec:
    """``(shape, dtype enum)`` of a :class:`~ckpt_tools.formats.entry.TensorEntry`."""
    return (tuple(entry.shape), entry.dtype)


def plan_optimizer(lay, keys, entries, trained, segments) -> None:
    """Finds iteration, learning rate, EMA copies and slots among the optimizer variables.

    Fills ``lay`` (a :class:`~ckpt_tools.formats.keras.layout.KerasLayout`): ``iteration``,
    ``learning_rate``, ``ema_offset``, ``use_ema``, ``averages``, ``slots``, ``var_names``.
    ``trained`` holds (key, segment index) of the trainable weights in ``model.weights`` order;
    ``segments`` the ("seq"|"bag", keys) runs, a bag being keys whose order is unknown.
    """
    specs = [spec(entries[k]) for k in keys]
    if not keys:
        lay.use_ema, lay.ema_evidence = False, "no optimizer variables"
        return
    off = 0
    if specs[0][0] == () and entries[keys[0]].dtype_name in ("int64", "int32"):
        lay.iteration, off = keys[0], 1
    cfg = lay.optimizer_config
    if cfg is not None:
        has_lr = isinstance(cfg.get("learning_rate"), (int, float))
    else:
        has_lr = (len(specs) > off and specs[off][0] == ()
                  and entries[keys[off]].dtype_name in FLOATS)
    if has_lr and len(keys) > off:
        lay.learning_rate, off = keys[off], off + 1
    lay.ema_offset = off
    for key, name in ((lay.iteration, "iteration"), (lay.learning_rate, "learning_rate")):
        if key:
            lay.var_names[key] = name
    tkeys = [k for k, _ in trained]
    tspecs = [spec(entries[k]) for k in tkeys]
    bag_of = {k: seg for k, seg in trained if segments[seg][0] == "bag"}
    cands = _candidates(lay)
    rest = specs[off:]
    if not rest and tkeys:
        lay.use_ema = False
        lay.ema_evidence = ("the optimizer holds only iteration/learning_rate (it was never "
                            "built: saved before training)")
        return
    fits = _fits(cands, rest, tkeys, tspecs, bag_of)
    if cfg is not None:
        lay.use_ema, lay.ema_evidence = cands[0][0], "config.json (optimizer use_ema)"
    elif {c[0] for c in fits} in ({True}, {False}):
        lay.use_ema = fits[0][0]
        lay.ema_evidence = (f"layout of the {len(keys)} {lay.optimizer} variables for "
                            f"{len(tkeys)} trainable weights")
    else:
        lay.use_ema = None
        lay.notes.append(
            f"cannot tell whether the {len(rest)} {lay.optimizer or 'unknown optimizer'} "
            f"variables after iteration/learning_rate include EMA copies of the {len(tkeys)} "
            "trainable weights (" + ("several settings fit" if fits else "no known layout fits")
            + "); the .keras config.json records use_ema")
    plan = next((c for c in fits if c[0] == lay.use_ema), None)
    if plan is None and lay.use_ema and rest[: len(tspecs)] and _matches(
            [(s, j, "average") for j, s in enumerate(tspecs)], rest[: len(tspecs)], tkeys,
            tspecs, bag_of):
        plan = (True, False, [])
    placed: set[str] = set()
    if plan is not None:
        for i, (want, j, name) in enumerate(_expand(*plan, tspecs)):
            key = keys[off + i]
            target = None if j is None else _pair(j, want, tkeys, tspecs, bag_of)
            (lay.averages if name == "average" else lay.slots)[key] = target
            lay.var_names[key] = name
            placed.add(key)
    elif lay.use_ema:
        lay.notes.append(f"the optimizer variables do not fit the {len(tkeys)} trainable "
                         "weights found in the file (frozen or custom layers?): EMA copies "
                         "cannot be paired here; apply_keras_ema(model, path) pairs them")
    for key in keys[off:]:
        if key not in placed:
            lay.slots[key] = None


def _candidates(lay) -> list[tuple[bool, bool, list | None]]:
    """(use_ema, gradient accumulation, slot groups) settings that may have written the file."""
    cfg, slot_fn = lay.optimizer_config, _SLOTS.get(lay.optimizer or "")
    if cfg is not None:
        return [(bool(cfg.get("use_ema")), bool(cfg.get("gradient_accumulation_steps")),
                 slot_fn(cfg) if slot_fn else None)]
    if slot_fn:
        # gradient_accumulation_steps writes a block just like the EMA copies: assumed off.
        return [(e, False, slot_fn(v)) for e in (False, True) for v in _VARIANTS]
    return []


def _fits(cands, rest, tkeys, tspecs, bag_of):
    return [c for c in cands if c[2] is not None
            and _matches(_expand(*c, tspecs), rest, tkeys, tspecs, bag_of)]


def infer_use_ema(layout, entries: dict,
                  trainable: list[Spec]) -> bool | None:
    """Decides ``use_ema`` for a Keras 3 file given the exact trainable variables of the model.

    A bare ``.weights.h5`` does not say which weights were trainable (frozen layers); a live
    model does, which settles cases :func:`analyze` had to leave open.

    Args:
        layout: the file's layout.
        entries: the file's entries.
        trainable: ``(shape, dtype enum)`` of ``model.trainable_variables``, in order.

    Returns:
        `bool` or `None` when several optimizer settings would write the same variables.
    """
    if layout.kind != "keras3" or layout.optimizer_config is not None:
        return layout.use_ema
    rest = [spec(entries[k]) for k in layout.optimizer_vars[layout.ema_offset:]]
    if not layout.optimizer_vars or not rest:
        return False
    tkeys = [str(i) for i in range(len(trainable))]
    found = {c[0] for c in _fits(_candidates(layout), rest, tkeys, list(trainable), {})}
    return found.pop() if len(found) == 1 else None


def _expand(use_ema, ga, groups, tspecs) -> list[tuple[Spec, int | None, str]]:
    out = []
    blocks = (["average"] if use_ema else []) + (["gradient_accumulator"] if ga else [])
    for name in blocks:
        out += [(s, j, name) for j, s in enumerate(tspecs)]
    for kind, names in groups:
        if kind == "b":
            out += [(s, j, names[0]) for j, s in enumerate(tspecs)]
        elif kind == "i":
            out += [(s, j, n) for j, s in enumerate(tspecs) for n in names]
        else:
            out.append((((), tspecs[0][1] if tspecs else 1), None, names[0]))
    return out


def _matches(expected, actual, tkeys, tspecs, bag_of) -> bool:
    if len(expected) != len(actual):
        return False
    bag_want: Counter = Counter()
    bag_got: Counter = Counter()
    for (want, j, name), got in zip(expected, actual, strict=True):
        if j is not None and tkeys[j] in bag_of:
            bag_want[(name, bag_of[tkeys[j]], want)] += 1
            bag_got[(name, bag_of[tkeys[j]], got)] += 1
        elif want != got:
            return False
    return bag_want == bag_got


def _pair(j: int, want: Spec, tkeys, tspecs, bag_of) -> str | None:
    key = tkeys[j]
    if key not in bag_of:
        return key
    same = [k for k, s in zip(tkeys, tspecs, strict=True)
            if bag_of.get(k) == bag_of[key] and s == want]
    return same[0] if len(same) == 1 else None
