"""TF1 averages of an ``ExponentialMovingAverage`` named with a slash (``name="ema/slow"``:
shadows ``W/ema/slow``) read without a ``.meta`` (``--no-meta``, or none beside the checkpoint).

With the ``.meta`` its update ops prove them (:mod:`.meta_shadows`). Without it the keys alone
look like a weight ``W/ema/slow`` under an unstored ``W/ema``: every command said "no EMA shadow
is stored at all" and named ``--raw`` (s13g, review-13-attack-r22 F8). An EMA name of several
parts is never guessed from the keys: ``--ema-name ema/slow`` states it
(:func:`stated_slashed_shadows` then pairs ``<v>/ema/slow`` with a stored ``<v>`` of its dtype
and shape), and without it the refusal names that option (:func:`slashed_hint`).
"""

from __future__ import annotations

from . import roles as R
from .formats._record import replace
from .object_held import stated_held_shadows
from .object_slashed import stated_own_heads
from .orphan_averages import stated_orphans
from .stated_own_average import refuse_own_average_stated

#: How :func:`slashed_hint` begins.
SLASHED = "keys such as "


def _shadow_of(key: str, v, variables, name: str) -> str | None:
    """The stored variable ``key`` sits under as ``<var>/<name>`` with its dtype and shape
    (``key`` read as a weight or other, or by its last part as the average of the stored
    ``<var>/<first part>``: ``w0/ema/fast`` beside an EMA named ``ema``'s ``w0/ema``,
    review-16-attack-r33 F7), or ``None``."""
    if not key.endswith("/" + name):
        return None
    if v.role == R.EMA:  # by name an average of an average: the statement reads it anew
        under = key.rpartition("/")[0]
        if v.ema_style != "tf1" or (v.ema_of or "") != under and (
                v.ema_of or under not in v.ema_candidates):
            return None
    elif v.role not in (R.WEIGHT, R.OTHER):
        return None
    head = key[: -len(name) - 1]
    h = variables.get(head)
    if (h is None or h.role not in (R.WEIGHT, R.BN_STAT) or h.dtype != v.dtype
            or tuple(h.shape) != tuple(v.shape) or v.dtype not in R._FLOAT):
        return None
    return head


def stated_slashed_shadows(ckpt, variables: dict, ema_name: str | None,
                           apply_order=None, left_out=None) -> dict:
    """``variables`` with each ``<v>/<ema_name>`` read as ``v``'s average, where ``ema_name``
    (stated: ``--ema-name``) has several parts and no ``.meta`` is read (a TF1 checkpoint);
    unchanged otherwise. In a TF2 checkpoint, the model's own variables named like an
    average under ``ema_name`` (:func:`~ckpt_tools.object_held.stated_held_shadows`, which
    ``left_out(key)``, the command's name filters, tells what the output leaves out)."""
    if ckpt.objects is not None:  # <a>/<b>/<x> of a weight <a>/<b> under a stated x: F1
        refuse_own_average_stated(ckpt, variables, ema_name)  # an EMA of an EMA? F7
        variables = stated_own_heads(ckpt, variables, ema_name)
        variables = stated_orphans(ckpt, variables, ema_name)  # r39 F8: said, never read
        return stated_held_shadows(ckpt, variables, ema_name, apply_order, left_out)
    if (not ema_name or "," in ema_name or ckpt.objects is not None
            or ckpt.meta is not None):
        return variables
    # keys under the stated name's shadows: no average of them (r53 F2; r65 F2: ema/fast)
    variables = weights_under_shadows(ckpt, variables, ema_name)
    if "/" not in ema_name:
        return variables
    found = {k: h for k, v in variables.items()
             if (h := _shadow_of(k, v, variables, ema_name)) is not None}
    if not found:
        return variables
    # another such object's averages beside them (ema/fast beside the stated ema/slow): read
    # as averages too, set aside by the name stated, never as weights missing one
    parent = ema_name.rpartition("/")[0]
    others = {k: h for k, v in variables.items() if k not in found and f"/{parent}/" in k
              and (h := _shadow_of(k, v, variables, parent + "/" + k.rpartition("/")[2]))}
    out = dict(variables)
    for k, h in {**others, **found}.items():
        out[k] = replace(variables[k], role=R.EMA, ema_of=h, ema_style="tf1", ema=None,
                         ema_candidates=())
    for k, h in found.items():
        out[h] = replace(out[h], ema=k)
        under = out.get(k.rpartition("/")[0])
        if under is not None and under.ema == k:  # no average of w0/ema, set aside
            out[under.name] = replace(under, ema=None)
    return out


