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


def _option(text: str) -> str | None:
    """One option as stated, in ckpt's spelling or Keras' own keyword form:
    ``amsgrad``, ``amsgrad=True`` -> ``"amsgrad"``; ``amsgrad=False``, ``momentum=0`` -> None
    (the option is off: it adds no variables); ``gradient_accumulation_steps=4`` ->
    ``"gradient_accumulation"`` (review-16-attack-r34 F9)."""
    name, eq, value = text.strip().lower().partition("=")
    name = name.strip()
    if name == "gradient_accumulation_steps":
        name = GA
        if eq and value.strip() in ("none", "0", "1", ""):
            return None
    elif eq and value.strip() in ("false", "0", "0.0", "none", ""):
        return None
    return name or None


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
    options = frozenset(filter(None, (_option(o) for o in opts.split(","))))
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
    records the optimizer (config.json) decides itself where it records a Keras built-in: a
    statement that agrees is noted, one that contradicts it is refused (``EmaError``, exit
    6). Where it records a class of the user's (``my>MyAdam``), the statement says the class
    is that built-in in all but name: its variables are read in the built-in's build order
    (count and shapes must match exactly, as for a bare file), unless the options its config
    records contradict the statement (``UnprovenPairingError``, exit 6). tf_keras files are
    held to tf_keras' layout of the class (:mod:`.tf_keras`)."""
    cfg = lay.optimizer_config
    if tf_keras and cfg is None:  # a bare tf_keras .weights.h5 records no optimizer name
        _tf_keras_class(stated, "a tf_keras (Keras 2) .weights.h5")
        lay.named_optimizer = None
        lay.optimizer = TF_KERAS_SLOTS.get(stated[0], stated[0])
        lay.stated_optimizer = stated
        return
    if lay.custom_optimizer:  # a class of the user's: the statement gives its build order
        if tf_keras:
            _tf_keras_class(stated, "a tf_keras .keras archive")
        _refuse_contradicted(lay, stated, cfg or {})
        lay.named_optimizer = lay.custom_optimizer
        lay.optimizer = TF_KERAS_SLOTS.get(stated[0], stated[0]) if tf_keras else stated[0]
        lay.stated_optimizer = stated
        return
    if cfg is not None:
        mine = (lay.optimizer or "", recorded(lay.optimizer or "", cfg or {}))
        if mine != stated:
            from ...errors import EmaError

            said = shown(mine)
            raise EmaError(f"--optimizer {shown(stated)} was stated, but config.json records "
                           f"the optimizer as {said}: omit --optimizer (the file records it)")
        lay.notes.append(f"--optimizer {shown(stated)} agrees with config.json, which records "
                         "the optimizer: the record decides")
        return
    lay.named_optimizer = lay.optimizer
    lay.optimizer = stated[0]
    lay.stated_optimizer = stated


def _tf_keras_class(stated: tuple[str, frozenset[str]], what: str) -> None:
    """Refuses (exit 2) a stated class tf_keras does not have (or gradient accumulation)."""
    cls, opts = stated
    if cls not in TF_KERAS or GA in opts:
        raise OptionError(
            f"--optimizer {shown(stated)} (Python: optimizer=): the file is {what}, and "
            + (f"{shown(stated).split(':')[0]} is not a tf_keras built-in whose slots ckpt "
               "knows" if cls not in TF_KERAS else "tf_keras has no gradient accumulation")
            + "; valid: " + ", ".join(
                k.replace("_", "") + (
                    f" (options: {', '.join(TF_KERAS[k])})" if TF_KERAS[k] else "")
                for k in TF_KERAS))


def contradicted(stated: tuple[str, frozenset[str]], cfg: dict) -> str:
    """The stated options a custom class' recorded config contradicts (``"amsgrad=off"``
    where ``--optimizer adam:amsgrad`` is stated and the config records ``amsgrad: false``),
    or ``""``. Only options the config records are compared: a Lookahead-Adam's count equals
    Adam's with amsgrad, so what the class recorded holds the statement to its word."""
    cls, opts = stated
    said = {o: bool(cfg[o]) for o in OPTIONS.get(cls, ()) if o in cfg}
    if "gradient_accumulation_steps" in cfg:
        said[GA] = bool(cfg["gradient_accumulation_steps"])
    off = [f"{o}={'on' if on else 'off'}" for o, on in sorted(said.items())
           if on != (o in opts)]
    # a subclass of the stated built-in records its options (Adam's amsgrad); a config
    # without them is another class' (a Lookahead-SGD stated as adam)
    off += [f"no {o} (the stated class' own option)" for o in OPTIONS.get(cls, ())
            if o not in cfg]
    return ", ".join(off)


def _refuse_contradicted(lay, stated: tuple[str, frozenset[str]], cfg: dict) -> None:
    """Refuses (exit 6, naming ``--optimizer``) a statement :func:`contradicted` rules out."""
    from ...errors import UnprovenPairingError

    off = contradicted(stated, cfg)
    if off:
        raise UnprovenPairingError(
            f"--optimizer {shown(stated)} was stated, but the config.json config of "
            f"{lay.custom_optimizer} has {off}: state the options the run used "
            "(--optimizer CLASS[:OPTIONS])", "--optimizer")


__all__ = ["GA", "OPTIONS", "TF_KERAS", "apply", "config", "contradicted", "parse", "recorded",
           "shown"]
