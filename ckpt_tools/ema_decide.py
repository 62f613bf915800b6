"""The pairing every command shows without refusing outright (``list``, ``stats``, ``show``):
:func:`decide_pairing` marks each variable and average as :func:`~ckpt_tools.emamap.ema_map`
(``ckpt map``) pairs them, or leaves open what it refuses."""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_apply_order import refuse_apply_order
from .ema_refusals import UnprovenPairingError, require_keras
from .emamap import proven_pairs
from .errors import EmaError
from .formats._record import replace
from .lone_named import unmarked_lone_averages
from .raw_named import raw_named_open
from .saved_swaps import swapped_pairs
from .slashed_stated import weights_under_shadows


def decide_pairing(ckpt: Checkpoint, variables: list | None = None, *,
                   ema_name: str | None = None, use_meta: bool = True,
                   apply_order: str | None = None) -> tuple[list, UnprovenPairingError | None]:
    """Every variable with ``ema``/``ema_of`` as :func:`proven_pairs` (``ckpt map``) pairs
    them, for commands that show or use a pairing without refusing outright (list, stats,
    show).

    Args:
        ckpt: an open checkpoint.
        variables: ``ckpt.variables_unwarned()`` (or the caller's copy of them); default: read here.
        ema_name / use_meta / apply_order: decide as for :func:`ema_map`.

    Returns:
        ``(variables, refusal)``. Where the pairing is proven, ``refusal`` is ``None`` and each
        variable's ``ema`` is the average ``ckpt map`` uses (``None`` if it uses none), each
        average's ``ema_of`` its variable. Where it is not, ``refusal`` is the
        :class:`UnprovenPairingError` ``ckpt map`` raises, and every variable and average it
        leaves open has ``ema``/``ema_of`` ``None`` and ``ema_candidates`` set: no pairing the
        file does not prove is ever present. (Averages of several EMA objects keep their
        ``ema_of``: their names prove it; only their variable's ``ema`` is open.)

    Raises:
        OptionError: ``apply_order`` given for a Keras file
            (:func:`~.ema_apply_order.refuse_apply_order`).
    """
    refuse_apply_order(ckpt, apply_order)
    if ckpt.with_meta(use_meta) is not ckpt:  # roles as if no .meta were beside it
        ckpt, variables = ckpt.with_meta(use_meta), None
    variables = list(ckpt.variables_unwarned() if variables is None else variables)
    unknown = getattr(ckpt, "meta_unknown", None)
    if unknown is not None:  # opened past a refusal (defer_unknown): nothing shown paired
        return [replace(v, ema=None, ema_of=None, ema_candidates=()) for v in variables], \
            UnprovenPairingError(str(unknown), option=unknown.option)
    # a key under a stated name's shadow read as the weight it is, as ema_map reads it
    # (review-21-attack-r53 F2)
    variables = list(weights_under_shadows(ckpt, {v.name: v for v in variables},
                                           ema_name).values())
    layout = getattr(ckpt.reader, "keras", None)
    if layout is not None and (layout.use_ema is None or layout.copies_unpaired):
        # a bare .weights.h5 that cannot tell use_ema, or copies no layout places: no
        # average is listed, yet every command that pairs refuses; say so, with the option
        # that decides (--use-ema, --trainable)
        try:
            require_keras(ckpt)
        except UnprovenPairingError as exc:
            return variables, exc
        except EmaError:  # copies no option pairs: nothing is shown paired either
            return variables, None
    by_key = {v.name: v for v in variables}
    if not any(v.role == R.EMA for v in variables) and not unmarked_lone_averages(
            ckpt, by_key, {}, ema_name, use_meta) and not (
            use_meta and swapped_pairs(ckpt, by_key, ema_name)) and not (  # avgW
            use_meta and layout is None and raw_named_open(ckpt)):
        return variables, None  # no average: no pairing to show (nor to refuse)
    try:
        pairs = proven_pairs(ckpt, ema_name=ema_name, use_meta=use_meta,
                             apply_order=apply_order)
    except UnprovenPairingError as exc:
        refusal = exc
    except EmaError:  # a Keras file without averages: nothing to pair
        return variables, None
    else:
        shadow_of = {s: t for t, s in pairs.items()}
        out = []
        for v in variables:
            if v.role == R.EMA and v.ema_of and pairs.get(v.ema_of) == v.name and (
                    pairs.get(v.name, v.name) != v.name):
                # an average that is averaged in turn (ema2.apply([ema.average(W)])): W's
                # average still, with its own (review-14-attack-r25 F4c)
                v = replace(v, ema=pairs[v.name], ema_candidates=())
            elif v.role == R.EMA and pairs.get(v.name, v.name) != v.name:
                # named as an average, holding the weight (the save op proves: saved_swaps)
                v = replace(v, role=R.WEIGHT, ema=pairs[v.name], ema_of=None, ema_candidates=())
            elif v.role == R.EMA:
                of = shadow_of.get(v.name, v.ema_of)
                if of != v.ema_of or (of and v.ema_candidates):
                    v = replace(v, ema_of=of, ema_candidates=() if of else v.ema_candidates)
                elif not of and v.ema_candidates:
                    # Left open and yet the map is proven: another EMA object's average than
                    # the one --ema-name chose (set aside), which nothing here uses.
                    v = replace(v, ema_candidates=())
            elif shadow_of.get(v.name, v.name) != v.name:  # an average no name marks
                v = replace(v, role=R.EMA, ema_of=shadow_of[v.name], ema_style="tf1",
                            ema=None, ema_candidates=())
            elif v.ema != pairs.get(v.name) or v.ema_candidates:
                v = replace(v, ema=pairs.get(v.name), ema_candidates=())
            out.append(v)
        return out, None
    marked: dict[str, tuple[str, ...]] = {}
    # Several EMA objects (--ema-name): each average's name proves its variable; only which
    # one the variable takes is open. Otherwise the other side of each candidate is open too.
    both_sides = refusal.option != "--ema-name"
    # A Keras weight whose own copy the file pairs in every reading (its ema_of) is no
    # candidate of an open copy of its shape: list shows it paired, as the copy says
    # (review-12-user-r13 F3).
    taken = {v.ema_of: v.name for v in variables if layout is not None and v.role == R.EMA
             and v.ema_of and v.name not in refusal.undecided}
    for key, cands in refusal.undecided.items():
        marked[key] = tuple(c for c in cands if c not in taken) or tuple(cands)
    for key in refusal.undecided:
        for cand in marked[key] if both_sides else ():
            if cand not in refusal.undecided and key not in marked.setdefault(cand, ()):
                marked[cand] += (key,)  # every average the variable may take
    out = []
    for v in variables:
        if v.name in taken and v.name not in marked and v.role != R.EMA:
            v = replace(v, ema=taken[v.name], ema_candidates=())
        elif v.name in marked:
            v = (replace(v, ema_of=None, ema_candidates=marked[v.name]) if v.role == R.EMA
                 else replace(v, ema=None, ema_candidates=marked[v.name]))
        out.append(v)
    return out, refusal
