"""A custom training loop's order, stated for a TF-format checkpoint of a tf_keras model
(``--trainable NAMES --loop-order``; Python ``open_checkpoint(path, trainable=LoopOrder(...))``
or ``apply_ema(model, path, trainable=variables)``).

A tf_keras optimizer built with ``use_ema=True`` records its averages as the list
``optimizer/_model_variables_moving_average/0, 1, ...`` in the order it was first given the
variables, and names each after its variable. Where several weights share a name, dtype and
shape (two nested models each holding a layer ``fc``) that order alone places them, and the
file cannot show whether ``fit()`` built it (``model.trainable_variables``: ``--apply-order
tracked`` states that) or a custom loop whose ``apply_gradients()`` listed the variables
otherwise (``dec.trainable_variables + enc.trainable_variables``). This module takes the
loop's list as stated: the k-th recorded average is the k-th stated weight's, where every
average fits its weight (an open one among its candidates: same name, dtype and shape; a
proven one, by its unique name, exactly that weight), else the statement is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import roles as R
from .errors import EmaError, OptionError, VariableNotFoundError
from .formats.objgraph import ObjectGraph
from .tfk_order import recorded_averages
from .wording import counted


def resolve(path: str, objects: ObjectGraph | None, entries, trainable: Sequence[str],
            shown: Callable[[str], str | None] | None = None) -> list[str]:
    """The stated weights as checkpoint keys, in the stated order.

    Args:
        path: the checkpoint (for messages).
        objects: its object graph, or ``None`` (a name-based checkpoint).
        entries: its keys.
        trainable: names as ``ckpt list`` shows them (object paths) or checkpoint keys, one
            per weight; a :class:`~ckpt_tools.formats.keras.stated.LoopOrder` (its
            ``loop_order`` says it is a custom loop's list).
        shown: key -> the name ``ckpt list`` shows for it (:meth:`Checkpoint.path_of`:
            a Keras 3 model's weights keyed through the optimizer's lists show their own
            names, ``a/kernel``), accepted too (review-12-attack-r21 N1).

    Returns:
        `list[str]`: checkpoint keys.

    Raises:
        OptionError: the checkpoint holds no tf_keras optimizer averages an order could
            place (``--trainable`` decides nothing there), or ``loop_order`` is not stated
            (exit 2).
        VariableNotFoundError: a name matches no weight, or one is named twice.
    """
    if not recorded_averages(objects):
        raise OptionError(
            f"{path}: --trainable (Python: trainable=) decides only for Keras files (.keras, "
            ".weights.h5, .h5), which may not record it, and for a tf_keras model's "
            "save_weights() whose optimizer recorded use_ema averages; this TensorFlow "
            "checkpoint's names and object graph record what it would state, so it cannot "
            "apply: omit it")
    if not getattr(trainable, "loop_order", False):
        raise OptionError(
            f"{path}: --trainable on a TensorFlow checkpoint states the order a custom "
            "training loop's first apply_gradients() listed the variables in: add "
            "--loop-order (Python: loop_order=True); if fit() built the optimizer, pass "
            "--apply-order tracked instead")
    assert objects is not None  # recorded_averages read it
    by_path = {objects.paths.get(k, k): k for k in entries}
    if shown is not None:  # the names 'ckpt list' shows, where they differ
        by_path.update({p: k for k in entries for p in [shown(k)] if p and p not in by_path})
    keys: list[str] = []
    for name in trainable:
        key = name if name in entries else by_path.get(name)
        if key is None:
            raise VariableNotFoundError(
                f"{path}: --trainable names {name!r}, which is not a variable of the "
                "checkpoint: name each weight as 'ckpt list' shows it (or by its key, "
                "'ckpt list --json'), in the order the loop listed them")
        if key in keys:
            raise VariableNotFoundError(f"{path}: --trainable names {name!r} twice")
        keys.append(key)
    return keys


def place(path: str, objects: ObjectGraph, info: dict, stated: list[str]
          ) -> dict[str, str]:
    """Pairs the recorded averages with the ``stated`` weights by position, in ``info``
    (key -> :class:`~ckpt_tools.roles.RoleInfo`, updated in place).

    Returns:
        `dict[str, str]`: average key -> weight key, for the averages only the statement
        places (the others' names prove them).

    Raises:
        EmaError: the statement does not fit the averages: another count, or a weight whose
            name, dtype or shape is not its average's (exit 6).
    """
    averages = recorded_averages(objects)
    if len(averages) != len(stated):
        raise EmaError(
            f"{path}: --trainable states {counted(len(stated), 'weight')}, but the tf_keras "
            "optimizer "
            f"recorded {counted(len(averages), 'average')}, one per variable it was built with: "
            "state every trainable weight, in the loop's order")
    placed: dict[str, str] = {}
    for i, (a, w) in enumerate(zip(averages, stated, strict=True)):
        ri = info.get(a)
        if ri is None or ri.role != R.EMA:
            raise EmaError(f"{path}: the tf_keras optimizer's average #{i} is not readable "
                           "as an average, so --trainable cannot place it")
        fits = w in ri.candidates if not ri.ema_of else ri.ema_of == w
        if not fits:
            held = (ri.ema_of,) if ri.ema_of else ri.candidates[:3]
            whose = " or ".join(objects.paths.get(c, c) for c in held)
            raise EmaError(
                f"{path}: --trainable places {objects.paths.get(w, w)} at position {i}, but "
                f"the optimizer's average there is of {whose} (its name, dtype "
                "and shape): the statement is not the loop's order; state every trainable "
                "weight in the order its first apply_gradients() listed them")
        if not ri.ema_of:
            info[a] = R.RoleInfo(R.EMA, ema_of=w, ema_style=ri.ema_style)
            placed[a] = w
    return placed
