"""EMA weights of Keras 3 ``use_ema=True`` training: read them without TensorFlow.

With ``keras.optimizers.X(use_ema=True)`` the averages are ordinary optimizer variables (named
``<weight path with / replaced by _>_average``, stored as ``optimizer/vars/<i>``), and ``fit()``
copies them into the model only when training ends: every checkpoint written during training
(``ModelCheckpoint``, a crash, a ``save()`` from a callback) holds raw weights plus the averages.

:func:`keras_ema_values` reads the averages without TensorFlow, once
:func:`require_keras_pairing` has the file prove their pairing;
:func:`~ckpt_tools.keras_apply.apply_keras_ema` puts them into a built Keras model.
"""
from __future__ import annotations

import re

import numpy as np

from .checkpoint import Checkpoint, open_checkpoint
from .ema_refusals import keras_unproven
from .errors import EmaError, UnprovenPairingError
from .formats.keras.layout import KerasLayout
from .formats.keras.optimizer_slots import shown_name
from .formats.keras.stated import LoopOrder
from .formats.keras.tf_keras import is_legacy, legacy_name
from .formats.keras.tfk_stated_optimizer import refuse_unstated
from .keras_assumed import keras_assumptions, refuse_assumed, warn_assumed
from .keras_copies_equal import AFTER_FIT_HINT, weights_are_copies
from .keras_layout_values import optimizer_needed, refuse_unproven_layout
from .keras_order_values import refuse_contradicted_order
from .keras_twins import refuse_twins
from .keras_unstepped import refuse_unstepped

__all__ = ["keras_ema_values", "require_keras_pairing"]


def optimizer_named(layout: KerasLayout) -> str:
    """The optimizer as a message names it: Keras' class name (``RMSprop``, not its
    variables' ``rm_sprop``), or ``optimizer`` where the file does not say."""
    return shown_name(layout.optimizer) or "optimizer"


def keras_layout(ckpt: Checkpoint) -> KerasLayout:
    layout = ckpt.reader.keras
    if layout is None:
        raise EmaError(f"{ckpt.path}: not a Keras weight file (.keras, .weights.h5 or a Keras "
                       f".h5) but a TensorFlow checkpoint ({ckpt.format}): apply its averages "
                       "with ckpt_tools.apply_ema(model, path)")
    return layout


def shown_names(ckpt: Checkpoint, text: str) -> str:
    """``text`` with the file's raw keys (``layers/dense/vars/0``) replaced by the object paths
    every command shows (``hidden/kernel``), so an error names weights as ``list`` does."""
    paths = {v.name: v.path for v in ckpt.variables_unwarned() if v.path and v.path != v.name}
    keys = sorted((k for k in paths if k in text), key=len, reverse=True)
    if not keys:
        return text
    pattern = re.compile(r"(?<![\w/.])(" + "|".join(map(re.escape, keys)) + r")(?![\w/])")
    return pattern.sub(lambda m: paths[m.group(1)], text)


def nested_error(ckpt: Checkpoint, layout: KerasLayout) -> EmaError:
    """A MultiOptimizer's inner optimizers may hold EMA copies no option pairs: refused, never
    read as use_ema=False (:mod:`~ckpt_tools.formats.keras.nested_optimizers`)."""
    note = next(n for n in layout.notes if n.startswith("the optimizer nests"))
    return EmaError(f"{ckpt.path}: {note}; {_RAW}")


