"""Why an EMA pairing is refused, in the words of the file's own style.

:class:`UnprovenPairingError` (exit 6) and the messages :mod:`ckpt_tools.emamap` refuses with
where the file does not decide: a Keras file's undecided ``use_ema``, a ``.meta`` that
contradicts the checkpoint, and the EMA names that tell averages apart. A Keras file speaks
of the optimizer's ``use_ema``, a TF2 file of saving ``ema.average(v)``, and only TF1 of
``Saver(var_list)`` (:func:`file_style`). Several averages that fit one variable:
:mod:`ckpt_tools.ema_several_averages`; same-named variables whose ``apply()`` order the file
does not record: :mod:`ckpt_tools.ema_ambiguous`; averages missing:
:mod:`ckpt_tools.ema_missing`.
"""

from __future__ import annotations

import re

from . import roles as R
from .checkpoint import Checkpoint
from .errors import EmaError, UnprovenPairingError
from .wording import counted


def require_keras(ckpt: Checkpoint) -> None:
    """Keras files: a proven pairing, or a refusal (:func:`require_keras_pairing`); an
    undecided ``use_ema`` or unpairable copies raise :class:`UnprovenPairingError`.

    keras_ema (and NumPy with it) is imported only for Keras files: ``ckpt list`` stays light.
    """
    if getattr(ckpt.reader, "keras", None) is None:
        return
    from .keras_ema import require_keras_pairing

    require_keras_pairing(ckpt)


def keras_unproven(ckpt: Checkpoint, exc: EmaError) -> EmaError:
    """Returns a Keras file's pairing refusal ``exc`` as :class:`UnprovenPairingError` with
    the option that decides where one does (``--use-ema/--no-use-ema``, ``--trainable``), or
    ``exc`` itself where no option decides. The one place the class and option are chosen, so
    ``ema_map``, ``export_weights``, ``keras_ema_values``, ``apply_keras_ema`` and ``bake_ema``
    raise the same for the same file (review-23-user-u25 F1)."""
    layout = ckpt.reader.keras
    if layout.nested:
        return exc  # a MultiOptimizer's averages: no option decides (nested_optimizers)
    if getattr(exc, "option", None) == "--optimizer":  # a class of the user's: it decides
        return exc  # (its refusal also says --trainable states nothing: review-16-attack-r33 F5)
    if layout.use_ema is None:
        return UnprovenPairingError(str(exc), "--use-ema/--no-use-ema")
    if layout.averages and any(v is None for v in layout.averages.values()):
        # keras_ema names --trainable where the frozen set or sublayer order is open
        # (the one thing it can decide); other unpairable copies no option decides.
        option = "--trainable" if "--trainable" in str(exc) else None
        # each open average and its candidate weights: list shows '?' on both sides
        undecided = {v.name: tuple(v.ema_candidates) for v in ckpt.variables_unwarned()
                     if v.role == R.EMA and not v.ema_of and v.ema_candidates}
        return UnprovenPairingError(str(exc), option, undecided)
    if layout.copies_unpaired and "--trainable" in str(exc):
        # use_ema=True and copies stored, none placed (no layout fits the weights as the
        # file records them): open, and --trainable decides, not "no shadow"
        return UnprovenPairingError(str(exc), "--trainable")
    return exc


def file_style(ckpt: Checkpoint) -> str:
    """Returns how the checkpoint was written, which decides how errors explain it: ``"keras"``
    (a Keras weights file), ``"tf2"`` (a ``tf.train.Checkpoint``) or ``"tf1"`` (a Saver)."""
    if ckpt.format in ("keras", "h5") or getattr(ckpt.reader, "keras", None) is not None:
        return "keras"
    if ckpt.objects is not None:
        # tf_keras model.save_weights() in TF format: the root is the model, its layers tracked
        # as layer_with_weights-N / layer-N.
        keras = any(p.startswith(("layer_with_weights-", "layer-"))
                    for p in ckpt.objects.paths.values())
        return "keras" if keras else "tf2"
    return "tf1"


