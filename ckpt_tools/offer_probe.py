"""Whether an option a refusal would offer works: a refusal names the option that decides, and
that option must then be accepted. Three places guessed it their own way (the TF1
``--ema-name a,b`` offer, the raw-valued names of a training ``Saver(ema.variables_to_restore())``,
TF's numbered ``fast_1``) and kept offering options the map refuses: ``--ema-name fast_1`` where
it is refused identically, ``--ema-name slow`` without the ``--allow-missing`` it needs, a
loop of ``--ema-name slow --exclude ...`` / ``--ema-name fast --exclude ...`` (review-21-attack-r60
F5, F7, F9, F11, F12). :func:`works` runs the export plan the offered option would run, on the
same open checkpoint, and says whether it is accepted; a refusal offers only such options, or
says that none decides.

A probe's own refusals build their hints too; those hints are never shown, so inside a probe
:func:`works` answers ``False`` at once (no probe runs inside another).
"""

from __future__ import annotations

import contextvars

from .checkpoint import Checkpoint

_PROBING: contextvars.ContextVar[bool] = contextvars.ContextVar("ckpt_tools_offer_probe",
                                                                default=False)


def works(ckpt: Checkpoint, ema_name: str | None = None, exclude: tuple[str, ...] = (),
          allow_missing: bool = False, raw: bool = False) -> bool:
    """Whether ``ckpt export`` of ``ckpt`` (as opened: with or without its ``.meta``) with
    ``--ema-name ema_name``, each ``--exclude`` glob of ``exclude`` and ``--allow-missing``
    (or ``--raw``) is accepted: :func:`~ckpt_tools.export_plan.plan_export`, the plan the
    command runs, raises no :class:`~ckpt_tools.errors.CheckpointError` and exports some
    average (some tensor, ``raw``).

    Returns:
        `bool`: ``False`` also inside another probe (its hints are never shown).
    """
    if _PROBING.get():
        return False
    import warnings

    # export_plan imports the map, which imports the modules that offer options
    from .errors import CheckpointError
    from .export_plan import plan_export

    token = _PROBING.set(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a probe says nothing
            if raw:
                return bool(plan_export(ckpt, ema=False)[0])
            # an export of no average (every averaged variable excluded) is no offer
            return bool(plan_export(ckpt, ema=True, exclude=list(exclude) or None,
                                    ema_name=ema_name, allow_missing=allow_missing)[1])
    except CheckpointError:
        return False
    finally:
        _PROBING.reset(token)


def option_text(ema_name: str | None = None, exclude: tuple[str, ...] = (),
                allow_missing: bool = False) -> str:
    """The command-line options of an offer, exactly as they are to be typed:
    ``--ema-name slow --exclude 'b' --allow-missing``."""
    return " ".join([*([f"--ema-name {ema_name}"] if ema_name else []),
                     *(f"--exclude {glob!r}" for glob in exclude),
                     *(["--allow-missing"] if allow_missing else [])])


def python_text(ema_name: str | None = None, exclude: tuple[str, ...] = (),
                allow_missing: bool = False) -> str:
    """The Python keywords of an offer: ``ema_name='slow', exclude=['b'], allow_missing=True``."""
    return ", ".join([*([f"ema_name={ema_name!r}"] if ema_name else []),
                      *([f"exclude={list(exclude)!r}"] if exclude else []),
                      *(["allow_missing=True"] if allow_missing else [])])


def working(ckpt: Checkpoint, offers) -> list[tuple[str | None, tuple[str, ...], bool]]:
    """The offers among ``offers`` (``(ema_name, exclude, allow_missing)``, in the order to
    prefer them; repeats dropped) that :func:`works` accepts."""
    return [o for o in dict.fromkeys(offers) if works(ckpt, *o)]
