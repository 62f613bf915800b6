"""The hint of a map under a stated ``--ema-name`` for the variables it lacks whose tensors
under another name read as averages (:func:`elsewhere_hint`): another EMA object's averages
(``--ema-name name,other`` offered only where that map is accepted and the file proves
``other`` an EMA's name), or an optimizer's slots named alike (nothing offered as proof).
Offers are probed with the command's own options (:mod:`ckpt_tools.offer_probe`)."""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_objects import both_averaged
from .ema_proof import proven_ema_names
from .ema_refusals import suffix_base
from .offer_probe import stored_offer, works


def elsewhere_hint(ckpt: Checkpoint, name: str, elsewhere: dict[str, str],
                   suffix: dict[str, str], variables=None) -> str:
    """The hint of a map under ``--ema-name name`` for the variables it lacks whose tensors
    under another name (``elsewhere``: variable -> that tensor's key) read as averages.
    ``--ema-name name,other`` is offered only where the file proves ``other`` an EMA's name
    (:func:`proven_ema_names`): ``W/SGDM`` of a ``MomentumOptimizer(name="SGDM")`` applied
    inside a ``tf.cond`` (no update op in sight) reads as an average too, and taking it would
    hand back momentum buffers as averages (review-14-attack-r27 F8). ``name`` an attribute
    of a TF2 checkpoint (``Checkpoint(e1=[...], e2=[...])``, ``variables`` given): see
    :func:`_attribute_hint`."""
    t, k = next(iter(elsewhere.items()))
    if variables is not None and ckpt.objects is not None and k.split("/", 1)[0] != name \
            and any(v.role == R.EMA and key.split("/", 1)[0] == name
                    for key, v in variables.items()):
        return _attribute_hint(ckpt, name, elsewhere, variables)
    other = suffix_base(suffix.get(k) or k.rpartition("/")[2])
    both = both_averaged(ckpt, name, other) if ckpt.objects is None else []
    if both:  # --ema-name name,other is refused there (review-21-attack-r53 F3)
        return (f"another EMA object averaged {len(elsewhere)} of them ({t} has {k}), and the "
                f".meta's update ops show {name} and {other} both averaging "
                f"{', '.join(both[:3])}, so no one map takes both objects' averages"
                + ("; --allow-missing would restore these raw although an average of theirs "
                   "is stored" if works(ckpt, name, (), True) else ""))
    # the name the keys carry (fast_1 of a second object named fast), not its base: the
    # base offered "--ema-name fast,fast" (s21c note); the base where the keys differ
    real = {suffix.get(a) or a.rpartition("/")[2] for a in elsewhere.values()}
    offered = next(iter(real)) if len(real) == 1 else other
    if other in proven_ema_names(ckpt, {other}):
        # their averages are stored, under another EMA object's name: saying they were left
        # out of ema.apply() (and steering to raw values) would be false
        said = f"another EMA object averaged {len(elsewhere)} of them ({t} has {k})"
        # each option named only where the map it runs is accepted (review-21-attack-r60 F7,
        # F11, F12)
        alone = ("; --allow-missing restores these raw although an average of theirs is "
                 "stored" if works(ckpt, name, (), True) else "")
        both = _both_stored(variables or {}, suffix, name, offered)
        if both:  # --ema-name name,other is refused there (review-21-user-u23 F1)
            return (f"{said}, and {offered} also averages {', '.join(both[:3])}"
                    f"{' ...' if len(both) > 3 else ''}, which {name} averages, so no one "
                    f"map takes both objects' averages{alone}")
        if offered == name:  # w/fast_1, w/fast_2 beside --ema-name fast: no name,other
            return (f"{said}, under TF's numbered variants of {name} ("
                    f"{', '.join(sorted(real)[:3])}), which no one --ema-name takes beside "
                    f"{name}'s{alone}")
        return _pair_offer(ckpt, said, f"{name},{offered}", alone)
    if not works(ckpt, f"{name},{other}"):
        return (f"{len(elsewhere)} of them have a tensor named like another EMA's average ({t} "
                f"has {k}), but nothing recorded says {other!r} is an ExponentialMovingAverage's "
                f"name (an optimizer stores its slots so), and --ema-name {name},{other} is "
                "refused too")
    return (f"{len(elsewhere)} of them have a tensor named like another EMA's average ({t} "
            f"has {k}), but nothing recorded says {other!r} is an ExponentialMovingAverage's "
            f"name (an optimizer stores its slots so): --ema-name {name},{other} only if it is "
            "the name you gave another ExponentialMovingAverage")


