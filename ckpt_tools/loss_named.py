"""TF1 averages read as a loss's by their name alone, under ``--averages-only``
(review-13-attack-r22 F3).

Without a ``.meta``, an average whose variable is not stored is read as a loss tensor's
(``loss_average``, never exported) when its head names a loss (``total_loss/...``). In a
checkpoint of the averages alone (``Saver({ema.average_name(v): ema.average(v)})``) that is
also a trained variable's (a multi-task ``multitask/loss_log_var``): ``export --averages-only``
dropped it, exit 0. The caller's ``--averages-only`` states that the keys named as averages
hold variables' averages; the name does not say otherwise, so such a key is read as its head's
average too, and the stated-averages note names it. Proven loss averages stay: a zero-debiased
one (``<key>/biased`` and ``<key>/local_step`` beside it: TF zero-debiases tensors only) and
those of an EMA named ``avg`` (the loss-average convention).
"""

from __future__ import annotations

from . import roles as R


def stated_loss_named(entries, info: dict, meta, objects, averages_only: bool) -> dict:
    """New roles (key -> :class:`~ckpt_tools.roles.RoleInfo`) for the loss-named averages
    ``averages_only`` reads as their head's average; ``{}`` with a ``.meta`` (it proves
    which are tensors'), in a TF2 checkpoint, or without the statement."""
    if not averages_only or meta is not None or objects is not None:
        return {}
    out = {}
    for key, ri in info.items():
        head, _, last = key.rpartition("/")
        if (ri.role not in (R.LOSS_AVERAGE, R.TENSOR_AVERAGE) or not head or head in entries
                or last == "avg" or R.zero_debias_pair(f"{key}/biased", entries)):
            continue
        out[key] = R.RoleInfo(R.EMA, ema_of=head, ema_style="tf1")
    return out


def loss_named(keys) -> list[str]:
    """The keys of ``keys`` whose head names a loss (said in the stated-averages note)."""
    return [k for k in keys if "loss" in k.rpartition("/")[0].lower()]


def loss_named_missing_hint(ckpt, variables, missing) -> str | None:
    """Without a ``.meta``: the hint for weights "missing" an average whose head names a loss
    and is not stored (``total_loss/lossavg``: a loss tensor's average under a custom EMA name
    reads by its key as a weight), or ``None``. ``--allow-missing`` would export it raw as a
    weight; ``--exclude`` leaves it out."""
    if ckpt.objects is not None or ckpt.meta is not None:
        return None
    found = [k for k in loss_named(missing) if k.rpartition("/")[0] not in variables]
    if not found:
        return None
    return (f"{', '.join(found[:3])}{' ...' if len(found) > 3 else ''} may be a loss tensor's "
            "average under a custom EMA name (ema.apply([loss])), which the keys alone cannot "
            "tell from a weight (the training .meta can): keep the .meta beside the checkpoint, "
            f"or pass --exclude '{found[0]}' to leave it out (--allow-missing would export it "
            "raw, as a weight)")
