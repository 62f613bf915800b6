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
from .offer_probe import option_text, python_text, working
from .raw_named_said import IF_TRAINED
from .raw_shadows import raw_named_keys
from .raw_stated import raw_offer
from .saved_keys import held_variables
from .wording import agreeing, counted


def without_raw_names(ckpt: Checkpoint, variables, suffix: dict[str, str],
                      refusal: UnprovenPairingError,
                      ema_name: str | None = None) -> UnprovenPairingError | None:
    """Returns the refusal to raise instead of ``refusal`` (several averages, ``--ema-name``
    decides) where, leaving out the keys :func:`~ckpt_tools.raw_shadows.raw_named_keys`
    proves raw, each of its variables has one average left: it offers only options the map
    then accepts (:func:`~ckpt_tools.offer_probe.works`): a name whose averages are left,
    with ``--exclude`` for the variables whose only keys named as averages hold raw values
    or with ``--allow-missing``, or the raw-valued name with ``--exclude`` for the variables
    its keys hold raw; where none is accepted it says no option decides (review-21-attack-r60
    F9, F12). ``None`` where that is not so (the refusal stands as it is).

    Args:
        variables: key -> :class:`~ckpt_tools.variable.Variable`.
        suffix: average key -> the last part of its recorded name.
        ema_name: the stated ``--ema-name``, tried first.
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

    names = sorted({name_of(cs[0]) for cs in left.values()})
    k, t = next((k, t) for k, t in sorted(raw.items()) if t in left)
    raw_names = sorted({name_of(k) for k in raw if raw[k] in left})

    def averaged(name: str) -> set[str]:
        return {v.ema_of for k, v in variables.items() if v.role == R.EMA and v.ema_of
                and k not in raw and name_of(k) == name}

    def lacking(name: str) -> tuple[str, ...]:  # raw-valued keys are all they have
        return tuple(sorted(set(raw.values()) - averaged(name)))

    tried = [ema_name] if ema_name and ema_name not in raw_names else []
    offers = [o for n in dict.fromkeys([*tried, *names])
              for o in ((n, lacking(n), False), (n, (), True))]
    offers += [(r, tuple(sorted({raw[a] for a in raw if name_of(a) == r})), False)
               for r in raw_names]
    good = working(ckpt, offers)
    said = (f"{ckpt.path}: {counted(len(left), 'variable')} {agreeing(len(left), 'has', 'have')} "
            "keys under the EMA names "
            f"{', '.join(raw_names)} and {', '.join(names)}, but the .meta's saver wrote "
            f"every {' and '.join(raw_names)} key from its variable itself (e.g. {k} from {t}, "
            f"as a Saver built from ema.variables_to_restore() does), so those keys {IF_TRAINED} "
            "(an evaluation graph that restored the averages with that Saver and saved again "
            "writes the averages the same way, which the file cannot show) and only "
            + (f"{names[0]}'s are proven averages" if len(names) == 1 else
               f"those named {', '.join(names)} are proven averages"))
    if len(names) == 1 and good and good[0] == (names[0], lacking(names[0]), False):
        name, out = names[0], lacking(names[0])
        shown = " ".join(f"--exclude {v!r}" for v in out[:4]) + (
            " ..." if len(out) > 4 else "")
        exclude = (f" {shown} (Python: ema_name={name!r}, exclude=[...]): "
                   f"{', '.join(out[:3])}{' ...' if len(out) > 3 else ''} have no average of "
                   f"{name}, only keys that Saver wrote from them, which --exclude leaves out "
                   "(--allow-missing does not: they are stored only under an average's name)"
                   if out else "")
        return UnprovenPairingError(
            f"{said}: pass --ema-name {name}" + (exclude or f" (Python: ema_name={name!r})"),
            "--ema-name", refusal.undecided, refusal.raw)
    if good:
        return UnprovenPairingError(
            f"{said}: pass " + " or ".join(f"{option_text(*o)} (Python: {python_text(*o)})"
                                           for o in good[:3]),
            "--ema-name", refusal.undecided, refusal.raw)
    return UnprovenPairingError(
        f"{said}; no --ema-name of them, with --exclude or --allow-missing, makes a map that "
        "is accepted here, so no option decides"
        + (f"; ckpt export {raw} writes the raw weights" if (raw := raw_offer(ckpt)) else ""),
        None, refusal.undecided, refusal.raw)


def excluding_offers(ckpt: Checkpoint, names) -> list[tuple[str, tuple[str, ...], bool]]:
    """The ``--ema-name n --exclude ...`` offers, for each of ``names``, that leave out the
    variables whose only keys a Saver of ``ema.variables_to_restore()`` wrote from them
    (:func:`~ckpt_tools.raw_shadows.raw_named_keys`: raw values if a training graph saved
    them) and that ``n``'s shadows average nowhere in the file, each accepted by the export
    plan (:func:`~ckpt_tools.offer_probe.working`): a renamed Saver's (``{"model/" + k: v}``)
    ``--ema-name slow`` is refused for them as without the prefix, and the several-objects
    refusal named no option that decides (s28a).

    Returns:
        `list`: ``(ema_name, exclude, False)`` offers (:func:`option_text` types each);
        ``[]`` where no key is such or none is accepted.
    """
    raw = raw_named_keys(ckpt)
    if not raw:
        return []
    held = held_variables(ckpt) or {}
    stored = ckpt.entries()
    offers = []
    for name in names:
        averaged = {h[: -len(name) - 1] for k, h in held.items()
                    if h and k in stored and h.endswith("/" + name)}
        lacking = tuple(sorted({t for k, t in raw.items()
                                if held.get(k) not in averaged}))
        if lacking:
            offers.append((name, lacking, False))
    return working(ckpt, offers)
