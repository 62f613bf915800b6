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
"not built with them". Neither family is matched by the weight's name (a subclassed model's
weight records ``net/kernel``, its copy ``adam/net_e_kernel_average``; a LossScaleOptimizer
adds a part; a dict key can spell ``e/kernel``, review-21-attack-r59): shape and dtype only.
"""

from __future__ import annotations

import re

from . import roles as R
from .formats.objgraph import optimizer_owned_keys, readable_name
from .wording import agreeing, counted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .checkpoint import Checkpoint

#: How :func:`detached_hint`'s sentence begins (``missing_message`` says it whole).
DETACHED = "no average is proven for its weights: "

_TF_KERAS_PART = "average"  # tf_keras: "<optimizer>/average/<w>", a LSO's "average/<w>"
_KERAS3_END = "_average"  # Keras 3: "<optimizer>/<w flattened>_average", a LSO's 3 parts


def _keras3_looking(name: str) -> bool:
    """Whether a recorded name ends as a Keras 3 ``use_ema`` copy's does, after any number of
    parts: ``adam/p_kernel_average``, a LossScaleOptimizer's
    ``loss_scale_optimizer/adam/p_kernel_average``. The part before ``_average`` is not
    matched with a weight's name: a subclassed model's weight records ``net/kernel`` while its
    copy flattens ``net/e/kernel`` (review-21-attack-r59 F3, F4)."""
    last = name.rsplit("/", 1)[-1]
    return last.endswith(_KERAS3_END) and len(last) > len(_KERAS3_END)


def _tf_keras_looking(name: str) -> bool:
    """Whether a recorded name has an ``average`` part before its last, at any depth, as a
    tf_keras ``use_ema`` copy's (``Adam/average/fc/kernel``, ``average/fc/kernel``)."""
    return _TF_KERAS_PART in name.split("/")[:-1]


def _held_name(key: str) -> str:
    """The name a variable's holder tracks it under: its key's last part, unescaped (TF
    writes a ``/`` inside one name, a dict key's, as ``.S`` and a ``.`` as ``..``), so a dict
    key ``"e/kernel"`` is not read as a layer's ``kernel`` attribute (review-21-attack-r59 F2).

    Returns:
        `str`, that name.
    """
    last = readable_name(key).rsplit("/", 1)[-1]
    return re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), last)


def _copies_of(variables: dict, full: dict[str, str], owned, candidates, weights,
               looking) -> list[str]:
    """Of ``candidates``, the weights outside every saved optimizer (``owned``) whose
    recorded name ``looking`` says looks like a use_ema copy's and that have the shape (and,
    for tf_keras names, the dtype) of another of ``weights``: nothing is matched by name.

    Returns:
        `list` of those checkpoint keys, in the file's order.
    """
    found = []
    for k, f in full.items():
        if k not in candidates or k in owned or variables[k].role != R.WEIGHT \
                or not looking(f):
            continue
        v = variables[k]
        if any(w != k and variables[w].shape == v.shape
               and (looking is _keras3_looking or variables[w].dtype == v.dtype)
               for w in weights):
            found.append(k)
    return found


def detached_copies(ckpt: Checkpoint, variables: dict, unaveraged) -> list[str]:
    """Of ``unaveraged`` (the weights a saved optimizer's use_ema copies leave out), those
    outside every saved optimizer whose recorded name looks like a tf_keras or Keras 3
    use_ema copy's (an ``average`` part at any depth, or a last part ending ``_average``)
    and that have the shape and dtype of another of them (``Checkpoint(generator=G,
    g_optimizer=og, d_ema=list(od._model_variables_moving_average))``, review-21-attack-r55
    F3; a dict of them keyed by name, a subclassed or LossScaleOptimizer-wrapped D, r59 F1,
    F3): the saved optimizer's list is then no record of which of those weights were
    averaged. Refusing is the safe side, so neither the holder's name nor the weight's name
    is asked to fit.

    Returns:
        `list` of those checkpoint keys, in the file's order (empty where none is so).
    """
    objects = ckpt.objects
    if objects is None or not unaveraged:
        return []
    keys = set(unaveraged)
    full = {k: objects.full_names[k] for k in variables if k in objects.full_names}
    owned = optimizer_owned_keys(objects)
    named = {*_copies_of(variables, full, owned, keys, keys, _keras3_looking),
             *_copies_of(variables, full, owned, keys, keys, _tf_keras_looking)}
    return [k for k in full if k in named]


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

    return (f"{DETACHED}{counted(len(weights), 'weight')} {agreeing(len(weights), 'has', 'have')} "
            "no use_ema copy in the saved optimizer, "
            f"{shown(weights, False)}, and {counted(len(copies), 'variable')} "
            f"{agreeing(len(copies), 'looks', 'look')} like another "
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
    another stored weight's Keras 3 or tf_keras ``use_ema`` average (:func:`_copies_of`),
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
    owned = optimizer_owned_keys(objects)
    weights = [w for w, v in variables.items() if v.role == R.WEIGHT]
    named = _copies_of(variables, full, owned, full, weights, _keras3_looking)
    # a layer named "average" tracks its weight under the name its recorded name ends with
    # (avg/fc/kernel holding net/average/fc/kernel): "no averages are stored" stays true of
    # it (r55 F1, F10); a list index or a dict key ("e/kernel", r59 F2) is another name
    held = {k for k in full if _held_name(k) != full[k].rsplit("/", 1)[-1]}
    tfk = [k for k in _copies_of(variables, full, owned, held, weights, _tf_keras_looking)
           if k not in named]

    def shown(keys: list[str]) -> str:
        return ", ".join(f"{objects.paths.get(k, k)} ({full[k]})" for k in keys[:3]) + (
            f" and {len(keys) - 3} more" if len(keys) > 3 else "")

    parts = []
    if named:
        parts.append(
            f"{counted(len(named), 'variable')} {agreeing(len(named), 'is', 'are')} named as a "
            "Keras 3 optimizer's use_ema averages "
            f"('<optimizer>/<weight>_average'), {shown(named)}, of the shape of weights stored "
            "here, but were saved without that optimizer, "
            "whose _model_variables_moving_average is what proves a variable is a use_ema "
            "average and of which weight (a custom optimizer's own "
            "add_optimizer_variables(..., 'average') gets the same names, and two weight "
            "paths can flatten to one), so they are read as weights")
    if tfk:
        parts.append(
            f"{counted(len(tfk), 'variable')} {agreeing(len(tfk), 'looks', 'look')} like tf_keras "
            "use_ema copies saved without their "
            f"optimizer, {shown(tfk)} ('<optimizer>/average/<weight>', of the shape of "
            "weights stored here); no option pairs them by name (a layer named 'average' or "
            "a custom optimizer's own variables get such names; only the optimizer's "
            "_model_variables_moving_average records which weight each averages), so they are "
            "read as weights")
    if not parts:
        return None
    return (DETACHED + "; ".join(parts) + ": save the optimizer with them, "
            "tf.train.Checkpoint(model=model, optimizer=optimizer), or pass --raw to ckpt export "
            "for the raw weights (it writes every stored variable as it is, these included)")
