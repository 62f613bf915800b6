"""The "several averages, pass --ema-name" refusal where some of those "averages" are keys the
``.meta``'s save op proves hold their variables' raw values (review-21-user-u23 F2).

A training ``Saver(ema.variables_to_restore())`` of one EMA object beside a second object
(``slow``) writes each raw ``w`` under ``w/ExponentialMovingAverage`` and ``slow``'s real
averages under their own names. By the names each weight has two averages, and the refusal
offered ``--ema-name ExponentialMovingAverage``, "the object that averaged every one of these
variables", whose keys hold raw values: following it was refused again, and the option that
works (``--ema-name slow``, leaving out with ``--exclude`` the variables only the raw-valued
keys hold) was named nowhere.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError
from .raw_shadows import raw_named_keys


def without_raw_names(ckpt: Checkpoint, variables, suffix: dict[str, str],
                      refusal: UnprovenPairingError) -> UnprovenPairingError | None:
    """Returns the refusal to raise instead of ``refusal`` (several averages, ``--ema-name``
    decides) where, leaving out the keys :func:`~ckpt_tools.raw_shadows.raw_named_keys`
    proves raw, each of its variables has one average left and all of them one EMA name:
    it offers only that name, with ``--exclude`` for the variables whose only keys named as
    averages hold raw values. ``None`` where that is not so (the refusal stands as it is).

    Args:
        variables: key -> :class:`~ckpt_tools.variable.Variable`.
        suffix: average key -> the last part of its recorded name.
    """
    if refusal.option != "--ema-name" or not refusal.undecided:
        return None
    raw = raw_named_keys(ckpt)
    if not raw:
        return None
    left = {t: [c for c in cs if c not in raw] for t, cs in refusal.undecided.items()}
    if any(t in raw or len(cs) != 1 for t, cs in left.items()):
        return None  # an average open to several variables, or still two: not this case

    def name_of(key: str) -> str:
        return suffix.get(key) or key.rpartition("/")[2]

    names = {name_of(cs[0]) for cs in left.values()}
    if len(names) != 1:
        return None
    name = names.pop()
    averaged = {v.ema_of for k, v in variables.items() if v.role == R.EMA and v.ema_of
                and k not in raw and name_of(k) == name}
    lacking = sorted(set(raw.values()) - averaged)  # raw-valued keys are all they have
    k, t = next((k, t) for k, t in sorted(raw.items()) if t in left)
    raw_names = sorted({name_of(k) for k in raw if raw[k] in left})
    shown = " ".join(f"--exclude {v!r}" for v in lacking[:4]) + (
        " ..." if len(lacking) > 4 else "")
    exclude = (f" {shown} (Python: ema_name={name!r}, exclude=[...]): {', '.join(lacking[:3])}"
               f"{' ...' if len(lacking) > 3 else ''} have no average of {name}, only keys "
               "holding their raw values, which --exclude leaves out (--allow-missing does "
               "not: their raw values lie under an average's name)" if lacking else "")
    return UnprovenPairingError(
        f"{ckpt.path}: {len(left)} variable(s) have keys under the EMA names "
        f"{', '.join(raw_names)} and {name}, but the .meta's saver wrote every "
        f"{' and '.join(raw_names)} key from its variable itself (e.g. {k} from {t}, as a "
        "Saver built from ema.variables_to_restore() does), so those keys hold raw values "
        f"and only {name}'s are averages: pass --ema-name {name}"
        + (exclude or f" (Python: ema_name={name!r})"),
        "--ema-name", refusal.undecided, refusal.raw)
