"""Keras 3 ``use_ema`` averages saved without their optimizer (review-20-attack-r47 F3).

A Keras 3 optimizer names each ``use_ema`` copy ``<optimizer>/<weight path, '/' as '_'>_average``
(``adam/p_kernel_average``), and only the optimizer object (its
``_model_variables_moving_average``, saved with it) records that a variable is such a copy and
of which weight: a subclass' own ``add_optimizer_variables(var_list, "average")`` (gradient
averages) carries the same names (review-14-attack-r27 F3), and two weight paths can flatten to
one name (``x_dense`` beside ``x/dense``). A ``tf.train.Checkpoint(model=m,
ema=list(opt._model_variables_moving_average))`` saves the copies without it: they are read as
weights and refused as "no averages are stored", which is false. :func:`detached_hint` says
what they are and what to save instead.

tf_keras (Keras 2) names its copies ``<optimizer>/average/<weight's recorded name>``
(``Adam/average/fc/kernel``; a ``LossScaleOptimizer`` builds its inner one outside its scope:
``average/fc/kernel``). Saved so (review-20-attack-r51 F4, review-21-attack-r55 F2, F4, F6) they
are not paired by that name either: a layer named ``"average"`` records its weights as
``<model>/average/<name>`` too, which once paired another model's weight with exit 0 (r55 F1,
F10); the refusal only says what they look like. Beside another model's saved optimizer
(r55 F3) they make the weights that optimizer leaves out unproven (:func:`detached_copies`), not
"not built with them".
"""

from __future__ import annotations

import re

from . import roles as R

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .checkpoint import Checkpoint

#: How :func:`detached_hint`'s sentence begins (``missing_message`` says it whole).
DETACHED = "no average is proven for its weights: "

_AVERAGE_NAME = re.compile(r"^[^/]+/(.+)_average$")

_TF_KERAS_AVERAGE = "average/"  # after "<optimizer>/", or first (a LossScaleOptimizer's)


def _keras3_named(variables: dict, full: dict[str, str], among=None) -> list[str]:
    """Weights recorded as a Keras 3 ``use_ema`` average of another stored weight of that
    flattened name and shape (``adam/p_kernel_average``); ``among``: where given, only an
    average of one of those weights counts.

    Returns:
        `list` of those checkpoint keys, in the file's order.
    """
    flat: dict[str, list[str]] = {}
    for k, f in full.items():
        flat.setdefault(f.replace("/", "_"), []).append(k)
    named = []
    for k, f in full.items():
        m = _AVERAGE_NAME.match(f)
        if m and variables[k].role == R.WEIGHT and any(
                w != k and variables[w].role == R.WEIGHT and (among is None or w in among)
                and variables[w].shape == variables[k].shape
                for w in flat.get(m.group(1), ())):
            named.append(k)
    return named


def _tf_keras_named(variables: dict, full: dict[str, str], paths: dict[str, str],
                    among=None) -> list[str]:
    """Weights recorded as a tf_keras ``use_ema`` copy of another stored weight of that name,
    shape and dtype, held under a name of their own (a list index, a dict key): a layer tracks
    its weight under the attribute its recorded name ends with (``avg/fc/kernel`` holding
    ``net/average/fc/kernel``), so a layer named "average" is not taken for one (r55 F1, F10).
    ``among``: where given, only a copy of one of those weights counts (those no saved
    optimizer averages, r55 F3).

    Returns:
        `list` of those checkpoint keys, in the file's order.
    """
    by_name: dict[str, list[str]] = {}
    for k, f in full.items():
        by_name.setdefault(f, []).append(k)
    named = []
    for k, f in full.items():
        # both readings of "average/average/w" (an optimizer named "average", or a LSO's copy)
        bases = {n[len(_TF_KERAS_AVERAGE):] for n in (f, f.partition("/")[2])
                 if n.startswith(_TF_KERAS_AVERAGE) and len(n) > len(_TF_KERAS_AVERAGE)}
        held = paths.get(k, k).rsplit("/", 1)[-1]
        if not bases or variables[k].role != R.WEIGHT or held == f.rsplit("/", 1)[-1]:
            continue
        if any(w != k and variables[w].role == R.WEIGHT and (among is None or w in among)
               and variables[w].shape == variables[k].shape
               and variables[w].dtype == variables[k].dtype
               for b in bases for w in by_name.get(b, ())):
            named.append(k)
    return named


