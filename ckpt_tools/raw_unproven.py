"""What ``export --raw`` keeps that the pairing only may call averages: TF2 variables whose
recorded name is ``<variable>/<x>`` with ``x`` not TensorFlow's default EMA name. TF2 proves no
other EMA name, and real models name their own variables so (a sub-module named like a weight:
``block/w`` beside ``block/w/x`` or ``block/w/proj/kernel``, two towers of one class, a model
that is the checkpoint's root): dropping them dropped model weights with exit 0
(review-16-attack-r33 F10, r34 F1, F2). Written as stored, with a warning naming them and the
statements that read them as averages."""

from __future__ import annotations

from . import roles as R
from .ema_refusals import suffix_base
from .orphan_averages import read_alike
from .tf2_twins import (
    AVERAGE_IF_STATED,
    CONTAINER,
    OWN_AVERAGE,
    SELF_NAMED_AVERAGE,
    ckpt_twins,
    together,
)
from .wording import counted


def unproven_keys(ckpt, variables) -> tuple[list[str], list[str]]:
    """Returns ``(written, apart)``: the keys of TF2 variables read as averages only by a
    non-default name.

    A key qualifies where it has the ``ema`` role, its recorded name is ``<head>/<x>`` for
    every variable it may average (``ema_of`` or its candidates), and no such ``x`` is
    ``ExponentialMovingAverage`` (or ``..._N``): an average of TF's default name is proven
    and stays out of a raw export. ``apart``: those kept in a list or dict saved apart from
    the model (``Checkpoint(model=m, masks=[...])``), which an export leaves out, as an EMA's
    averages are saved so, and names (review-16-attack-r35 F5); ``written``: the others,
    which an export writes as stored with :func:`unproven_warning`.
    """
    full = ckpt.objects.full_names if ckpt.objects is not None else {}
    if not full:
        return [], []
    # A list or dict of nothing else saved apart from the model (Checkpoint(model=m,
    # ema=[...])) is how TF2 averages are saved; one kept ON the model may as well be the
    # model's own (pruning masks m.masks = [w0/mask ...]: review-16-attack-r34 F1), so only
    # the former stays out.
    read = ckpt_twins(ckpt)
    out: list[str] = []
    apart: list[str] = []
    for k, v in variables.items():
        name = full.get(k)
        if v.role != R.EMA or not name:
            continue
        candidates = [v.ema_of] if v.ema_of else list(v.ema_candidates)
        twin = read.get(k)
        kept = twin is not None and twin.evidence == CONTAINER and not any(
            together(ckpt.objects, c, k) for c in candidates)
        heads = [full.get(h) for h in candidates]
        if not heads or not all(h and name.startswith(h + "/") for h in heads):
            continue  # not the <variable>/<x> reading (a Keras optimizer's copy, say)
        if all(suffix_base(name[len(h) + 1:].rpartition("/")[2]) != R.DEFAULT_EMA_NAME
               and suffix_base(name[len(h) + 1:].partition("/")[0]) != R.DEFAULT_EMA_NAME
               for h in heads):
            (apart if kept else out).append(k)
    return out, apart


def averaged_averages(variables, weights, shadows=frozenset()) -> list[str]:
    """Keys read as averages that are averaged in turn and not among ``weights`` (TF1
    ``w0/fast`` beside ``w0/fast/fast`` without the ``.meta``): a variable with its own
    average as much as an EMA of an average, which ``--raw``, offered by the refusal for it,
    must never drop (review-17-attack-r38 F10). ``shadows``: keys the ``.meta``'s update ops
    prove ``ema.apply()``'s shadows, never a weight whatever averages them in turn
    (review-23-attack-r67 F1)."""
    return sorted({v.ema_of for v in variables.values() if v.role == R.EMA and v.ema_of
                   and getattr(variables.get(v.ema_of), "role", None) == R.EMA}
                  - set(weights) - set(shadows))


def held_twins(ckpt, variables) -> list[str]:
    """Keys read as weights that :mod:`~ckpt_tools.tf2_twins` reads as the model's own unless
    an EMA name is stated (``enc.w_avg = fast.average(enc.w)``, a dict of a named EMA's
    averages on the model): written as weights, they may as well be averages
    (review-16-attack-r35 F4); and those it reads as variables because their own average is
    stored (:func:`averaged_again`)."""
    weights = [k for k, v in variables.items() if v.role == R.WEIGHT]
    return sorted({k for k in weights if getattr(ckpt_twins(ckpt).get(k), "outcome", None)
                   == AVERAGE_IF_STATED} | set(averaged_again(ckpt, weights))
                  | set(read_alike(ckpt, variables)))  # no <x> stored: r39 F8


def averaged_again(ckpt, keys) -> list[str]:
    """Those of ``keys`` that :mod:`~ckpt_tools.tf2_twins` reads as variables because their
    own average is stored (:data:`~ckpt_tools.tf2_twins.OWN_AVERAGE`: default-named;
    :data:`~ckpt_tools.tf2_twins.SELF_NAMED_AVERAGE`: under their own last name) beside a
    stored variable they fit: a trainable delta ``k0/delta`` as much as an average
    ``net/w/fast`` of an EMA named ``fast`` averaged again by a default-named one
    (review-17-attack-r37 F7), or ``net/w/ExponentialMovingAverage`` averaged again by a
    second default-named EMA, both on the model; no ``--ema-name`` reads them as averages."""
    read = ckpt_twins(ckpt)
    return [k for k in keys if k in read and read[k].heads
            and read[k].evidence in (OWN_AVERAGE, SELF_NAMED_AVERAGE)]