def no_copies_error(ckpt: Checkpoint, layout: KerasLayout) -> EmaError:
    name = ckpt.path  # the whole path: a directory may have led to this file
    if layout.nested:
        return nested_error(ckpt, layout)
    attached = next((n for n in layout.notes if n.startswith("the model keeps")), None)
    if attached and not layout.averages:
        main = ("" if not layout.optimizer_vars else
                f"; its compiled optimizer ({optimizer_named(layout)}) holds none")
        # refused (exit 6): no option decides the attached optimizers' pairing, say so
        # rather than let --trainable/--use-ema look like the way (they state the compiled
        # optimizer's)
        return EmaError(f"{name}: {attached}{main}; no ckpt option decides their pairing "
                        "(--trainable and --use-ema state only the compiled optimizer's); "
                        f"{_RAW}; to save the averages as the weights, call each optimizer's "
                        "finalize_variable_values(<the variables it trains>) before "
                        "model.save() in the training process (Keras copies its averages into "
                        "them), then use --raw")
    # a legacy .h5: its keras_version says which Keras wrote it (Keras 3 writes one too)
    keras2 = layout.tf_keras or (layout.kind == "legacy" and getattr(
        ckpt.reader, "by_tf_keras", True))
    fix = ("train with an optimizer created with use_ema=True (e.g. "
           f"{'tf_keras' if keras2 else 'keras'}.optimizers.SGD(momentum=0.9, "
           "use_ema=True)) and save during or after fit()")
    if layout.kind == "legacy" and not layout.optimizer_vars and not any(
            k.startswith("model_weights/") for k in layout.model):
        # layer_names at the root: save_weights() wrote it, whatever the optimizer did
        return EmaError(
            f"{name}: it holds no optimizer EMA copies: it is a weights-only HDF5 file "
            "(model.save_weights('x.h5'): layer_names at its root), which stores the layer "
            "weights and never the optimizer's state, so it cannot hold averages whatever "
            "use_ema was; to keep them, train with use_ema=True and save the model with its "
            "optimizer: model.save('x.keras') (tf_keras: also model.save('x.h5')); "
            f"{_RAW}")
    if layout.kind == "legacy" and not layout.optimizer_vars and (
            layout.optimizer_config is None or layout.optimizer_config.get("use_ema") is True):
        # neither training_config nor optimizer weights: model.save("x.h5",
        # include_optimizer=False) of a use_ema run says nothing of use_ema (r31 F7)
        return EmaError(
            f"{name}: it holds no optimizer EMA copies: saved with include_optimizer=False (or "
            "before compile()), it records "
            + ("neither the optimizer's variables nor its training_config"
               if layout.optimizer_config is None else
               f"its {optimizer_named(layout)} (use_ema=True) but none of its variables, not "
               "even the iteration count")
            + ", so whatever use_ema was, the averages were not saved; saved after fit() "
            "returned, its weights already are the averages where use_ema=True (fit() copies "
            "them in when it ends), saved during fit() they are the raw ones; to keep the "
            "copies, save with the optimizer (include_optimizer=True, the default, or "
            f"model.save('x.keras')); {_RAW}")
    if layout.use_ema and layout.optimizer_vars:
        # use_ema=True, the copies are stored, but no pairing with the weights is proven
        unfit = [n for n in layout.notes if "cannot be paired" in n or "do not fit" in n]
        # a class of the user's: --optimizer states the built-in whose build order it follows
        custom = bool(layout.custom_optimizer) and layout.stated_optimizer is None
        return (UnprovenPairingError if custom else EmaError)(
            f"{name}: its {optimizer_named(layout)} ran with use_ema=True "
            f"({layout.ema_evidence}) but its EMA copies cannot be paired with the model "
            f"weights from the file alone: "
            f"{shown_names(ckpt, '; '.join(unfit)) or 'no known layout fits'}",
            *(("--optimizer",) if custom else ()))
    if layout.tf_keras and is_legacy(layout):
        why = (f"its optimizer is {legacy_name(layout)} (config.json), a legacy optimizer: "
               "it has no use_ema (and a .keras does not save its state)")
    elif layout.kind == "legacy" and layout.optimizer_config and \
            "use_ema" not in layout.optimizer_config:
        # a tf_keras legacy optimizer (or Keras before 2.11) serializes no use_ema at all
        why = (f"its optimizer is a legacy {layout.optimizer_config.get('name') or 'one'} "
               "(training_config records no use_ema: tf_keras.optimizers.legacy, or Keras "
               "before 2.11), which has no use_ema")
    elif not layout.optimizer_vars:
        why = ("it holds no optimizer variables (the model was saved uncompiled, before "
               "its optimizer was built, or with include_optimizer=False)")
    elif layout.ema_source == "config" and (layout.optimizer_config or {}).get("use_ema"):
        why = (f"its {optimizer_named(layout)} was configured with use_ema=True, but "
               f"it was never built, so no averages exist yet ({layout.ema_evidence})")
    elif layout.use_ema is False and layout.ema_source == "config":
        why = f"its {optimizer_named(layout)} was configured with use_ema=False" + (
            f" ({layout.ema_evidence})" if layout.kind == "legacy" else "")  # training_config
    elif set(layout.optimizer_vars) <= {layout.iteration, layout.learning_rate}:
        # Nothing per weight: whatever use_ema was (a stated --use-ema included), there are
        # no averages to find; "use_ema=False" would be a guess about the file.
        why = (f"its {optimizer_named(layout)} holds only iteration/learning_rate: it "
               "was never built (saved before training)"
               + (", or it keeps no per-weight state (SGD without momentum and "
                  "use_ema=False)" if layout.optimizer in (None, "sgd") else "")
               + ", so no averages exist")
    else:
        why = (f"the optimizer had use_ema=False "
               f"({layout.ema_evidence or 'no *_average optimizer variables'})")
    return EmaError(f"{name}: it holds no optimizer EMA copies: {why}; {fix}; {_RAW}")


