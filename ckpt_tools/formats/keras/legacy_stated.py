"""``--optimizer CLASS[:OPTIONS]`` on a legacy ``.h5`` (Keras 3 or tf_keras ``model.save``).

A legacy ``.h5`` names each optimizer variable after its weight (``my_adam/dense_kernel_average``,
``MyAdam/average/dense/kernel``) and records the optimizer's class in ``training_config``. Where
that class is the user's (``my>MyAdam``), a subclass may keep per-weight variables of its own
named as Keras names its EMA copies, so the names do not prove the copies
(review-15-attack-r30 F2b). The statement ``--optimizer adam`` says the class' variables follow
that built-in's build order (a registered trivial subclass adds none: review-15-attack-r31
F2): the file's optimizer variables must then be exactly that class' with ``use_ema=True``,
count and shapes in build order, the averages first, each named after one weight. A
statement that contradicts a built-in class the file records is refused; one that agrees is
noted.
"""

from __future__ import annotations

from ...errors import EmaError, UnprovenPairingError


def check_builtin(lay, stated) -> None:
    """A legacy ``.h5`` whose ``training_config`` records a Keras built-in: a statement that
    agrees is noted, one that contradicts it is refused (``EmaError``, exit 6)."""
    from .stated_optimizer import recorded, shown

    if not lay.optimizer:  # no training_config: nothing recorded to agree with
        lay.notes.append(f"--optimizer {shown(stated)} is not used for a legacy .h5 without a "
                         "training_config: its optimizer variables are named")
        return
    mine = (lay.optimizer, recorded(lay.optimizer, lay.optimizer_config or {}))
    if mine != stated:
        raise EmaError(f"--optimizer {shown(stated)} was stated, but training_config records "
                       f"the optimizer as {shown(mine)}: omit --optimizer (the file records "
                       "it)")
    lay.notes.append(f"--optimizer {shown(stated)} agrees with training_config, which records "
                     "the optimizer: the record decides")


def check_custom(lay, entries, stated, custom: str, tf_keras: bool) -> None:
    """Holds a custom class' optimizer variables to the stated built-in's build order with
    ``use_ema=True`` (module docstring), and records the statement on ``lay``.

    Raises:
        UnprovenPairingError: (exit 6, naming ``--optimizer``) the variables are not exactly
            that layout, or the class' recorded options contradict the stated ones.
    """
    from .optimizer_slots import expand, slot_groups, spec
    from .stated_optimizer import GA, TF_KERAS, TF_KERAS_SLOTS, config, shown
    from .stated_optimizer import contradicted as contradicted_options

    cls, opts = stated
    off = contradicted_options(stated, lay.optimizer_config or {})
    if off:
        raise UnprovenPairingError(
            f"--optimizer {shown(stated)} was stated, but the training_config config of "
            f"{custom} has {off}: state the options the run used (--optimizer CLASS[:OPTIONS])",
            "--optimizer")
    if tf_keras:
        from .tf_keras import slot_groups as tfk_groups

        groups = ([("i", tuple(g)) for g in tfk_groups(TF_KERAS_SLOTS.get(cls, cls),
                                                        config(stated))]
                  if cls in TF_KERAS and GA not in opts else None)
    else:
        groups = slot_groups(cls, config(stated))
    said = (f"--optimizer {shown(stated)} was stated: that "
            f"{'tf_keras ' if tf_keras else ''}class with those options (others default) and "
            "use_ema=True ")
    if groups is None:
        raise UnprovenPairingError(
            said + "has slots ckpt does not model in a legacy .h5"
            + (" (tf_keras has no gradient accumulation)" if tf_keras and GA in opts else "")
            + ": state the Keras built-in whose build order the class follows", "--optimizer")
    per_weight = [k for k in lay.optimizer_vars if k not in (lay.iteration, lay.learning_rate)]
    averages = list(lay.averages)
    tspecs = [spec(entries[k]) for k in averages]
    want = [s for s, *_ in expand(True, GA in opts, groups, tspecs)]
    got = [spec(entries[k]) for k in per_weight]
    if per_weight[:len(averages)] != averages or got != want:
        why = (f"gives {len(want)} variables after iteration/learning_rate for the "
               f"{len(averages)} weights its EMA copies name, the file has {len(got)}"
               if len(got) != len(want) else
               f"gives as many variables as the file has ({len(got)}), but the file's are not "
               "in that class' build order (its EMA copies first, then its slots)")
        raise UnprovenPairingError(
            said + why + f": {custom}'s variables do not follow that class' build order "
            "(a subclass keeping variables of its own); state the class and options the run "
            "used (a custom optimizer whose layout is no built-in's: no option decides)",
            "--optimizer")
    lay.named_optimizer = custom
    lay.optimizer = cls
    lay.stated_optimizer = stated


__all__ = ["check_builtin", "check_custom"]