def stated_raw_averages(ckpt, weights, ema_name: str | None) -> list[str]:
    """Those of ``weights`` (keys ``--raw`` would write) ending in a stated ``ema_name`` (or
    one of a comma list) in a TF1 checkpoint with no ``.meta`` read: averages by the name the
    user gave, as keys ending in the default name are; a Saver of the averages alone wrote
    every one of them as a model weight, exit 0 (review-23-attack-r67 F4)."""
    if not ema_name or ckpt.meta is not None or ckpt.objects is not None:
        return []
    names = [n for n in ema_name.split(",") if n]
    return [k for k in weights if any(k.endswith("/" + n) for n in names)]


def twin_keys(ckpt, variables, weights) -> dict[str, str]:
    """Those of ``weights`` named ``<v>/<tail>`` (``v`` the nearest stored key above, a weight
    of their float dtype and shape that does not pair with them) in a TF1 checkpoint with no
    ``.meta`` read, to ``tail``: an average of ``v`` kept by an EMA named ``tail``
    (``ema/fast``, ``a/b/c``) as much as a weight, which ``--raw`` wrote with no word
    (review-23-attack-r67 F3, F10, F11). The keys do not tell which: ``--raw`` writes them
    with :func:`unproven_warning`; an export of averages refuses them where they have none."""
    if ckpt.meta is not None or ckpt.objects is not None:
        return {}
    out = {}
    for k in weights:
        v, head = variables[k], k.rpartition("/")[0]
        while head and head not in variables:
            head = head.rpartition("/")[0]
        h = variables.get(head)
        if (h is not None and h.role in (R.WEIGHT, R.BN_STAT) and h.ema != k
                and v.dtype == h.dtype and v.dtype in R._FLOAT
                and tuple(v.shape) == tuple(h.shape)):
            out[k] = head
    # one under a key read so (net/w/ema/fast/dense/kernel) is that key's, not a name's
    return {k: k[len(h) + 1:] for k, h in out.items() if h not in out}


def unproven_warning(shown: list[str], again: list[str] = (),
                     names: list[str] = ()) -> str:
    """The warning ``export`` gives for the tensors it wrote as stored that may be averages
    (:func:`unproven_keys`' ``written``, :func:`held_twins`, :func:`averaged_averages`,
    :func:`twin_keys`); ``again``: those of ``shown`` whose own average is stored
    (:func:`averaged_again`); ``names``: the EMA names that would read them as averages."""
    more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
    every = len(again) == len(shown)
    twice = ""
    if again:
        also = f" and {len(again) - 2} more" if len(again) > 2 else ""
        which = "each" if every else f"{', '.join(again[:2])}{also}"
        twice = (f"; {which} also has its own average stored, as both a variable of yours "
                 "(a trainable delta) and a weight's average averaged again by a second "
                 "ExponentialMovingAverage (an EMA of an EMA) would, so no --ema-name reads "
                 "them as averages")
    return (f"{counted(len(shown), 'tensor')} written as stored may be model weights or averages "
            "of an "
            f"ExponentialMovingAverage{'' if every else ' given a name of your own'} "
            f"({', '.join(shown[:3])}{more}): their names read both ways"
            + ("" if every else " and TensorFlow records no EMA name but its default")
            + f"{twice}; if they are averages, leave them out with --exclude"
            + ("" if every else " (or export the averages with --ema-name "
               + (" or --ema-name ".join(names[:3]) if names else "NAME") + ")"))


def raw_warnings(ckpt, variables, show, found: tuple[list[str], list[str]]) -> list[str]:
    """What ``export --raw`` says of a checkpoint with averages: the note for the tensors
    :func:`unproven_keys` leaves out (``found``: its answer; ``show``: key, variable -> the
    name exported), and the usual warning, unless those are all its averages
    (``masks=[...]``, no EMA: never "the checkpoint has EMA shadows", review-16-attack-r35
    F5)."""
    written, apart = found
    out = [apart_note(ckpt, apart, [show(k, variables.get(k)) for k in apart])] if apart else []
    if not {k for k, v in variables.items() if v.role == R.EMA} <= {*written, *apart}:
        from .keras_assumed import raw_warning  # a Keras 3 file: --raw may be the remedy

        out.append(raw_warning(ckpt))
    return out


def apart_note(ckpt, keys: list[str], shown: list[str]) -> str:
    """The note ``export`` gives for the keys :func:`unproven_keys` leaves out (``shown``:
    as the export names them): ``--raw``, and an EMA export whose pairing uses none of them
    (review-17-attack-r37 F5)."""
    more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
    read = ckpt_twins(ckpt)
    said = " or ".join(repr(n) for n in sorted({suffix_base(read[k].x) for k in keys
                                                if k in read and read[k].x}))
    return (f"left out {counted(len(shown), 'tensor')} saved apart from the model that only their "
            "names "
            f"read as averages of an ExponentialMovingAverage named {said} "
            f"({', '.join(shown[:3])}{more}): TensorFlow records no EMA name but its default, "
            "so nothing proves them averages, and export writes a model's weights only; if "
            "they are tensors of your own (masks, deltas), ckpt show prints them")