# Keras refusals name the way out that needs no averages, as the TF1/TF2 ones do.
_RAW = "the raw weights are usable as they are (ckpt export --raw writes them to one file)"


def undecided_error(ckpt: Checkpoint, layout: KerasLayout) -> EmaError:
    """The refusal of a file that cannot tell whether it holds EMA copies:
    :class:`UnprovenPairingError` naming ``--use-ema/--no-use-ema`` (``use_ema=`` decides;
    review-23-user-u25 F1), a MultiOptimizer's :func:`nested_error`."""
    if layout.nested:
        return nested_error(ckpt, layout)
    note = next((n for n in layout.notes if n.startswith("cannot tell whether")),
                "cannot tell whether it holds EMA copies")
    return UnprovenPairingError(f"{ckpt.path}: {note} (use_ema=True/False in the Python API); "
                                f"saving with model.save('x.keras') records it; {_RAW}",
                                "--use-ema/--no-use-ema")


def require_keras_pairing(ckpt: Checkpoint, *, twins: bool = True) -> None:
    """Checks that a Keras file's EMA copies are all paired with a weight, from proof.

    Does nothing for other formats. Used by :func:`ckpt_tools.ema_map` (``map``,
    ``restore-ema``, ``export``) so that no command falls back to raw weights silently.

    Raises:
        EmaError: the file cannot tell whether it holds EMA copies (``--use-ema`` decides),
            holds none (the optimizer had ``use_ema=False``), some copies cannot be paired,
            a bare ``.weights.h5`` whose copies' values do not prove the layout inferred from
            the optimizer's name (:mod:`~ckpt_tools.keras_layout_values`),
            or (``twins``) a weight without a copy is bit-identical to one with a copy: tied,
            or a frozen copy (:mod:`~ckpt_tools.keras_twins`), or the copies' values place
            them in another order than fit()'s (:mod:`~ckpt_tools.keras_order_values`).
            An undecided ``use_ema`` or copies an option can pair raise
            :class:`UnprovenPairingError` naming that option (its ``option``), for every
            caller alike (:func:`~ckpt_tools.ema_refusals.keras_unproven`; u25 F1).
    """
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None:
        return
    try:
        _require_pairing(ckpt, layout, twins)
    except EmaError as exc:
        unproven = keras_unproven(ckpt, exc)
        if unproven is exc:
            raise
        raise unproven from None


def _require_pairing(ckpt: Checkpoint, layout: KerasLayout, twins: bool) -> None:
    """:func:`require_keras_pairing`'s checks, each refusal as its check raises it."""
    if layout.use_ema is None:
        raise undecided_error(ckpt, layout)
    refuse_unstated(ckpt)  # a bare tf_keras .weights.h5: --optimizer states its class
    if not layout.averages:
        raise no_copies_error(ckpt, layout)
    unpaired = [k for k, v in layout.averages.items() if v is None]
    if unpaired:
        notes = [n for n in layout.notes if n.startswith(unpaired[0] + " ")] or layout.notes
        why = '; '.join(notes) or 'sublayers with equal shapes: e.g. ' + unpaired[0]
        # the note naming --trainable already says what decides: say it once
        tail = "" if "--trainable" in why else (
            "; what decides is the model's trainable order: pass --trainable with the weights "
            "the optimizer was built with, in model.trainable_variables order (Python: "
            "apply_keras_ema(model, path) pairs them with model.trainable_variables)")
        counts = " or ".join(map(str, layout.copy_counts))
        what = (f"the EMA copies ({counts} of the optimizer variables: the file does not "
                "prove how many)" if counts else
                f"{len(unpaired)} of {len(layout.averages)} EMA copies")
        raise EmaError(
            f"{ckpt.path}: {what} cannot be paired with a model weight from the file alone "
            f"({shown_names(ckpt, why)})" + tail
            + optimizer_needed(layout)  # the count decides it too: name both at once (u22 F7)
            + (AFTER_FIT_HINT if weights_are_copies(ckpt, layout) else ""))
    refuse_unstepped(ckpt)  # iteration 0: Keras' initial copies, no averages yet
    refuse_unproven_layout(ckpt)  # a bare .weights.h5: values prove the inferred layout
    if twins:
        refuse_twins(ckpt)
    refuse_contradicted_order(ckpt)  # the values say a custom loop built it otherwise


