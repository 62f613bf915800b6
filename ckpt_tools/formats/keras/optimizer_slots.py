"""Keras 3 optimizer settings: each built-in's slots and the variables a setting writes.

A setting is ``(use_ema, gradient accumulation, slot groups)``; :func:`expand` lists the
variables it writes after iteration/learning_rate for given trainable weights, in creation
order, and :func:`matches` checks them against the file's (inside a bag, sublayers of unknown
order, only as a multiset). Split out of :mod:`.optimizer`.
"""

from __future__ import annotations

from collections import Counter

from . import untracked

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
    # super().build() first, then add_optimizer_variables(var_list, ["momentum", "velocity"])
    "schedule_free_adam_w": lambda c: [("i", ("momentum", "velocity"))],
    "adafactor": lambda c: [(untracked.TRACKED, ("r", "c", "velocity"))],
    "rm_sprop": lambda c: [("b", ("velocity",))] + (
        [("b", ("momentum",))] if c.get("momentum") else []) + (
        [("b", ("average_gradient",))] if c.get("centered") else []),
}

# Keras' class names of those snake_case names, for messages (RMSprop, not rm_sprop).
_CLASS_NAMES = {"sgd": "SGD", "adam": "Adam", "adam_w": "AdamW", "nadam": "Nadam",
                "adamax": "Adamax", "adagrad": "Adagrad", "adadelta": "Adadelta", "ftrl": "Ftrl",
                "lamb": "Lamb", "lion": "Lion", "adafactor": "Adafactor", "rm_sprop": "RMSprop",
                "loss_scale_optimizer": "LossScaleOptimizer", "muon": "Muon",
                "schedule_free_adam_w": "ScheduleFreeAdamW"}


def slot_groups(cls: str, cfg: dict) -> list | None:
    """The slot groups the Keras 3 built-in ``cls`` makes with ``cfg`` (as :func:`expand`
    takes them), or ``None`` for a class whose slots ckpt does not model (Muon)."""
    fn = _SLOTS.get(cls)
    return fn(cfg) if fn else None


def shown_name(name: str | None) -> str | None:
    """The optimizer's Keras class name (``RMSprop``) for a snake_case one (``rm_sprop``, as
    Keras names its variables' paths); other names as they are."""
    return _CLASS_NAMES.get(name, name) if name else name


# Default names of Keras 3 optimizers (snake_case class names), recognising an optimizer a
# model keeps as an attribute (the keras.io GAN's d_optimizer/g_optimizer) in a weights file.
OPTIMIZER_NAMES = frozenset({*_SLOTS, "loss_scale_optimizer", "muon", "base_optimizer",
                             "optimizer"})

# Hyperparameter settings to try when no config says which (a bare .weights.h5).
_VARIANTS = [{}, {"momentum": 0.9}, {"amsgrad": True}, {"centered": True},
             {"momentum": 0.9, "centered": True}]



def spec(entry) -> Spec:
    """``(shape, dtype enum)`` of a :class:`~ckpt_tools.formats.entry.TensorEntry`."""
    return (tuple(entry.shape), entry.dtype)


def candidates(lay) -> list[tuple[bool, bool, list | None]]:
    """(use_ema, gradient accumulation, slot groups) settings that may have written the file."""
    cfg, slot_fn = lay.optimizer_config, _SLOTS.get(lay.optimizer or "")
    stated = getattr(lay, "stated_optimizer", None)
    if stated is not None:  # --optimizer (a bare file or a custom class): exactly that
        from .stated_optimizer import GA, config

        fn = _SLOTS.get(stated[0])  # None: Muon, whose slots ckpt does not model
        out = [(e, GA in stated[1], fn(config(stated))) for e in (False, True)] if fn else []
    elif cfg is not None:
        out = [(bool(cfg.get("use_ema")), bool(cfg.get("gradient_accumulation_steps")),
                slot_fn(cfg) if slot_fn else None)]
    elif slot_fn:
        out = [(e, ga, slot_fn(v)) for e in (False, True) for ga in (False, True)
               for v in _VARIANTS]
    else:
        out = []
    if lay.loss_scaled:  # built inside LossScaleOptimizer.build: see untracked's docstring
        out += [(e, ga, g) for e, ga, groups in out if (g := untracked.as_loss_scaled(groups))]
    return out


def default_groups(lay) -> list:
    """The slot groups of the optimizer's class with its default hyperparameters (as built
    alone or inside a LossScaleOptimizer): where a bare file's fit needs others (amsgrad's
    velocity_hat, SGD's momentum, RMSprop's centred average), those were read off the count."""
    slot_fn = _SLOTS.get(lay.optimizer or "")
    if slot_fn is None:
        return []
    groups = slot_fn({})
    return [groups, untracked.as_loss_scaled(groups)]


def reading(lay, setting) -> str | None:
    """The ``--optimizer`` statement (``sgd:momentum``) of a use_ema setting that fits a bare
    file's count, or ``None`` where none of the tried hyperparameters gives its slots."""
    _ema, ga, groups = setting
    slot_fn = _SLOTS.get(lay.optimizer or "")
    if slot_fn is None:
        return None
    for v in _VARIANTS:
        if groups in (slot_fn(v), untracked.as_loss_scaled(slot_fn(v))):
            opts = sorted(v) + (["gradient_accumulation"] if ga else [])
            return shown_name(lay.optimizer).lower() + (":" + ",".join(opts) if opts else "")
    return None


def fits(cands, rest, tkeys, tspecs, bag_of):
    return [c for c in cands if c[2] is not None
            and matches(expand(*c, tspecs), rest, tkeys, tspecs, bag_of)]


def expand(use_ema, ga, groups, tspecs) -> list[tuple[Spec, int | None, str, bool]]:
    """(spec, index of the variable it belongs to, slot name, spec equals the variable's)."""
    out = []
    blocks = (["average"] if use_ema else []) + (["gradient_accumulator"] if ga else [])
    for name in blocks:
        out += [(s, j, name, True) for j, s in enumerate(tspecs)]
    for kind, names in groups:
        if kind == "b":
            out += [(s, j, names[0], True) for j, s in enumerate(tspecs)]
        elif kind == "i":
            out += [(s, j, n, True) for j, s in enumerate(tspecs) for n in names]
        elif kind in (untracked.TRACKED, untracked.UNTRACKED):  # r, c, v per weight
            out += [x for j, s in enumerate(tspecs) for x in untracked.expand(kind, names, j, s)]
        else:
            out.append((((), tspecs[0][1] if tspecs else 1), None, names[0], False))
    return out


def matches(expected, actual, tkeys, tspecs, bag_of) -> bool:
    if len(expected) != len(actual):
        return False
    bag_want: Counter = Counter()
    bag_got: Counter = Counter()
    for (want, j, name, _ref), got in zip(expected, actual, strict=True):
        if j is not None and tkeys[j] in bag_of:
            bag_want[(name, bag_of[tkeys[j]], want)] += 1
            bag_got[(name, bag_of[tkeys[j]], got)] += 1
        elif want != got:
            return False
    return bag_want == bag_got


def pair(j: int, want: Spec, tkeys, tspecs, bag_of) -> str | None:
    key = tkeys[j]
    if key not in bag_of:
        return key
    same = [k for k, s in zip(tkeys, tspecs, strict=True)
            if bag_of.get(k) == bag_of[key] and s == want]
    return same[0] if len(same) == 1 else None