def _pair_offer(ckpt: Checkpoint, said: str, names: str, alone: str) -> str:
    """The end of :func:`elsewhere_hint`'s text: ``--ema-name names`` (two objects' names,
    comma-separated) offered as it is accepted, with ``--allow-missing`` where only so, or
    said refused; ``alone``: what ``--allow-missing`` with the stated name alone does."""
    if works(ckpt, names):
        return (f"{said}: --ema-name {names} takes both objects' averages"
                + (", while --allow-missing would restore these raw although an average of "
                   "theirs is stored" if alone else ""))
    if works(ckpt, names, (), True):  # a variable neither averaged (r57 F3)
        return (f"{said}: --ema-name {names} --allow-missing takes both objects' averages "
                f"(and what neither averaged raw){alone}")
    found = stored_offer(ckpt, names.split(",", 1)[0])  # a name no key holds (r62 F2)
    return (f"{said}, but --ema-name {names} is refused too (with --allow-missing too){alone}"
            + (f"; of the EMA names stored, {found} takes their averages" if found else ""))


def _both_stored(variables, suffix: dict[str, str], name: str, other: str) -> list[str]:
    """The variables (keys) with stored TF1 averages under both ``name`` (exactly, as a
    stated ``--ema-name`` reads it) and ``other`` (exactly, or TF's ``other_N``): there
    ``--ema-name name,other`` is refused ("averages of two of the EMA objects named"), so it
    is not to be offered."""
    held: dict[str, set[str]] = {}
    for key, v in variables.items():
        if v.role == R.EMA and v.ema_of:
            held.setdefault(v.ema_of, set()).add(suffix.get(key) or key.rpartition("/")[2])
    return sorted(t for t, names in held.items() if name in names and any(
        n == other or suffix_base(n) == other for n in names - {name}))


def _attribute_hint(ckpt: Checkpoint, name: str, elsewhere: dict[str, str],
                    variables) -> str:
    """:func:`elsewhere_hint` where ``--ema-name name`` picked a TF2 checkpoint's attribute:
    the other object is the attribute its averages lie under, and ``--ema-name name,other``
    is offered only where no variable has averages under both (else that form is refused
    too). Two default-named objects under ``e1``, ``e2`` offered ``e1,ExponentialMovingAverage``
    (the averages' recorded name), itself refused (review-20-attack-r47 F1)."""
    t, k = next(iter(elsewhere.items()))
    other = k.split("/", 1)[0]

    def shown(key: str) -> str:
        v = variables.get(key)
        return v.path if v is not None and v.path else key

    under: dict[str, set[str]] = {}
    for key, v in variables.items():
        if v.role == R.EMA and v.ema_of:
            under.setdefault(v.ema_of, set()).add(key.split("/", 1)[0])
    both = sorted(shown(w) for w, held in under.items() if {name, other} <= held)
    said = (f"another EMA object averaged {len(elsewhere)} of them ({shown(t)} has "
            f"{shown(k)}, under the attribute {other})")
    if both:  # --ema-name name,other: one variable with two objects' averages (refused)
        return (f"{said}, and {other} also averages {', '.join(both[:3])}, which {name} "
                f"averages, so no one map takes both; --allow-missing restores these raw "
                f"although an average of theirs is stored")
    alone = ("; --allow-missing restores these raw although an average of theirs is stored"
             if works(ckpt, name, (), True) else "")
    return _pair_offer(ckpt, said, f"{name},{other}", alone)
