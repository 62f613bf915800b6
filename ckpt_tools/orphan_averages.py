"""Averages of variables a TF2 checkpoint does not store: said, never dropped in silence.

``tf.train.Checkpoint(model=m, ema_vars=[ema.average(v) for v in m.trainable_variables])``
saves every average, but only the weights the object graph tracks. A Keras 3 model's layers
kept in a plain Python list (``self.blocks = [Dense(4), ...]``) are not tracked by TF's object
graph, so their weights are not in the checkpoint while their averages are, named by TF after
the variable (``net/blk0/kernel/ExponentialMovingAverage``). Such an average pairs with nothing
stored, so an export holds fewer weights than the model has: callers say so, naming them.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint


def orphan_averages(ckpt: Checkpoint, variables) -> dict[str, str]:
    """Returns average key -> the variable name TensorFlow recorded for it (its ``full_name``
    without the last part, the EMA name), for each TF2 average (not a scalar loss average)
    that pairs with no variable and may belong to none the checkpoint stores; ``{}`` for
    files without an object graph.

    Args:
        ckpt: the open checkpoint.
        variables: its variables by key (``{v.name: v for v in ckpt.variables_unwarned()}``).
    """
    if ckpt.objects is None:
        return {}
    full = ckpt.objects.full_names
    stored = {full[k] for k, v in variables.items() if k in full and v.role != R.EMA}
    out = {}
    for key, v in variables.items():
        name = full.get(key) or ""
        if v.role != R.EMA or v.ema_of or v.ema_candidates or "/" not in name:
            continue
        base = name.rpartition("/")[0]
        if base not in stored:
            out[key] = base
    return out


def orphan_warning(orphans: dict[str, str], result: str) -> str | None:
    """The warning for :func:`orphan_averages`' result, saying ``result`` (what the output
    lacks because of them), or ``None`` when there is none."""
    if not orphans:
        return None
    names = sorted(set(orphans.values()))
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return (f"{len(orphans)} average(s) belong to variables this checkpoint does not store "
            f"({shown}: the names TensorFlow gave them), so {result}: the model's object "
            "graph did not track them (a Keras 3 model's layers kept in a plain Python list "
            "are not tracked); save a checkpoint that holds those weights, or read their "
            f"averages by key ({', '.join(sorted(orphans)[:2])}"
            f"{', ...' if len(orphans) > 2 else ''})")


def orphan_warnings(ckpt: Checkpoint, variables, result: str, keep=None) -> list[str]:
    """The warnings for :func:`orphan_averages` (those ``keep(key, name)`` keeps, all without
    it), saying ``result`` (what the output lacks because of them). An average whose
    variable's name is that of a tensor the checkpoint stores as an average is no average of
    a variable the checkpoint lacks: an EMA applied to another EMA's averages
    (``ema2.apply([ema.average(v) ...])`` writes ``net/w/ExponentialMovingAverage/
    ExponentialMovingAverage`` beside ``net/w/ExponentialMovingAverage``), said so
    (review-17-attack-r37 F7)."""
    found = {k: n for k, n in orphan_averages(ckpt, variables).items()
             if keep is None or keep(k, n)}
    full = ckpt.objects.full_names if ckpt.objects is not None else {}
    averages = {full[k]: k for k, v in variables.items() if k in full and v.role == R.EMA}
    twice = {k: n for k, n in found.items() if n in averages}
    out = [orphan_warning({k: n for k, n in found.items() if k not in twice}, result)]
    if twice:
        names = sorted(set(twice.values()))
        shown = ", ".join(f"{n} ({_path(averages[n])})" for n in names[:4]) + (
            f" and {len(names) - 4} more" if len(names) > 4 else "")
        out.append(f"{len(twice)} average(s) are averages of tensors this checkpoint stores as "
                   f"averages ({shown}): an ExponentialMovingAverage applied to another's "
                   "averages (an EMA of an EMA, as ema2.apply([ema.average(v) ...]) writes), "
                   "no weight's own average, so no weight takes them; read them by key "
                   f"({', '.join(sorted(twice)[:2])}{', ...' if len(twice) > 2 else ''})")
    return [w for w in out if w]


def _path(key: str) -> str:
    return key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")