def keras_ema_values(checkpoint, *, use_ema: bool | None = None, trainable=None,
                     loop_order: bool = False, strict: bool = False,
                     not_swapped: bool = False, fit_order: bool = False,
                     optimizer: str | None = None) -> dict[str, np.ndarray]:
    """Returns the EMA copies of a Keras file, keyed by the model weight they average.

    TensorFlow-free. Only trainable weights have copies (BatchNormalization moving statistics
    are not averaged by Keras): evaluate with these values plus the file's other weights.

    Args:
        checkpoint (`str` or `Checkpoint`): a ``.keras``, ``.weights.h5`` or Keras ``.h5`` file.
        use_ema (`bool`, *optional*): state whether the optimizer ran with ``use_ema=True``
            where a bare ``.weights.h5`` cannot tell (``--use-ema`` on the command line).
        trainable (`list[str]`, *optional*): the weights the optimizer was built with, in
            ``model.trainable_variables`` order, as for :func:`open_checkpoint`
            (``--trainable``): decides what the file does not record, without TensorFlow.
            Ignored when ``checkpoint`` is already open (pass it to ``open_checkpoint``).
        loop_order (`bool`, *optional*, defaults to `False`): ``trainable`` is in a custom
            training loop's order (its first ``apply_gradients()``), which may differ from
            the model's (``--loop-order``).
        strict (`bool`, *optional*, defaults to `False`): refuse a pairing that rests on an
            assumption the file cannot prove (:mod:`~ckpt_tools.keras_assumed`: ``fit()``'s
            build order, not saved swapped by ``SwapEMAWeights``), as ``--strict``.
        not_swapped (`bool`, *optional*, defaults to `False`): state that the file was not
            saved by ``ModelCheckpoint`` after ``SwapEMAWeights(swap_on_epoch=True)``
            (``--not-swapped``), so ``strict`` does not refuse that reading.
        fit_order (`bool`, *optional*, defaults to `False`): state that ``fit()`` built the
            optimizer (``model.trainable_variables``; ``--fit-order``): copies of weights of
            equal shapes pair in the model's order by statement, not assumption (not with
            ``trainable``). Ignored when ``checkpoint`` is already open.

    Returns:
        `dict[str, np.ndarray]`: model weight key (``layers/dense/vars/0``; ``ckpt list
        --json`` gives each key's ``path``, the name ``export`` writes) -> its EMA value.

    Raises:
        EmaError: the file holds no EMA copies, cannot tell whether it does, or some copies
            cannot be paired with a weight from the file alone (then use
            :func:`~ckpt_tools.keras_apply.apply_keras_ema`),
            or (``strict``) the pairing rests on an assumption.
        UnprovenPairingError: (an ``EmaError``) where an option decides the pairing: its
            ``option`` names it (``--use-ema/--no-use-ema``, ``--trainable``), as
            :func:`~ckpt_tools.export.export_weights` raises for the same file.

    Example:
        >>> values = keras_ema_values("fixtures/keras_ema/model.keras", not_swapped=True)
        >>> values["layers/dense/vars/0"].shape
        (4, 8)
    """
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else open_checkpoint(
        checkpoint, use_ema=use_ema, trainable=_named(trainable, loop_order),
        not_swapped=not_swapped, fit_order=fit_order, optimizer=optimizer)
    try:
        layout = keras_layout(ckpt)
        if use_ema is not None and ckpt is checkpoint:
            ckpt.reader.restate_use_ema(use_ema)
            layout = ckpt.reader.keras
        require_keras_pairing(ckpt)
        assumed = keras_assumptions(ckpt)
        refuse_assumed(ckpt, assumed, strict=strict)  # not_swapped: always
        values = {src: np.asarray(ckpt.tensor(key)) for key, src in layout.averages.items()}
        warn_assumed(ckpt, assumed)
        return values
    finally:
        if ckpt is not checkpoint:
            ckpt.close()


def _named(trainable, loop_order: bool):
    """``trainable`` as names (a variable by its path), a custom loop's order with
    ``loop_order`` (:class:`~.formats.keras.stated.LoopOrder`)."""
    if trainable is None:
        return None
    names = [v if isinstance(v, str) else var_path(v) for v in trainable]
    return LoopOrder(names) if loop_order else names


def var_path(variable) -> str:
    """A model variable's path: Keras 3's ``v.path``; a tf_keras (Keras 2) variable has none,
    its ``v.name`` (``dense/kernel:0``) without the ``:0``."""
    path = getattr(variable, "path", None)
    return str(path) if path else str(variable.name).rsplit(":", 1)[0]
