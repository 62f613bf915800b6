"""TF1 keys ``<P>/<W>/<x>`` read as weights where no ``.meta`` is read, ``W`` a stored weight
of their float dtype and shape: ``ExponentialMovingAverage(name="x").apply()`` run inside
``variable_scope(P)`` names ``W``'s average so (the model built in one ``with
variable_scope("model")`` and ``fast`` applied in a second stores ``model/model/w/fast`` beside
``model/w``). A name of one's own (``x``) is read as an EMA name only as ``<W>/<x>`` beside
``W``, so without the ``.meta`` such keys were weights: the default export refused with a false
cause (no EMA shadow stored at all, the Saver saved only the trainables) and ``export --raw``
wrote fast's averages as raw weights, exit 0 (review-25-attack-r82 F2). A variable of the
model may be named so too, so the keys alone do not tell: ``--raw`` writes them as stored and
says so (:func:`scoped_twin_warning`), and the refusal of an export of averages says why
(:func:`scoped_twin_hint`). With the ``.meta`` its update ops decide
(:func:`~ckpt_tools.scoped_shadows.applied_scope_shadows`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from . import roles as R
from .errors import CheckpointError
from .wording import counted

#: How :func:`scoped_twin_hint` begins (``missing_message`` says it alone: "no EMA shadow
#: is stored at all" would be false).
SCOPED_TWIN = "without a .meta the keys cannot tell whether "

#: What :func:`scoped_twin_hint` says where :func:`scoped_twin_offer` works.
OFFERED = "exports them, leaving these keys out"

_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def _twin_of(variables: Mapping, key: str, v) -> tuple[str, str, str] | None:
    """``(P, W, x)`` where ``key`` (of ``v``) is named ``<P>/<W>/<x>``, ``W`` another stored
    weight or batch-norm statistic of its float dtype and shape, no key above it stored; the
    longest ``W`` where several fit; else ``None``."""
    model = (R.WEIGHT, R.BN_STAT)
    if v.dtype not in _FLOATS:
        return None
    parts = key.split("/")
    if any("/".join(parts[:i]) in variables for i in range(1, len(parts))):
        return None  # <v>/<tail> beside v: twin_keys' reading
    best: tuple[str, str, str] | None = None
    for i in range(1, len(parts) - 1):
        for j in range(len(parts) - 1, i, -1):
            w = "/".join(parts[i:j])
            h = variables.get(w)
            if (h is not None and w != key and h.role in model and h.dtype == v.dtype
                    and tuple(h.shape) == tuple(v.shape)
                    and (best is None or len(w) > len(best[1]))):
                best = ("/".join(parts[:i]), w, "/".join(parts[j:]))
    return best


def scoped_twin_keys(ckpt, variables: Mapping, keys: Iterable[str]
                     ) -> dict[str, tuple[str, str, str]]:
    """Returns key -> ``(P, W, x)`` for each of ``keys`` (read as a weight or batch-norm
    statistic) named ``<P>/<W>/<x>`` where ``W`` is another stored weight of its float dtype
    and shape and no key above it is stored (that is :func:`~ckpt_tools.raw_unproven.twin_keys`'
    reading), in a TF1 checkpoint read without a ``.meta``; the longest ``W`` where several
    fit. ``{}`` where a ``.meta`` is read or the checkpoint is a TF2 one."""
    if ckpt.meta is not None or ckpt.objects is not None:
        return {}
    out: dict[str, tuple[str, str, str]] = {}
    for key in keys:
        v = variables.get(key)
        if v is None or v.role not in (R.WEIGHT, R.BN_STAT):
            continue
        best = _twin_of(variables, key, v)
        if best is not None:
            out[key] = best
    return out


def scoped_average_twins(ckpt, variables: Mapping) -> dict[str, tuple[str, str, str]]:
    """Returns key -> ``(P, W, x)`` for the keys read as averages of a variable or tensor the
    checkpoint does not store (``x`` a name ckpt reads as an EMA's: ``ema/dense/bias/avg``, no
    ``ema/dense/bias``) named ``<P>/<W>/<x>`` beside a stored weight ``W`` of their dtype and
    shape, in a TF1 checkpoint read without a ``.meta``: ``ExponentialMovingAverage(name="avg")``
    applied inside ``variable_scope("ema")`` names ``dense/bias``'s average so, and a variable
    of the model may be named so too (review-26-attack-r89 F1). ``{}`` with a ``.meta`` or in
    a TF2 checkpoint."""
    if ckpt.meta is not None or ckpt.objects is not None:
        return {}
    out: dict[str, tuple[str, str, str]] = {}
    for key, v in variables.items():
        if v.role not in (R.EMA, R.TENSOR_AVERAGE) or tuple(v.shape) == ():
            continue
        head = key.rpartition("/")[0]
        if head in variables or (v.role == R.EMA and v.ema_of in variables):
            continue
        best = _twin_of(variables, key, v)
        if best is not None:
            out[key] = best
    return out


def _said(twins: dict[str, tuple[str, str, str]]) -> tuple[str, str, str, str]:
    """``(keys, their variables, EMA names and scopes, --exclude globs)`` as the texts say
    them."""
    shown = sorted(twins)
    more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
    keys = f"{', '.join(shown[:3])}{more}"
    of = f"{', '.join(twins[k][1] for k in shown[:3])}{more}"
    applied = sorted({(p, x) for p, _w, x in twins.values()})
    names = " or ".join(f"an ExponentialMovingAverage named '{x}' applied inside "
                        f"variable_scope('{p}') (its averages are named {p}/<variable>/{x})"
                        for p, x in applied[:2])
    globs = " ".join(f"--exclude '{p}/*/{x}'" for p, x in applied[:2])
    return keys, of, names, globs


def scoped_twin_offer(ckpt, twins: dict[str, tuple[str, str, str]],
                      ema_name: str | None = None) -> str | None:
    """The options (as typed) of an export of the averages the names prove that leaves the
    ``twins`` out (``--exclude 'model/*/fast'``, beside ``--ema-name ema_name`` where one is
    given), where :func:`~ckpt_tools.offer_probe.works` accepts it: the default EMA applied
    plainly beside ``fast`` applied in the re-entered scope (review-26-attack-r89 F3).

    Returns:
        `str`, or ``None`` where that export is refused too (or a probe is running)."""
    from .offer_probe import option_text, works  # it runs the export plan, which imports us

    globs = tuple(f"{p}/*/{x}" for p, x in sorted({(p, x) for p, _w, x in twins.values()})[:2])
    return option_text(ema_name, globs) if works(ckpt, ema_name, globs) else None


def scoped_twin_hint(ckpt, variables: Mapping, missing,
                     ema_name: str | None = None) -> str | None:
    """The hint of a map refused for ``missing`` where some of them are
    :func:`scoped_twin_keys`, or are the ``W`` of :func:`scoped_average_twins`: those keys
    may be averages of the weights they name, which only the training ``.meta`` proves, and
    no option decides without it.

    ``ema_name``: the refused command's ``--ema-name``, kept in the offer of
    :func:`scoped_twin_offer` where the other averages export without those keys.

    Returns:
        `str` beginning with :data:`SCOPED_TWIN`, or ``None`` where there is no such key (or a
        ``.meta`` is read).
    """
    lacking = set(missing)
    named = {k: t for k, t in scoped_average_twins(ckpt, variables).items()
             if t[1] in lacking}
    twins = {**scoped_twin_keys(ckpt, variables, missing), **named}
    if not twins:
        return None
    keys, of, names, globs = _said(twins)
    keep = (f"drop --no-meta (the .meta beside it, {ckpt.meta_unread}, decides)"
            if getattr(ckpt, "meta_unread", None) else _keep_own_meta(ckpt))
    # ema/dense/bias/avg: read as the average of an ema/dense/bias not stored (r89 F1)
    vtr = (", or the raw values of variables named "
           f"{', '.join(sorted(k.rpartition('/')[0] for k in named)[:3])} (not stored) that "
           "a training Saver(ema.variables_to_restore()) writes under their averages' names"
           if named else "")
    return (f"{SCOPED_TWIN}{keys} are variables of yours or the averages of {of} kept by "
            f"{names}{vtr}: an average is paired by its name only as <variable>/<name> "
            "beside the variable (--ema-name reads no other key), and only the training "
            ".meta's update ops prove such a key an average, so no option of ckpt exports "
            f"them as averages without it: {keep}; " + (
                f"the other averages stored pair by their names: ckpt export {offer} "
                f"{OFFERED}; " if (offer := scoped_twin_offer(
                    ckpt, twins, ema_name)) else "")
            + "ckpt export --raw writes the raw weights "
            f"(and these keys as stored, said; {globs} leaves them out)")


def _keep_own_meta(ckpt) -> str:
    """What the refusal asks for where no ``.meta`` is read: the checkpoint's own training
    ``.meta``. Where another checkpoint's ``.meta`` of its prefix lies beside it (a run saving
    with ``write_meta_graph`` at its first save only), that file is named as not read for it:
    "keep the training .meta beside it" was said while ``model.ckpt-1.meta`` was there
    (review-26-attack-r90 F5)."""
    from .meta_sibling import candidates

    location = getattr(ckpt, "location", None)
    try:
        others = candidates(location.prefix) if location is not None else []
    except CheckpointError:
        others = []
    if not others:
        return ("keep the training .meta (model.ckpt.meta, written by saver.save) beside the "
                "checkpoint")
    return (f"{os.path.basename(others[0])} beside it is another checkpoint's graph, never read "
            "as this one's (nothing records which run wrote this checkpoint), so only a .meta "
            "of its own (saver.save(..., write_meta_graph=True) at this step) proves it")


def scoped_twin_warning(twins: dict[str, tuple[str, str, str]]) -> str:
    """The warning (without ``warning:``) ``export --raw`` gives for the
    :func:`scoped_twin_keys` ``twins`` it writes as stored."""
    keys, of, names, globs = _said(twins)
    return (f"{counted(len(twins), 'tensor')} written as stored may be model weights or the "
            "averages "
            f"of {of} kept by {names} ({keys}): without a .meta their names read both ways; "
            f"if they are averages, leave them out with {globs} (the training .meta beside "
            "the checkpoint tells which)")
