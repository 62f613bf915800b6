"""EMA copies of a Keras optimizer that has taken no step are not averages.

Keras 3 creates a ``use_ema`` optimizer's copies as zeros (``add_optimizer_variables(vars,
"average")``) and sets them to the weights only in the first ``apply()`` (momentum 0 while
``iterations == 0``). A file saved after the optimizer was built but before its first step (a
resume or fine-tune flow that builds it, loads weights and saves) records ``iteration`` 0 and
copies that are Keras' initial zeros: exported as "EMA values" every kernel would be zero
(review-15-attack-r30 F2c). The file's own counter proves no average exists yet: refused, exit 6,
``--raw`` the way out.

tf_keras (Keras 2) creates each copy as its weight (``initial_value=var``): at iteration 0 a copy
is the weight as it was when the optimizer was built. Where every copy still equals its weight
the copies are the weights, and nothing wrong is written; where one differs (weights loaded or
changed after the build) it is refused the same way.
"""

from __future__ import annotations

from .errors import EmaError

# a Keras 3 optimizer's step counter in a tf.train.Checkpoint, under the optimizer's object path
_ITERATIONS = "/_iterations/.ATTRIBUTES/VARIABLE_VALUE"
_VARIABLES = "/_variables/"


def _count(ckpt, key: str) -> int | None:
    import numpy as np

    try:
        value = np.asarray(ckpt.tensor(key))
        return int(value.reshape(())) if value.size == 1 and value.dtype.kind in "iu" else None
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def _error(path, counter: str) -> EmaError:
    return EmaError(
        f"{path}: the optimizer has taken no step (the file records {counter} = 0): its EMA copies "
        "are Keras' initial values, not averages; use the weights as they are (--raw; Python: "
        "use the model's own weights)")


def refuse_unstepped(ckpt, averages: dict[str, str | None] | None = None) -> None:
    """A Keras ``.keras`` / ``.weights.h5`` / legacy ``.h5`` whose optimizer records iteration 0
    (module docstring). ``averages``: the copies used (keys -> their weights' keys), by default
    the layout's."""
    layout = getattr(ckpt.reader, "keras", None)
    pairs = dict(layout.averages if averages is None else averages) if layout else {}
    if not pairs or not layout.iteration or _count(ckpt, layout.iteration) != 0:
        return
    if getattr(ckpt.reader, "by_tf_keras", False) and _copies_are_weights(ckpt, pairs):
        return
    raise _error(ckpt.path, "the optimizer's iteration count")


def refuse_unstepped_tf2(ckpt, variables, pairs) -> None:
    """A tf.train.Checkpoint whose Keras 3 optimizer (``<path>/_iterations``) records 0 steps
    beside the ``use_ema`` copies (``<path>/_variables/N``) paired here."""
    copies = {}
    for source, target in pairs:
        v = variables.get(source)
        if source == target or v is None or getattr(v, "ema_style", None) != "keras":
            continue
        owner = source.rpartition(_VARIABLES)[0]
        if owner and _count(ckpt, owner + _ITERATIONS) == 0:
            copies[source] = target
    if copies:
        raise _error(ckpt.path, f"{next(iter(copies)).rpartition(_VARIABLES)[0]}/_iterations")


def _copies_are_weights(ckpt, pairs: dict[str, str | None]) -> bool:
    import numpy as np

    for copy, weight in pairs.items():
        if weight is None:
            return False
        a, b = np.asarray(ckpt.tensor(copy)), np.asarray(ckpt.tensor(weight))
        if a.shape != b.shape or a.tobytes() != b.tobytes():
            return False
    return True


__all__ = ["refuse_unstepped", "refuse_unstepped_tf2"]
