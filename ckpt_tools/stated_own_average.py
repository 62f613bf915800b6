"""A stated TF2 EMA name that reads a variable with its own default-named average as another
variable's average (review-17-attack-r37 F7).

:mod:`~ckpt_tools.tf2_twins` reads a stored ``<v>/<x>`` whose own
``<v>/<x>/ExponentialMovingAverage`` is stored as a variable (trainable deltas ``k0/delta``,
each averaged by a default-named EMA: r35 F0). An EMA named ``x`` over ``v``, with a
default-named EMA applied to its averages (an EMA of an EMA), writes the same names. Under
``--ema-name x`` the file does not tell the two apart: refused naming both readings, never
"none of its averages is kept under 'x'" with a way out that loops back.
"""

from __future__ import annotations

from . import roles as R
from .errors import UnprovenPairingError
from .tf2_twins import OWN_AVERAGE, ckpt_twins


def refuse_own_average_stated(ckpt, variables: dict, ema_name: str | None) -> None:
    """Refuses ``ema_name`` (stated: ``--ema-name``, names separated by commas) where it
    names the ``x`` of a stored ``<v>/<x>`` that :mod:`~ckpt_tools.tf2_twins` reads as a
    variable because its own default-named average is stored.

    Raises:
        UnprovenPairingError: naming both readings and what each gives (exit 6).
    """
    if not ema_name or ckpt.objects is None:
        return
    said = [n for n in ema_name.split(",") if n]
    read = ckpt_twins(ckpt)
    hits = sorted((k, t, n) for k, t in read.items() for n in said
                  if t.evidence == OWN_AVERAGE and t.heads and t.named(n) and k in variables)
    if not hits:
        return
    k, t, n = hits[0]
    full = ckpt.objects.full_names
    own = sorted(a for a, f in full.items() if f.startswith(full[k] + "/")
                 and R.UNIQUIFIED.sub("", f.rpartition("/")[2]) == R.DEFAULT_EMA_NAME)

    def show(key: str) -> str:
        return getattr(variables.get(key), "path", None) or key

    more = f" (and {len(hits) - 1} more)" if len(hits) > 1 else ""
    whose = " or ".join(show(h) for h in t.heads[:2])
    its = f" {show(own[0])}" if own else ""
    raise UnprovenPairingError(
        f"{ckpt.path}: --ema-name {n}: {show(k)} ({full[k]}){more} reads two ways: {whose}'s "
        f"average under an ExponentialMovingAverage named {n!r}, whose own default-named "
        f"average{its} an ExponentialMovingAverage applied to those averages wrote (an EMA "
        "of an EMA), or a variable of the model's own named like one (a trainable delta) "
        "that a default-named ExponentialMovingAverage averaged; the file does not tell "
        "which, so no --ema-name reads it as an average while its own average is stored: "
        f"ckpt export --raw writes the stored tensors as they are ({show(k)} under its own "
        "key)", "--ema-name", {k: tuple(t.heads)})
