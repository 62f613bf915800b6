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
F10); the refusal only says what they look like.
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


def _tf_keras_named(variables: dict, full: dict[str, str], paths: dict[str, str]) -> list[str]:
    """Weights recorded as a tf_keras ``use_ema`` copy of another stored weight of that name,
    shape and dtype, held under a name of their own (a list index, a dict key): a layer tracks
    its weight under the attribute its recorded name ends with (``avg/fc/kernel`` holding
    ``net/average/fc/kernel``), so a layer named "average" is not taken for one (r55 F1, F10).

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
        if any(w != k and variables[w].role == R.WEIGHT
               and variables[w].shape == variables[k].shape
               and variables[w].dtype == variables[k].dtype
               for b in bases for w in by_name.get(b, ())):
            named.append(k)
    return named


def detached_hint(ckpt: Checkpoint, variables: dict, missing) -> str | None:
    """The sentence for a TF2 checkpoint whose variables read as weights include some named as
    another stored weight's Keras 3 or tf_keras (:func:`_tf_keras_named`) ``use_ema`` average,
    with no variable read as an average: they are not paired by that name, only named.

    Returns:
        `str` beginning with :data:`DETACHED`, naming those variables and their recorded
        names, that their optimizer is not saved, and what to save; `None` where none is so.
    """
    objects = ckpt.objects
    if objects is None or not missing or any(v.role == R.EMA for v in variables.values()):
        return None
    full = {k: objects.full_names[k] for k in variables if k in objects.full_names}
    flat: dict[str, list[str]] = {}
    for k, f in full.items():
        flat.setdefault(f.replace("/", "_"), []).append(k)
    named = []
    for k, f in full.items():
        m = _AVERAGE_NAME.match(f)
        if m and variables[k].role == R.WEIGHT and any(
                w != k and variables[w].role == R.WEIGHT
                and variables[w].shape == variables[k].shape
                for w in flat.get(m.group(1), ())):
            named.append(k)
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