def contradiction_message(ckpt: Checkpoint, contradicted: dict[str, str]) -> str:
    sample = "; ".join(f"{s} averages {t}" for t, s in list(contradicted.items())[:3])
    more = f" (and {len(contradicted) - 3} more)" if len(contradicted) > 3 else ""
    meta = ckpt.meta.path if ckpt.meta is not None else ".meta"
    return (f"{ckpt.path}: the checkpoint stores averages of "
            f"{counted(len(contradicted), 'variable')} "
            f"that the graph in {meta} does not average (not in its trainable_variables or "
            f"moving_average_variables): {sample}{more}; the .meta is probably from another "
            f"graph (another run, or a different var_list), and following it would restore "
            f"their raw values; pass --no-meta (Python: use_meta=False) to pair by the "
            f"checkpoint's names and use the stored averages, or replace the .meta with the "
            f"training graph's")


def unwritten_message(ckpt: Checkpoint, found: dict[str, str],
                      unlisted: tuple[str, ...] = (), offer: str = "") -> str:
    """The refusal of :func:`~ckpt_tools.ema_sources.unwritten_sources`' keys: the graph trains
    the weights (or runs ``ema.apply()``) and nothing in it writes the keys, so either the ``.meta``
    is another graph's (as in :func:`contradiction_message`) or the keys were kept from
    outside the graph; the options that decide: ``--no-meta``, ``--allow-missing``.
    ``unlisted``: those of the weights in neither ``trainable_variables`` nor
    ``moving_average_variables`` (frozen, or trained by hand: review-19-attack-r45 F8), which
    the graph does not average at all. ``offer``: the ``--exclude`` options (as typed) that
    export the other weights' averages, where the export accepts them (note s28g F5).

    Returns:
        the one-line refusal."""
    sample = "; ".join(f"{s} for {t}" for t, s in sorted(found.items())[:3])
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    meta = ckpt.meta.path if ckpt.meta is not None else ".meta"
    shown = ", ".join(unlisted[:3]) + (" ..." if len(unlisted) > 3 else "")
    what = (f"the training graph in {meta} does not average ({shown}: in neither its "
            f"trainable_variables nor its moving_average_variables; no ema.apply() update, "
            f"AssignMovingAvg op, of that graph writes the keys)" if unlisted else
            f"the graph in {meta} trains but does not average into them (no ema.apply() "
            f"update, AssignMovingAvg op, of that graph writes them)")
    return (f"{ckpt.path}: the checkpoint stores {counted(len(found), 'key')} named as averages of "
            f"{'a variable' if len(found) == 1 else 'variables'} that {what} and that no "
            f"op of the graph writes: {sample}{more}; either the .meta is from another graph "
            f"(another run, or a different var_list) or the keys hold tensors kept from "
            f"outside the graph (Variable.load() of a gradient's moment) under the names "
            f"ema.apply() would give averages, and the files do not tell which; "
            + (f"{offer} exports the other weights' averages without them; " if offer else "")
            + "pass --no-meta (Python: use_meta=False) to pair by the checkpoint's names and "
            "use them as averages, or --allow-missing (Python: allow_missing=True) to keep "
            "those variables raw, as ema.average(v) is None in that graph")


def exact_names(names: set[str]) -> set[str]:
    """The recorded EMA names that are a ``name=`` given to one EMA object, not TF's ``_N``
    counter: names no other recorded name extends with ``_N`` (two objects of one name), and
    that extend no other (``ExponentialMovingAverage_1`` beside ``ExponentialMovingAverage``).
    ``ema_999`` beside ``ema_9999`` are both given names.

    Example:
        >>> sorted(exact_names({"ema_999", "ema_9999"}))
        ['ema_999', 'ema_9999']
        >>> exact_names({"ExponentialMovingAverage", "ExponentialMovingAverage_1"})
        set()
        >>> exact_names({"ExponentialMovingAverage_5", "ExponentialMovingAverage_6"})
        set()
    """
    out = set()
    for n in names:
        m = re.fullmatch(r"(.+)_\d+", n)
        if m and (m.group(1) in names or m.group(1) == "ExponentialMovingAverage"):
            # TF's default name with a number is its counter, whatever else is recorded: in
            # TF2 the counter runs over the whole process, so the plain name may be absent
            continue
        if any(re.fullmatch(re.escape(n) + r"_\d+", o) for o in names):
            continue
        out.add(n)
    return out


def suffix_base(suffix: str) -> str:
    """``ExponentialMovingAverage_1`` -> ``ExponentialMovingAverage``: the name an EMA object was
    given, without the ``_N`` TF appends to make it unique."""
    return re.sub(r"_\d+$", "", suffix)

#: Said of a TF1 key an EMA of an optimizer's name may have written (see
#: :func:`~ckpt_tools.ema_updates.slot_named_hint`).
SLOT_NAMED = "read as an optimizer's slot"
