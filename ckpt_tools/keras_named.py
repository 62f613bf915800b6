"""A legacy Keras ``.h5`` applied to a live model by the names its EMA copies carry.

A legacy ``.h5`` names each optimizer variable after its weight (tf_keras
``Adam/average/d1/bias:0``, Keras 3 ``adam/d1_bias_average``) and stores the model's weights
in ``model.weights`` order (Keras' legacy loader reads them by position). Where a copy's name
is one weight's, it is that weight's average whatever order the optimizer was built in, so
:func:`~ckpt_tools.apply_keras_ema` puts it on the live variable at that weight's position,
as ``ckpt export`` pairs it (review-12-attack-r18 F11), never by the position of the copies
among ``model.trainable_variables`` (a custom loop's order differs).
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .errors import EmaError
from .formats.keras.layout import KerasLayout
from .formats.keras.stated import LoopOrder

__all__ = ["by_names", "legacy_stated"]


def _path(variable) -> str:
    path = getattr(variable, "path", None)
    return str(path) if path else str(variable.name).rsplit(":", 1)[0]


def by_names(ckpt: Checkpoint, layout: KerasLayout, every: list):
    """``(variables, EMA copy keys)``: each copy of a legacy ``.h5`` with the live variable at
    its weight's position in ``model.weights``; ``(None, None)`` where a copy is not paired
    (its name is several weights': ``trainable=`` decides) or the file holds none.

    Raises:
        EmaError: the model has another number of weights than the file.
    """
    if layout.kind != "legacy" or not layout.averages \
            or None in layout.averages.values():
        return None, None
    if len(every) != len(layout.model):
        raise EmaError(f"{ckpt.path} holds {len(layout.model)} model weights but the model has "
                       f"{len(every)}: build the model with the architecture that wrote it")
    at = {k: i for i, k in enumerate(layout.model)}
    keys = list(layout.averages)
    return [every[at[layout.averages[a]]] for a in keys], keys


def legacy_stated(layout: KerasLayout, every: list, trainable: list,
                  loop_order: bool) -> list[str]:
    """``trainable=`` for a legacy ``.h5`` as its weight keys: a model variable by its
    position in ``model.weights`` (the file's order, as Keras' legacy loader reads it), a
    string as ``--trainable`` takes it (``model_weights/`` may be left out).

    Returns:
        `list[str]` (a :class:`~.formats.keras.stated.LoopOrder` with ``loop_order``).
    """
    at = {id(v): i for i, v in enumerate(every)}
    fits = len(every) == len(layout.model)
    names = [v if isinstance(v, str) else layout.model[at[id(v)]]
             if fits and id(v) in at else _path(v) for v in trainable]
    return LoopOrder(names) if loop_order else names
