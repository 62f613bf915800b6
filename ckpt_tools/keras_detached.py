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
