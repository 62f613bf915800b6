"""A bare tf_keras (Keras 2) ``.weights.h5`` read with ``use_ema``: the optimizer is stated.

tf_keras' ``save_weights`` records no optimizer name at all (the h5 attributes are empty),
only ``iteration`` and the optimizer's variables by position. Their count alone cannot tell a
built-in from a custom class that creates slots of its own before ``super().build()``: a
Lookahead-SGD's ``1 + 3N`` (slow weights, averages, ``m``) is Adam with averages' ``1 + N + 2N``,
and a Lookahead-Adam's slow weights sit where Adam keeps its averages. Values cannot tell an
average from a slow weight either. So the averages are read only where the caller states the
class and its slot-making options (``--optimizer CLASS[:OPTIONS]``, Python ``optimizer=``),
and the file's variables must then follow that class' tf_keras layout exactly (count and
shapes); anything else is exit 6 naming ``--optimizer``.
"""

from __future__ import annotations

from ...wording import counted

# The way out every refusal of an unproven Keras optimizer layout ends with: the saves that
# record the layout, and the raw weights (keras_layout_values.refuse_unproven_layout too).
RECORDED_SAVES = ("or save a tf.train.Checkpoint(model=model, optimizer=optimizer) or "
                  "model.save('x.keras'), which record it; the raw weights are usable as they "
                  "are (ckpt export --raw writes them to one file)")

WHY = ("a tf_keras .weights.h5 records no optimizer name (only iteration and its variables by "
       "position), and the count alone cannot tell a built-in from a custom class that creates "
       "slots of its own before super().build() (a Lookahead-SGD's 1+3N variables are "
       "Adam with use_ema's 1+N+2N; a Lookahead-Adam's slow weights sit where Adam keeps its "
       "averages), nor can their values")


def classes() -> str:
    """The tf_keras classes ``--optimizer`` takes and their options, for the messages, from
    :data:`~.stated_optimizer.TF_KERAS` (each a class of :mod:`.tf_keras`' slot table)."""
    from .stated_optimizer import TF_KERAS

    def shown(cls: str) -> str:
        return cls.replace("_", "")

    return (", ".join(map(shown, TF_KERAS)) + " (options: " + ", ".join(
        f"{shown(c)} {', '.join(opts)}" for c, opts in TF_KERAS.items() if opts) + ")")


def unstated(layout) -> bool:
    """Whether ``layout`` is a bare tf_keras ``.weights.h5`` read with EMA copies and no
    ``--optimizer`` statement (refused: :func:`refuse_unstated`)."""
    return (layout is not None and layout.tf_keras and layout.optimizer_config is None
            and bool(layout.use_ema) and layout.stated_optimizer is None)


def unstated_error(path: str, layout):
    """The exit 6 (``UnprovenPairingError`` naming ``--optimizer``) of :func:`unstated`."""
    from ...errors import UnprovenPairingError

    return UnprovenPairingError(
        f"{path}: the optimizer variables read as EMA copies are not proven averages: {WHY}; "
        "what decides is the optimizer the run used: state it with --optimizer "
        f"CLASS[:OPTIONS] (Python: optimizer=\"adam\"; tf_keras classes: {classes()}), if "
        "it was that tf_keras built-in with exactly those options on (others default); a "
        "custom class decides nothing (--use-ema, --trainable, --not-swapped and --strict "
        f"state neither); {RECORDED_SAVES}",
        "--optimizer", {k: (v,) if v else () for k, v in layout.averages.items()})


def refuse_unstated(ckpt) -> None:
    """Refuses (exit 6) a bare tf_keras ``.weights.h5`` read with EMA copies where no
    ``--optimizer`` states its class (module docstring)."""
    layout = getattr(ckpt.reader, "keras", None)
    if unstated(layout):
        raise unstated_error(ckpt.path, layout)


def sizes(stated) -> set[tuple[int, ...]] | None:
    """The slot groups' sizes of the stated class (``tf_keras.fitting_use_ema``), or ``None``
    (every built-in's) where nothing is stated."""
    if stated is None:
        return None
    from .stated_optimizer import TF_KERAS_SLOTS, config
    from .tf_keras import slot_groups

    slots = slot_groups(TF_KERAS_SLOTS.get(stated[0], stated[0]), config(stated))
    return {tuple(len(g) for g in slots)}


def refuse_count(lay, rest: int, weights: int, per: int, why: str = "") -> None:
    """``--optimizer`` states a tf_keras class whose layout with use_ema (``iteration``, one
    average per weight, ``per`` slots each) does not give the file's variables: exit 6."""
    from ...errors import UnprovenPairingError
    from .stated_optimizer import shown

    gives = lay.ema_offset + weights * (1 + per)
    if gives == lay.ema_offset + rest and not why:
        why = ("as many, but their shapes do not follow its build order for those weights: "
               "one average per weight, then each weight's slots in turn")
    raise UnprovenPairingError(
        f"--optimizer {shown(lay.stated_optimizer)} was stated: that tf_keras class with those "
        f"options (others default) and use_ema=True gives {gives} optimizer variables for the "
        f"{weights} weights it was built with (iteration, one average and {counted(per, 'slot')} "
        "each, "
        f"in its build order), the file has {lay.ema_offset + rest}"
        + (f" ({why})" if why else "")
        + ": state the class and options the run used (a custom optimizer, e.g. one that "
        "creates slow weights before super().build(): no option decides)"
        + ("" if lay.trainable_stated else "; if layers were frozen when it was built, or "
           "it averaged weights the file does not save (a layer held in a tf.Module "
           "attribute), --trainable with the weights it was built with, or "
           "apply_keras_ema(model, path) with the live model"),
        "--optimizer")


__all__ = ["RECORDED_SAVES", "classes", "refuse_count", "refuse_unstated", "sizes", "unstated",
           "unstated_error"]
