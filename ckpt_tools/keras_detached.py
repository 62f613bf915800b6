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

tf_keras (Keras 2) names its copies ``<Optimizer>/average/<weight name>``
(``Adam/average/p/kernel``),
the weight's own recorded name whole, which :func:`tf_keras_detached` reads where the file holds
no optimizer at all (review-20-attack-r51 F4): the name is what the existing optimizer-path
reading already trusts when no optimizer object lists otherwise (``object_roles``).
"""

from __future__ import annotations

import re

from . import roles as R
from .formats.objgraph import SLOT_MARK, ObjectGraph, readable_name
from .roles import EMA, OPTIMIZER_PATH, RoleInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .checkpoint import Checkpoint

#: How :func:`detached_hint`'s sentence begins (``missing_message`` says it whole).
DETACHED = "no average is proven for its weights: "

_AVERAGE_NAME = re.compile(r"^[^/]+/(.+)_average$")
_TF_KERAS_AVERAGE = re.compile(r"^[^/]+/average/(.+)$")


def holds_no_optimizer(keys, objects: ObjectGraph) -> bool:
    """Whether a TF2 checkpoint holds no optimizer object at all: no key under an optimizer's
    attribute (``optimizer=``, ``generator_optimizer=``), none beside an ``_iterations`` (an
    optimizer under any name), no slot variable, no ``_model_variables_moving_average``.

    Returns:
        `bool`: `True` where none of these is in the file.
    """
    if any(name == "_model_variables_moving_average"
           for kids in objects.children.values() for name, _c in kids):
        return False
    for k in keys:
        path = objects.paths.get(k, readable_name(k))
        if SLOT_MARK in k or path.endswith("/_iterations") or OPTIMIZER_PATH.search(path):
            return False
    return True


def tf_keras_detached(full_of: dict[str, str], entries,
                      objects: ObjectGraph) -> dict[str, RoleInfo]:
    """Roles of the variables named as tf_keras ``use_ema`` copies (``Adam/average/p/kernel``)
    in a TF2 checkpoint that holds no optimizer (:func:`holds_no_optimizer`, the caller's
    test): the copies saved as a list beside the model
    (``tf.train.Checkpoint(model=m, ema=list(opt._model_variables_moving_average))``).
    With an optimizer saved, its ``_model_variables_moving_average`` decides instead, and a
    variable merely so named is a subclass' own (review-14-attack-r27 F3).

    Args:
        full_of: checkpoint key -> recorded variable name (``full_name``).
        entries: checkpoint key -> entry (shape, dtype).
        objects: the object graph (where each key sits).

    Returns:
        `dict` key -> :class:`~ckpt_tools.roles.RoleInfo` (role ``ema``, style ``keras``) for
        each key so named, held apart from the weights its name gives: paired where exactly
        one stored weight of that name, shape and dtype fits and no other copy names it;
        otherwise with the fitting weights as candidates, which no pairing takes (two
        same-named weights, or two optimizers' copies of one weight). Keys naming no stored
        weight, or held in the same top-level object as it, are left out (weights).
    """
    named = {k: m.group(1) for k, f in full_of.items() if (m := _TF_KERAS_AVERAGE.match(f))}
    weights: dict[str, list[str]] = {}
    for k, f in full_of.items():
        if k not in named:
            weights.setdefault(f, []).append(k)
    claims: dict[str, int] = {}
    for name in named.values():
        claims[name] = claims.get(name, 0) + 1

    def top(key: str) -> str:
        return objects.paths.get(key, readable_name(key)).partition("/")[0]

    out: dict[str, RoleInfo] = {}
    for k, name in named.items():
        fitting = tuple(sorted(v for v in weights.get(name, ())
                               if entries[v].shape == entries[k].shape
                               and entries[v].dtype == entries[k].dtype))
        # A layer of the model itself may be named "average" (blk/average/kernel beside a
        # weight recorded as "kernel"): a copy is held apart from the model (ema=[...]).
        if not fitting or any(top(v) == top(k) for v in fitting):
            continue
        # One weight of that name and one copy naming it: the name pairs them. Anything
        # more leaves the choice to no one here (which weight, or whose copy).
        one = fitting[0] if len(fitting) == 1 and claims[name] == 1 else None
        out[k] = RoleInfo(EMA, ema_of=one, ema_style="keras",
                          candidates=() if one else fitting)
    return out


def detached_refusal(examples: str) -> str:
    """Why tf_keras copies saved without their optimizer (:func:`tf_keras_detached`) whose
    names single out no weight are refused, after "N average(s) of the tf_keras optimizer ".

    Returns:
        the text from "cannot be paired" on, naming ``examples`` and what to save instead.
    """
    return ("cannot be paired: they were saved without their optimizer (beside the model, "
            "not as optimizer=), whose _model_variables_moving_average is the only record of "
            "which weight each averages, and their names do not single one out (several "
            "stored weights share the name, dtype and shape, or several copies name one "
            f"weight): {examples}; no option decides it from this file: save the optimizer "
            "with them, tf.train.Checkpoint(model=model, optimizer=optimizer), with distinct "
            "layer names (tf_keras.layers.Dense(..., name=...)); ckpt export --raw writes "
            "the raw weights")


def detached_hint(ckpt: Checkpoint, variables: dict, missing) -> str | None:
    """The sentence for a TF2 checkpoint whose variables read as weights include some named as
    another stored weight's Keras 3 ``use_ema`` average, with no variable read as an average.

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
    if not named:
        return None
    shown = ", ".join(f"{objects.paths.get(k, k)} ({full[k]})" for k in named[:3]) + (
        f" and {len(named) - 3} more" if len(named) > 3 else "")
    return (f"{DETACHED}{len(named)} variable(s) are named as a Keras 3 optimizer's use_ema "
            f"averages of weights stored here, {shown}, but were saved without that "
            "optimizer, whose _model_variables_moving_average is what proves a variable is a "
            "use_ema average and of which weight (a custom optimizer's own "
            "add_optimizer_variables(..., 'average') gets the same names, and two weight "
            "paths can flatten to one), so they are read as weights: save the optimizer "
            "with them, tf.train.Checkpoint(model=model, optimizer=optimizer); ckpt export "
            "--raw writes every stored variable as it is, these included")