def under_shadows(ckpt, variables: dict, name: str | None) -> dict[str, str]:
    """Each key ``<v>/<name>/<s>`` (``s`` not ending in ``name``) the keys may read as an
    average of ``name``'s shadow ``<v>/<name>``, to that shadow, under a stated ``name`` with
    no ``.meta`` read (TF1); empty otherwise (a TF2 checkpoint, a ``.meta``: its update ops
    prove which key is whose). ``s`` of one part: a key read as that shadow's average;
    of several (``<v>/fast/ema/slow``, nothing stored between): a key of the shadow's dtype
    and shape, which TF1 names so as an EMA named ``ema/slow``'s average of it as much as a
    weight (review-22-attack-r65 F3). A ``name`` of several parts (``ema/fast``) alike: its
    shadows are the keys ``<v>/ema/fast`` of a stored ``<v>`` of their dtype and shape,
    whether read as weights or as its averages (r65 F2)."""
    if (not name or "," in name or ckpt.objects is not None or ckpt.meta is not None):
        return {}
    shadows = {k for k, v in variables.items() if _stated_shadow(k, v, variables, name)}
    out = {}
    for k, v in variables.items():
        if k.endswith("/" + name) or R.ema_suffix(k.rpartition("/")[2], {name}):
            continue
        head = k.rpartition("/")[0]
        while head and head not in variables:  # the nearest stored key above k
            head = head.rpartition("/")[0]
        if head not in shadows:
            continue
        if head == k.rpartition("/")[0]:
            if v.role == R.EMA and v.ema_style == "tf1" and v.ema_of == head:
                out[k] = head
        elif _fits(variables[head], v) and (v.role in (R.WEIGHT, R.OTHER) or (
                v.role == R.EMA and v.ema_style == "tf1")):
            out[k] = head
    return out


def _fits(shadow, v) -> bool:
    """Whether ``v`` has ``shadow``'s float dtype and shape (an average of it may)."""
    return (v.dtype == shadow.dtype and v.dtype in R._FLOAT
            and tuple(v.shape) == tuple(shadow.shape))


def _stated_shadow(k: str, v, variables: dict, name: str) -> bool:
    """Whether ``k`` is ``name``'s shadow ``<v>/<name>`` of a stored ``<v>`` that is no
    average: read so (a one-part ``name``: the keys name it), or (several parts, which the
    keys alone never read) a key of ``<v>``'s dtype and shape read as a weight, as other or
    as ``<v>``'s average (:func:`stated_slashed_shadows` read it so)."""
    if "/" not in name:
        return (v.role == R.EMA and v.ema_style == "tf1" and bool(v.ema_of)
                and k == f"{v.ema_of}/{name}"
                and getattr(variables.get(v.ema_of), "role", R.EMA) != R.EMA)
    head = k[: -len(name) - 1] if k.endswith("/" + name) else ""
    h = variables.get(head)
    return (h is not None and h.role in (R.WEIGHT, R.BN_STAT) and _fits(h, v)
            and (v.role in (R.WEIGHT, R.OTHER) or v.role == R.EMA and v.ema_of in (
                head, k.rpartition("/")[0])))


def weights_under_shadows(ckpt, variables: dict, name: str | None) -> dict:
    """``variables`` with each key ``<v>/<name>/<s>`` (:func:`under_shadows`: ``s`` not
    ``name``) that the keys may read as another EMA's average of ``name``'s shadow
    ``<v>/<name>`` read anew, under a stated ``name`` and no ``.meta`` (review-21-attack-r53
    F2: a trainable ``net/w/fast/kernel`` beside ``fast``'s average ``net/w/fast`` was an
    "average" of that average and dropped, "0 left out"). Under the name stated, a key not ending in
    ``/<name>`` is never ``name``'s shadow: where ``<v>/<name>/<s>/<name>`` is stored
    (``name`` averaged it) it is a weight paired with that; else the keys cannot tell an EMA
    of an EMA from a weight named under the shadow (review-22-attack-r63 F1, F2), and it is
    neither: role ``other``, no average (:func:`refuse_under_shadows` refuses a map of it).
    Unchanged for another file or name."""
    below = under_shadows(ckpt, variables, name)
    out = dict(variables)
    for k, head in below.items():
        own = f"{k}/{name}" if _own_shadow(variables, k, name) else None
        out[k] = replace(variables[k], role=R.WEIGHT if own else R.OTHER, ema_of=None,
                         ema=own, ema_style="tf1" if own else None, ema_candidates=())
        if out[head].ema == k:
            out[head] = replace(out[head], ema=None)
        if own:
            out[own] = replace(variables[own], role=R.EMA, ema_of=k, ema_style="tf1",
                               ema=None, ema_candidates=())
    return out


