"""The ``--optimizer CLASS[:OPTION[,OPTION]]`` statement (Python: ``optimizer="adam:amsgrad"``).

A bare Keras 3 ``.weights.h5`` records its optimizer's variables only by position and its
class only by the optimizer's ``name`` attribute (``gen_opt`` for a GAN's generator; a custom
class may be named ``sgd``). Values cannot tell an EMA from a Lookahead slow weight or an
amsgrad slot (review-14-attack-r28 F1, F4), so where the count does not fit a built-in's
default layout under its default name, the class and its slot-making options are stated:
the optimizer was the Keras built-in CLASS with exactly these options on (others default).
The layout is then that class' build order, and the count must match it exactly.
"""

from __future__ import annotations

from ...errors import OptionError

# Keras built-ins (snake_case, as Keras names their variables' paths) -> the options that
# add per-weight variables (gradient_accumulation: any class).
OPTIONS: dict[str, tuple[str, ...]] = {
    "sgd": ("momentum",), "adam": ("amsgrad",), "adam_w": ("amsgrad",), "nadam": (),
    "adamax": (), "adagrad": (), "adadelta": (), "ftrl": (), "lamb": (), "lion": (),
    "adafactor": (), "rm_sprop": ("momentum", "centered"), "schedule_free_adam_w": (),
    # Muon: ckpt does not model its slots (one or two per weight, by rank and exclusions);
    # stated, its averages are read as the first block, one per weight it was built with
    # (--trainable), which is all the statement proves (keras_layout_values).
    "muon": (),
}
# tf_keras (Keras 2) built-ins a bare tf_keras .weights.h5 may be stated as (tf_keras.py
# _SLOTS): the options that change their slots (tf_keras SGD makes "m" with or without
# momentum; no gradient accumulation).
TF_KERAS: dict[str, tuple[str, ...]] = {
    "adam": ("amsgrad",), "adam_w": ("amsgrad",), "nadam": (), "adamax": (),
    "sgd": ("momentum",), "lion": (), "adagrad": (), "ftrl": (), "adadelta": (),
    "rm_sprop": ("momentum", "centered"),
}
TF_KERAS_SLOTS = {"rm_sprop": "rmsprop"}  # tf_keras.py's _SLOTS key
_ALIASES = {"adamw": "adam_w", "rmsprop": "rm_sprop", "schedulefreeadamw": "schedule_free_adam_w"}
GA = "gradient_accumulation"


def parse(text: str | None) -> tuple[str, frozenset[str]] | None:
    """``"adam:amsgrad"`` -> ``("adam", {"amsgrad"})``; ``None`` -> ``None``.

    Raises:
        OptionError: an unknown class or an option the class does not have (exit 2),
            listing the valid ones.
    """
    if text is None:
        return None
    if isinstance(text, tuple):  # already parsed (a reopened checkpoint)
        return text
    cls, _, opts = str(text).strip().partition(":")
    key = cls.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in OPTIONS:
        from .optimizer_slots import shown_name

        raise OptionError(
            f"--optimizer {text!r} (Python: optimizer=): {cls!r} is not a Keras built-in "
            "whose slots ckpt knows; valid classes: "
            + ", ".join(shown_name(k).lower() for k in OPTIONS))
    options = frozenset(o.strip().lower() for o in opts.split(",") if o.strip())
    valid = (*OPTIONS[key], GA)
    bad = sorted(options - set(valid))
    if bad:
        raise OptionError(
            f"--optimizer {text!r} (Python: optimizer=): {', '.join(bad)} is not an option "
            f"of {cls} that adds variables; valid: {', '.join(valid)}")
    return key, options


def shown(stated: tuple[str, frozenset[str]]) -> str:
    """``("adam", {"amsgrad"})`` -> ``"adam:amsgrad"`` (as stated on the command line)."""
    from .optimizer_slots import shown_name

    cls, opts = stated
    name = shown_name(cls).lower()
    return name + (":" + ",".join(sorted(opts)) if opts else "")


def config(stated: tuple[str, frozenset[str]]) -> dict:
    """The hyperparameters the statement turns on, as an optimizer config would hold them."""
    return {o: (0.9 if o == "momentum" else True) for o in stated[1] if o != GA}


def recorded(cls: str, cfg: dict) -> frozenset[str]:
    """The slot-making options an optimizer config records on."""
    on = {o for o in OPTIONS.get(cls, ()) if cfg.get(o)}
    return frozenset(on | ({GA} if cfg.get("gradient_accumulation_steps") else set()))


def apply(lay, stated: tuple[str, frozenset[str]], tf_keras: bool) -> None:
    """Takes the statement into a Keras 3 layout (before its optimizer variables are read).

    A bare ``.weights.h5``: the optimizer is read as the stated class with the stated options
    (``lay.stated_optimizer``; the file's name kept in ``lay.named_optimizer``). A file that
    records the optimizer (config.json) decides itself: a statement that agrees is noted,
    one that contradicts it is refused (``EmaError``, exit 6). tf_keras files: not read
    through this statement (noted)."""
    if tf_keras and lay.optimizer_config is not None:
        lay.notes.append(f"--optimizer {shown(stated)} is not used for a tf_keras .keras "
                         "archive: its config.json records the optimizer")
        return
    if tf_keras:  # a bare tf_keras .weights.h5 records no optimizer name at all
        cls, opts = stated
        if cls not in TF_KERAS or GA in opts:
            raise OptionError(
                f"--optimizer {shown(stated)} (Python: optimizer=): the file is a tf_keras "
                "(Keras 2) .weights.h5, and "
                + (f"{shown(stated).split(':')[0]} is not a tf_keras built-in whose slots ckpt "
                   "knows" if cls not in TF_KERAS else "tf_keras has no gradient accumulation")
                + "; valid: " + ", ".join(
                    k.replace("_", "") + (
                        f" (options: {', '.join(TF_KERAS[k])})" if TF_KERAS[k] else "")
                    for k in TF_KERAS))
        lay.named_optimizer = None
        lay.optimizer = TF_KERAS_SLOTS.get(cls, cls)
        lay.stated_optimizer = stated
        return
    cfg = lay.optimizer_config
    if cfg is not None or lay.custom_optimizer:
        mine = (lay.optimizer or "", recorded(lay.optimizer or "", cfg or {}))
        if lay.custom_optimizer or mine != stated:
            from ...errors import EmaError

            said = lay.custom_optimizer or shown(mine)
            raise EmaError(f"--optimizer {shown(stated)} was stated, but config.json records "
                           f"the optimizer as {said}: omit --optimizer (the file records it)")
        lay.notes.append(f"--optimizer {shown(stated)} agrees with config.json, which records "
                         "the optimizer: the record decides")
        return
    lay.named_optimizer = lay.optimizer
    lay.optimizer = stated[0]
    lay.stated_optimizer = stated


__all__ = ["GA", "OPTIONS", "TF_KERAS", "apply", "config", "parse", "recorded", "shown"]
