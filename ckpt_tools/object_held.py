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
averages are saved) stay candidates, as before.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import roles as R
from .formats._record import replace
from .formats.entry import TensorEntry
from .formats.objgraph import SLOT_MARK, ObjectGraph


def _root(key: str) -> str:
    return key.split("/", 1)[0]


def model_held(entries: Mapping[str, TensorEntry],
               objects: ObjectGraph) -> dict[str, tuple[str, str]]:
    """Keys whose recorded name reads ``<v>/<name>`` (``v`` a stored variable of the key's
    float dtype and shape, ``name`` not TF's default EMA name nor a slot's, step counter's or
    batch norm statistic's) where every key of ``v``'s name that fits sits under the same
    child of the root as the key itself: key -> (``v``'s key or ``""`` where several fit,
    ``name``)."""
    full = {k: objects.full_names[k] for k in entries
            if k in objects.full_names and SLOT_MARK not in k}
    by_name: dict[str, list[str]] = {}
    for k, f in full.items():
        by_name.setdefault(f, []).append(k)
    out: dict[str, tuple[str, str]] = {}
    for k, f in full.items():
        entry = entries[k]
        last = f.rpartition("/")[2]
        if (entry.dtype_name not in R._FLOAT or R.SLOT_RE.match(last)
                or last in R._STEP_NAMES or last in R._BN_NAMES
                or R.UNIQUIFIED.sub("", last) in (R.DEFAULT_EMA_NAME, "biased", "local_step")):
            continue
        head = f
        while "/" in head:
            head = head.rpartition("/")[0]
            if head in by_name:
                break
        else:
            continue
        fitting = [v for v in by_name[head] if v != k and entries[v].dtype == entry.dtype
                   and entries[v].shape == entry.shape]
        if fitting and all(_root(v) == _root(k) for v in fitting):
            out[k] = (fitting[0] if len(fitting) == 1 else "", f[len(head) + 1:])
    return out


def stated_held_shadows(ckpt, variables: dict, ema_name: str | None) -> dict:
    """``variables`` (key -> :class:`~ckpt_tools.variable.Variable`) with each variable
    :func:`model_held` reads as a model's own (``<v>/<ema_name>``, ``_N`` aside) read as
    ``v``'s average where ``ema_name`` is stated (``--ema-name``): the user's statement, as
    for any EMA name a TF2 file does not record; unchanged otherwise."""
    if not ema_name or "," in ema_name or ckpt.objects is None:
        return variables
    found = {k: v for k, (v, name) in model_held(ckpt.entries(), ckpt.objects).items()
             if v and ema_name in (name, R.UNIQUIFIED.sub("", name)) and v in variables
             and k in variables and variables[k].role == R.WEIGHT}
    out = dict(variables)
    for k, v in found.items():
        out[k] = replace(variables[k], role=R.EMA, ema_of=v, ema_style="object", ema=None,
                         ema_candidates=())
        out[v] = replace(out[v], ema=k)
    return out


def held_hint(ckpt, variables: dict, missing) -> str | None:
    """Where weights lack an average and a variable :func:`model_held` reads as the model's
    own is named like one of theirs (a module keeping its EMA's averages inside itself, or a
    sub-module named like a weight): the hint saying so and naming ``--ema-name`` only as the
    user's statement; else ``None``."""
    if ckpt.objects is None or not missing:
        return None
    lacking = set(missing)
    found = [(k, v, name) for k, (v, name) in sorted(model_held(ckpt.entries(),
                                                                ckpt.objects).items())
             if v in lacking and getattr(variables.get(k), "role", None) == R.WEIGHT]
    if not found:
        return None

    def show(key: str) -> str:
        return getattr(variables.get(key), "path", None) or key

    k, v, name = found[0]
    base = R.UNIQUIFIED.sub("", name)
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (f"{show(k)}{more} is named like {show(v)}'s average under an EMA named {base!r} "
            f"({ckpt.objects.full_names[k]}), but the model tracks it as its own variable, so "
            f"it is read as a weight: pass --ema-name {base} (ema_name={base!r} in Python) only "
            "if that is the name you gave an ExponentialMovingAverage")
