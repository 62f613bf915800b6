"""TF2 variables named like another variable's average but tracked by the model itself
(review-16-attack-r33 F1, F10).

TensorFlow names a TF2 average ``<v>/<EMA name>``; it names a model's own variables by their
module or layer path. A module with a weight ``w`` and a sub-module also called ``w`` stores
``block/w`` and ``block/w/proj/kernel`` (``block/w/x``), which read like ``block/w``'s average
under an EMA named ``proj/kernel`` (``x``): ``--raw`` dropped the weight, and a refusal offered
names that paired ``block/w`` with another variable's raw value, exit 0.

An EMA name other than TF's default is never recorded in a TF2 checkpoint, so nothing proves
such a reading. Where the object graph tracks the candidate under the same child of the root
as every variable it could average (``model/gate/proj/kernel`` beside ``model/w``: both
reached through ``model``), it is read as what the graph shows, a model variable, unless the
user states the name (``--ema-name proj/kernel``, :func:`stated_held_shadows`). Averages kept
apart from the model (``tf.train.Checkpoint(model=m, ema=[...])``, the way a TF2 EMA's
averages are saved) stay candidates, as before, and so do those in a list or dict every element
of which is named like a stored weight's average (``m.avg = [ema.average(v) ...]``, both
objects' averages in one list: review-16-attack-r33 F12, F14; r34 F1).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import roles as R
from .errors import UnprovenPairingError
from .formats._record import replace
from .formats.entry import TensorEntry
from .formats.objgraph import ObjectGraph
from .held_offers import held_offer, second_path
from .tf2_twins import (
    AVERAGE_IF_STATED,
    CANDIDATE,
    CONTAINER,
    OWN_AVERAGE,
    SELF_NAMED_AVERAGE,
    VARIABLE,
    ckpt_twins,
    twins,
)


def model_held(entries: Mapping[str, TensorEntry],
               objects: ObjectGraph) -> dict[str, tuple[str, str]]:
    """Keys whose recorded name reads ``<v>/<name>`` that :func:`~ckpt_tools.tf2_twins.twins`
    reads as a variable (its own default-named average stored) or as the model's own unless
    stated (a key of ``v``'s name that fits sits in the same model: under the same child of
    the root, two towers of one class, ``enc/w`` and ``enc/gate/kernel`` beside ``dec/w``:
    review-16-attack-r34 F3; or on the root itself, the model being the root,
    ``tf.train.Checkpoint(block)``: r34 F2): key -> (``v``'s key or ``""`` where several
    fit, ``name``)."""
    return {k: (t.head, t.x) for k, t in twins(entries, objects).items()
            if t.outcome in (VARIABLE, AVERAGE_IF_STATED)}


def stated_found(ckpt, variables: dict, ema_name: str) -> dict[str, tuple[str, ...]]:
    """The weights of ``variables`` that :func:`stated_held_shadows` reads as an average under
    a stated ``ema_name``, beside their own weights or not: key -> the variables it is named
    like an average of (never one whose own default-named average is stored: the file
    disproves it)."""
    read = ckpt_twins(ckpt)
    return {k: t.heads for k, t in read.items()
            if t.outcome == AVERAGE_IF_STATED and t.heads and t.named(ema_name)
            and all(h in variables for h in t.heads)
            and k in variables and variables[k].role == R.WEIGHT}


def doubted(ckpt, variables: dict, ema_name: str) -> dict[str, tuple[str, ...]]:
    """Those of :func:`stated_found` no object tracks beside their weight's own path
    (:func:`beside`): what :func:`refuse_sub_module_held` refuses under ``--ema-name
    ema_name``, sorted by key."""
    found = stated_found(ckpt, variables, ema_name)
    return {k: found[k] for k in sorted(found) if not beside(ckpt.objects, k, found[k])}


def stated_held_shadows(ckpt, variables: dict, ema_name: str | None,
                        apply_order=None, left_out=None) -> dict:
    """``variables`` (key -> :class:`~ckpt_tools.variable.Variable`) with each variable
    :func:`model_held` reads as a model's own (``<v>/<ema_name>``, ``_N`` aside) read as
    ``v``'s average where ``ema_name`` is stated (``--ema-name``): the user's statement, as
    for any EMA name a TF2 file does not record; unchanged otherwise. Where several ``v``
    fit (two towers of one class each keeping its averages as attributes, ``enc.w_avg``:
    review-16-attack-r35 F2), they are paired as the same averages in a list would be:
    under ``apply_order`` (:func:`~ckpt_tools.pairing.pair_by_names`), else left with their
    candidates (the refusal asks for the order).

    A key :func:`refuse_sub_module_held` refuses that ``left_out(key)`` (the command's name
    filters) leaves out is no refusal: it stays a weight, out of the output, and the other
    averages are read (its weight then has no average: ``--allow-missing`` writes it raw, or
    an ``--exclude`` of it leaves it out). An ``--exclude`` of the doubted key could not lift
    the refusal, which made every average of such a model unreadable (review-32-attack-r125
    M1)."""
    if not ema_name or "," in ema_name or ckpt.objects is None:
        return variables
    found = stated_found(ckpt, variables, ema_name)
    if not found:
        return variables
    apart = {k: found[k] for k in sorted(found) if not beside(ckpt.objects, k, found[k])}
    lifted = {k for k in apart if left_out is not None and left_out(k)}
    refuse_sub_module_held(ckpt, variables, {k: h for k, h in apart.items() if k not in lifted},
                           ema_name)
    found = {k: h for k, h in found.items() if k not in lifted}
    if not found:
        return variables
    pairing = None
    if any(len(heads) > 1 for heads in found.values()):
        from .object_roles import pair_object_shadows  # it builds on this module's twins

        pairing = pair_object_shadows(ckpt.entries(), ckpt.objects, [ema_name], apply_order)
    out = dict(variables)
    for k, heads in found.items():
        of = heads[0] if len(heads) == 1 else pairing.pairs.get(k)
        if of is None:
            cands = tuple(sorted(pairing.ambiguous.get(k) or heads))
            out[k] = replace(variables[k], role=R.EMA, ema_of=None, ema_style="object",
                             ema=None, ema_candidates=cands)
            continue
        out[k] = replace(variables[k], role=R.EMA, ema_of=of, ema_style="object", ema=None,
                         ema_candidates=())
        out[of] = replace(out[of], ema=k)
    return out


def _held_by(objects: ObjectGraph) -> dict[str, frozenset[int]]:
    """Variable key -> the ids of the objects that track it directly (cached on ``objects``)."""
    cached = objects.__dict__.get("_held_by")
    if cached is None:
        out: dict[str, set[int]] = {}
        for node, kids in objects.children.items():
            for _local, kid in kids:
                key = objects.node_keys.get(kid)
                if key is not None:
                    out.setdefault(key, set()).add(node)
        cached = objects.__dict__["_held_by"] = {k: frozenset(v) for k, v in out.items()}
    return cached


def beside(objects: ObjectGraph, key: str, heads) -> bool:
    """Whether an object that tracks ``key`` directly also tracks one of ``heads`` (the
    variables ``key`` is named like an average of): a module keeping its averages as its
    own attributes beside its weights (``enc.w_avg = fast.average(enc.w)``,
    ``Checkpoint(block)`` with ``block.w_avg``). A key tracked only by a sub-module
    (``m.sub.d`` named ``w/fast`` beside ``m.w``) is not: a sub-module named like a weight
    names its own variables so (review-32-attack-r118 F3), nor one tracked by an object
    that holds ``v`` only as a second reference (r123 F1)."""
    held = _held_by(objects)
    mine = held.get(key, frozenset())
    # ... and that object is where the head's own (first) path runs: a sub-module keeping a
    # reference to m.w (a tied weight) beside its own weight named w/fast tracks both, yet
    # that weight is no more w's average than in F3 (review-32-attack-r123 F1)
    here = objects.paths.get(key, key).rpartition("/")[0]
    # ... and every object tracking it holds the head too: a sub-module's own weight w/fast
    # also referenced at the top beside m.w (m.a_d = m.sub.d) is no more w's average than
    # without that alias (review-33-attack-r127 C1)
    return bool(mine) and any(mine <= held.get(h, frozenset())
                              and objects.paths.get(h, h).rpartition("/")[0] == here
                              for h in heads)


def refuse_sub_module_held(ckpt, variables: dict, apart: dict, ema_name: str) -> None:
    """Refuses a stated ``ema_name`` that would read a model-tracked variable as an average
    where only a sub-module tracks it (``apart``: key -> the variables it is named like an
    average of; not :func:`beside` any of them): ``m.sub.d``, a weight of a sub-module ``w``
    (``w/fast``), and ``m.sub.d = fast.average(m.w)`` write the same file, and ``--ema-name
    fast`` (true: the EMA's name) exported that weight's raw value as ``m.w``'s average,
    exit 0, the split refusal's ``--exclude`` offers too (review-32-attack-r118 F3).

    Raises:
        UnprovenPairingError: (exit 6, no option decides) naming the key, the object tracking
            it and the variable it is named after.
    """
    if not apart:
        return
    k, heads = next(iter(apart.items()))
    paths, full = ckpt.objects.paths, ckpt.objects.full_names

    def show(key: str) -> str:
        return getattr(variables.get(key), "path", None) or paths.get(key) or key

    more = f" (and {len(apart) - 1} more)" if len(apart) > 1 else ""
    whose = " or ".join(show(h) for h in heads[:2])
    offer = held_offer(ckpt, ema_name, apart, show, alone=False)
    leave = (f"; {offer} reads the other averages" if offer else
             "; to export averages, save them apart from the model (tf.train.Checkpoint("
             "model=m, ema=[ema.average(v) ...])); ckpt export --raw writes the stored "
             "tensors as they are")
    raise UnprovenPairingError(
        f"{ckpt.path}: --ema-name {ema_name}: {show(k)} ({full.get(k, k)}){more} is named "
        f"like {whose}'s average under an EMA named {ema_name!r}, but it is a variable the "
        f"model itself tracks, {where_held(ckpt.objects, k, heads, show)}, so no --ema-name "
        f"reads it as an average{leave}", "--exclude" if offer else None, {k: tuple(heads)})


def where_held(objects: ObjectGraph, key: str, heads, show) -> str:
    """Where ``key`` is tracked, for a refusal of it as an average of ``heads``: in a
    sub-module not beside them (r118 F3), or beside one only on its second path, a tied
    weight's reference (``model/enc/w`` of ``model/head``, r125 M1)."""
    holder = show(key).rpartition("/")[0] or "the root"
    tied = second_path(objects, key, heads, _held_by(objects))
    if tied is None:
        return (f"in the sub-module {holder}, not beside {' or '.join(map(show, heads[:2]))}: "
                "a sub-module named like a weight names its own variables so, and nothing "
                "recorded tells one from an average kept in a sub-module (m.sub.d = "
                "ema.average(m.w))")
    return (f"in the sub-module {holder}, which tracks {show(tied[0])} only on a second path "
            f"({tied[1]}): TensorFlow records a tied weight as one variable with two parents, "
            "not which one owns it, and a module keeping a reference to a weight beside its "
            "own variable named so writes this same file")


#: Starts the hint for a model-tracked twin of a weight that has an average (r34 F1).
HELD_TWIN = "a variable the model tracks is named like another weight's average: "


#: In the hint for a variable whose own default-named average is stored, named like a
#: weight's average under another name (r37 F7): the weights' averages may be there.
EMA_OF_EMA = "ExponentialMovingAverage (an EMA of an EMA)"


#: In the hint for a variable read as the model's own though named like an average: the
#: refusal then says no average is proven, never "no averages are stored" (r35 F2).
HELD_OWN = " the model tracks it as its own variable"


def held_hint(ckpt, variables: dict, missing) -> str | None:
    """Where weights lack an average and a variable :func:`model_held` reads as the model's
    own is named like one of theirs (a module keeping its EMA's averages inside it, or a
    sub-module named like a weight): the hint saying so and naming ``--ema-name`` only as the
    user's statement. Where that variable itself lacks one while the weight it is named
    after has an average (a second EMA's averages kept on the model beside the default
    one's, review-16-attack-r34 F1): the :data:`HELD_TWIN` hint naming both EMA names,
    never the false "created after ema.apply()". Else ``None``."""
    if ckpt.objects is None or not missing:
        return None
    lacking = set(missing)
    held = sorted((k, (t.head, t.x)) for k, t in ckpt_twins(ckpt).items()
                  if t.outcome in (VARIABLE, AVERAGE_IF_STATED))
    weight = {k for k, _ in held if getattr(variables.get(k), "role", None) == R.WEIGHT}

    def show(key: str) -> str:
        return getattr(variables.get(key), "path", None) or key

    twins = [(k, v, name) for k, (v, name) in held if k in weight and k in lacking
             and v and v not in lacking and getattr(variables.get(v), "ema", None)]
    if twins:
        k, v, name = twins[0]
        base = R.UNIQUIFIED.sub("", name)
        avg = variables[v].ema
        af, vf = ckpt.objects.full_names.get(avg, ""), ckpt.objects.full_names.get(v, "")
        # the EMA name after v's own: 'delta/fast' of dense/kernel/delta/fast (r37 F1)
        have = R.UNIQUIFIED.sub("", af[len(vf) + 1:] if vf and af.startswith(vf + "/")
                                else af.rpartition("/")[2])
        more = f" (and {len(twins) - 1} more)" if len(twins) > 1 else ""
        return (f"{HELD_TWIN}{show(k)} ({ckpt.objects.full_names[k]}){more} is named like "
                f"{show(v)}'s average under an EMA named {base!r}, while {show(v)} has an "
                f"average under {have!r} ({show(avg)}): nothing recorded tells a module's "
                "variable from a second EMA's average kept on the model; pass --ema-name "
                f"{base} (ema_name={base!r} in Python) if that is the name you gave an "
                f"ExponentialMovingAverage, or --ema-name {have} for the {have!r} averages, "
                f"with --allow-missing to restore {show(k)} raw only if it is the model's "
                "own variable")
    read = ckpt_twins(ckpt)
    # several fitting v (two towers of one class, each keeping its averages as attributes:
    # review-16-attack-r35 F2): named like the average of one of them
    found = [(k, v, name) for k, (v, name) in held if k in weight and (
        v in lacking if v else len(read[k].heads) > 1
        and any(h in lacking for h in read[k].heads))]
    if not found:
        return None
    k, v, name = found[0]
    base = R.UNIQUIFIED.sub("", name)
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    whose = f"{show(v)}'s average" if v else (
        "the average of one of " + ", ".join(show(h) for h in read[k].heads))
    if read[k].evidence in (OWN_AVERAGE, SELF_NAMED_AVERAGE):  # not "tracked": r37 F7
        # <w>/<N> beside <w>/<N>/<N> (TF's default name too: both EMAs default-named, s18b)
        again = ("default-named" if read[k].evidence == OWN_AVERAGE
                 or base == R.DEFAULT_EMA_NAME else f"{base!r}-named")
        return (f"{show(k)}{more} is named like {whose} under an EMA named {base!r} "
                f"({ckpt.objects.full_names[k]}), but its own {again} average is "
                "stored, so it is read as a variable: a variable of yours (a trainable "
                f"delta), or {whose} under {base!r} averaged again by a {again} "
                f"{EMA_OF_EMA}, which the file does not tell "
                f"apart (--ema-name {base} is refused so; --raw writes {show(k)} as stored)")
    # what --ema-name base reads, probed: a key in a sub-module, or beside a tied weight's
    # second path, is refused under it; the others are read leaving it out (r125 M1)
    doubt = doubted(ckpt, variables, base) if weight else {}
    offer = held_offer(ckpt, base, doubt, show)
    if k in doubt:  # no --ema-name reads it (r118 F3)
        return (f"{show(k)}{more} is named like {whose} under an EMA named {base!r} "
                f"({ckpt.objects.full_names[k]}), but{HELD_OWN}, "
                f"{where_held(ckpt.objects, k, read[k].heads, show)}, so it is read as a "
                "weight, and no --ema-name reads it as an average"
                + (f"; {offer} reads the other averages, only if {base!r} is the name you "
                   "gave an ExponentialMovingAverage" if offer else ""))
    if not offer:
        return (f"{show(k)}{more} is named like {whose} under an EMA named {base!r} "
                f"({ckpt.objects.full_names[k]}), but{HELD_OWN}, so it is read as a weight, "
                f"and no --ema-name decides (--ema-name {base} is refused, with "
                "--allow-missing too)")
    said = "".join(f"; {show(d)} is not read as an average under it: "
                   f"{where_held(ckpt.objects, d, doubt[d], show)}" for d in list(doubt)[:1])
    return (f"{show(k)}{more} is named like {whose} under an EMA named {base!r} "
            f"({ckpt.objects.full_names[k]}), but{HELD_OWN}, so it is read as a weight: pass "
            f"{offer} only if that is the name you gave an ExponentialMovingAverage{said}")


def off_default(ckpt, unpaired: list, ema_name: str | None = None) -> list:
    """The ``unpaired`` averages (variables with candidates, no proven pairing) less those only
    a name of the user's reads as averages, which stay out of the default-named EMA's pairing:
    a :data:`~ckpt_tools.tf2_twins.CONTAINER` kept on the model (a list or dict every element
    of which is named ``<v>/<x>``) whose ``x`` is neither TF's default EMA name nor the stated
    one (``ema_name``), beside averages of the same variables under either (``<v>/fast``,
    ``<v>/ExponentialMovingAverage``; ``--ema-name model``, an attribute, adds none). Unnamed
    variables (``Variable``) with pruning masks ``m.masks = [Variable/mask ...]`` and one
    default EMA were refused as four averages of "several default-named EMA objects", and
    every true ``--apply-order`` too (review-17-attack-r37 F6); with an EMA named ``fast``
    the true ``--ema-name fast --apply-order trainable`` was refused so (r38 F8): the masks
    are candidates of an EMA named ``x`` only where that name is stated; else an export
    writes them as stored, with the warning ``--raw`` gives
    (:func:`~ckpt_tools.raw_unproven.unproven_keys`), and ``apply_ema`` restores them
    raw."""
    if ckpt.objects is None or not unpaired:
        return unpaired
    full = ckpt.objects.full_names
    # the EMA names the pairing is for: TF's default, and the stated one (which may name the
    # attribute the averages are kept under, --ema-name model: then only the default's)
    chosen = {R.DEFAULT_EMA_NAME, *([ema_name] if ema_name else [])}
    defaults = {f[:-len(n) - 1] for f in map(_unnumbered, full.values()) for n in chosen
                if f.endswith("/" + n)}
    if not defaults:
        return unpaired
    read = ckpt_twins(ckpt)

    def aside(t) -> bool:
        return (t is not None and t.outcome == CANDIDATE and t.evidence == CONTAINER
                and not t.apart and bool(t.heads) and full.get(t.heads[0]) in defaults
                and not any(t.named(n) for n in chosen))

    return [v for v in unpaired if not aside(read.get(v.name))]


def _unnumbered(name: str) -> str:
    return R.UNIQUIFIED.sub("", name)