def detached_copies(ckpt: Checkpoint, variables: dict, unaveraged) -> list[str]:
    """Of ``unaveraged`` (the weights a saved optimizer's use_ema copies leave out), those that
    look like another Keras 3 or tf_keras optimizer's copies (:func:`_keras3_named`,
    :func:`_tf_keras_named`) of others of them,
    saved without that optimizer (``Checkpoint(generator=G, g_optimizer=og,
    d_ema=list(od._model_variables_moving_average))``, review-21-attack-r55 F3): the saved
    optimizer's list is then no record of which of those weights were averaged.

    Returns:
        `list` of those checkpoint keys, in the file's order (empty where none is so).
    """
    objects = ckpt.objects
    if objects is None or not unaveraged:
        return []
    keys = set(unaveraged)
    full = {k: objects.full_names[k] for k in variables if k in objects.full_names}
    named = {*_keras3_named(variables, full, among=keys),
             *_tf_keras_named(variables, full, objects.paths, among=keys)}
    return [k for k in full if k in named and k in keys]


def _beside_saved_hint(ckpt: Checkpoint, variables: dict, missing) -> str | None:
    """:func:`detached_hint`'s sentence where a saved optimizer's copies are read as averages
    and :func:`detached_copies` finds another's beside them (r55 F3), or None."""
    objects = ckpt.objects
    copies = detached_copies(ckpt, variables, missing)
    if not copies:
        return None
    full = objects.full_names
    weights = [k for k in missing if k not in set(copies)]

    def shown(keys: list[str], recorded: bool) -> str:
        return ", ".join(objects.paths.get(k, k) + (f" ({full[k]})" if recorded else "")
                         for k in keys[:3]) + (
            f" and {len(keys) - 3} more" if len(keys) > 3 else "")

    return (f"{DETACHED}{len(weights)} weight(s) have no use_ema copy in the saved optimizer, "
            f"{shown(weights, False)}, and {len(copies)} variable(s) look like another "
            f"optimizer's use_ema copies of such weights saved without that optimizer, "
            f"{shown(copies, True)} (tf_keras' '<optimizer>/average/<weight>', Keras 3's "
            "'<optimizer>/<weight>_average'); no option pairs them by name (a layer named "
            "'average' or a custom optimizer's own variables get such names; only that "
            "optimizer's _model_variables_moving_average "
            "records which weight each averages), so those weights cannot be taken as not "
            "averaged: save that optimizer too (tf.train.Checkpoint(..., "
            "optimizer2=that_optimizer)), or pass --allow-missing (allow_missing=True) to take "
            "them raw (the copies are then written as weights under their own names, as "
            "stored)")


def detached_hint(ckpt: Checkpoint, variables: dict, missing) -> str | None:
    """The sentence for a TF2 checkpoint whose variables read as weights include some named as
    another stored weight's Keras 3 or tf_keras (:func:`_tf_keras_named`) ``use_ema`` average,
    with no variable read as an average: they are not paired by that name, only named.

    Returns:
        `str` beginning with :data:`DETACHED`, naming those variables and their recorded
        names, that their optimizer is not saved, and what to save; `None` where none is so.
    """
    objects = ckpt.objects
    if objects is None or not missing:
        return None
    if any(v.role == R.EMA for v in variables.values()):  # an optimizer's copies saved (F3)
        return _beside_saved_hint(ckpt, variables, missing)
    full = {k: objects.full_names[k] for k in variables if k in objects.full_names}
    named = _keras3_named(variables, full)
    tfk = _tf_keras_named(variables, full, objects.paths)

    def shown(keys: list[str]) -> str:
        return ", ".join(f"{objects.paths.get(k, k)} ({full[k]})" for k in keys[:3]) + (
            f" and {len(keys) - 3} more" if len(keys) > 3 else "")

    parts = []
    if named:
        parts.append(
            f"{len(named)} variable(s) are named as a Keras 3 optimizer's use_ema averages of "
            f"weights stored here, {shown(named)}, but were saved without that optimizer, "
            "whose _model_variables_moving_average is what proves a variable is a use_ema "
            "average and of which weight (a custom optimizer's own "
            "add_optimizer_variables(..., 'average') gets the same names, and two weight "
            "paths can flatten to one), so they are read as weights")
    if tfk:
        parts.append(
            f"{len(tfk)} variable(s) look like tf_keras use_ema copies saved without their "
            f"optimizer, {shown(tfk)} ('<optimizer>/average/<weight>', after weights stored "
            "here); no option pairs them by name (a layer named 'average' or a custom "
            "optimizer's own variables get such names; only the optimizer's "
            "_model_variables_moving_average records which weight each averages), so they are "
            "read as weights")
    if not parts:
        return None
    return (DETACHED + "; ".join(parts) + ": save the optimizer with them, "
            "tf.train.Checkpoint(model=model, optimizer=optimizer), or pass --raw to ckpt export "
            "for the raw weights (it writes every stored variable as it is, these included)")