def refuse_under_shadows(ckpt, variables: dict, name: str | None, left_out) -> None:
    """Refuse where a key ``<v>/<name>/<s>`` under a stated ``name``'s shadow ``<v>/<name>``
    has no ``<v>/<name>/<s>/<name>`` of its own and ``left_out(key)`` (the name filters)
    keeps it: without the ``.meta`` it may be an EMA of ``name``'s average or a weight named
    under it, and either guess exports a wrong value, exit 0 (review-22-attack-r63 F1, F2).
    ``--allow-missing`` is never offered: it exported an average as a weight (r63 F2).
    ``export --raw`` asks it too: it dropped such a kernel, or wrote the shadow as a raw
    weight (review-22-attack-r65 F4).

    Raises:
        UnprovenPairingError: naming the keys, both readings and the options that decide.
    """
    below = under_shadows(ckpt, variables, name)
    keys = sorted(k for k in below if not _own_shadow(variables, k, name) and not left_out(k))
    if not keys:
        return
    from .errors import UnprovenPairingError

    shown = ", ".join(keys)
    heads = ", ".join(sorted({below[k] for k in keys}))
    meta = ("drop --no-meta (the .meta's update ops decide), or " if ckpt.meta_unread else "")
    raise UnprovenPairingError(
        f"{ckpt.path}: without a .meta the keys cannot tell whether {shown} "
        f"{'is an average' if len(keys) == 1 else 'are averages'} of {name}'s average "
        f"{heads} (an EMA of an EMA) or a weight named under it: {meta}pass "
        + " ".join(f"--exclude '{k}'" for k in keys) + " to leave "
        + ("it" if len(keys) == 1 else "them") + " out (a weight left out is not exported)",
        option="--no-meta" if ckpt.meta_unread else "--exclude",
        undecided={})  # the shadows are N's, proven; the keys are no one's average


def _own_shadow(variables: dict, key: str, name: str) -> bool:
    """Whether ``<key>/<name>`` is stored with ``key``'s dtype and shape."""
    v, s = variables[key], variables.get(f"{key}/{name}")
    return s is not None and s.dtype == v.dtype and tuple(s.shape) == tuple(v.shape)


def slashed_hint(ckpt, variables: dict, missing) -> str | None:
    """Where weights lack an average and keys ``<w>/<a>/<b>`` of their dtype and shape sit
    under them with ``<w>/<a>`` not stored (no ``.meta`` read): the hint naming
    ``--ema-name <a>/<b>``, or ``None``."""
    if ckpt.objects is not None or ckpt.meta is not None:
        return None
    lacking = set(missing)
    names: dict[str, str] = {}  # the name after the weight's key -> a key under it
    for t in missing:
        for k, v in variables.items():
            rest = k[len(t) + 1:] if k.startswith(t + "/") else ""
            if "/" not in rest or f"{t}/{rest.split('/')[0]}" in variables:
                continue
            if k in lacking and _shadow_of(k, v, variables, rest) == t:
                names.setdefault(rest, k)
    if not names:
        return None
    n = sorted(names)
    return (f"{SLASHED}{names[n[0]]} may hold the averages of an ExponentialMovingAverage "
            f"named with a slash ({', '.join(map(repr, n))}), which the keys alone do not "
            f"prove: keep the training .meta beside the checkpoint, or pass --ema-name "
            f"{n[0]} (ema_name={n[0]!r} in Python)"
            + (f" or --ema-name {n[1]}" if len(n) > 1 else "")
            + " if that is the name you gave it")


def stacked_hint(ckpt, variables: dict, missing, ema_name: str | None) -> str | None:
    """Where weights lack an average under a stated one-part ``ema_name`` (``fast``) and keys
    ``<w>/<a>/<ema_name>`` of their dtype and shape sit under a stored ``<w>/<a>`` (no
    ``.meta`` read): TF1 names both an EMA named ``<a>/<ema_name>``'s average of ``w`` and an
    EMA named ``ema_name``'s average of ``<w>/<a>`` (an EMA of another EMA's averages) so, and
    the keys do not tell which (review-16-attack-r34 F8). The hint (beginning as
    :func:`slashed_hint`'s) naming ``--ema-name <a>/<ema_name>``, or ``None``."""
    if (not ema_name or "/" in ema_name or "," in ema_name or ckpt.objects is not None
            or ckpt.meta is not None):
        return None
    for t in missing:
        w = variables.get(t)
        for k, v in variables.items():
            under = k[: -len(ema_name) - 1]
            if (w is None or not k.startswith(t + "/") or not k.endswith("/" + ema_name)
                    or under.count("/") != t.count("/") + 1 or under not in variables
                    or v.dtype != w.dtype or tuple(v.shape) != tuple(w.shape)):
                continue
            a = under.rpartition("/")[2]
            return (f"{SLASHED}{k} are stored, which an ExponentialMovingAverage named "
                    f"{ema_name!r} writes as its average of {under} (an EMA of another EMA's "
                    f"averages: it averaged no weight) and one named '{a}/{ema_name}' as its "
                    f"average of {t}: the keys alone do not tell which; keep the training .meta "
                    f"beside the checkpoint (its update ops do), or pass --ema-name "
                    f"{a}/{ema_name} (ema_name='{a}/{ema_name}' in Python) if that is the name "
                    "you gave it")
    return None
