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
