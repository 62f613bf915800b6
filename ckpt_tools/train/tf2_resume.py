"""Restore a ``ckpt train --api tf2`` run (plain or ``--strategy parameter-server``) for
``--resume``, in either layout of its averages.

``ckpt train`` saves the EMA averages as ``ema``: ONE dict keyed by the weights' slash paths
(``ema/conv1.Sweights/.ATTRIBUTES/VARIABLE_VALUE``, :func:`.tf2.averages_dict`). The layout
before commit 016f6d0 (review-29-attack-r109 F2) saved them through a module mirroring the
model's paths (``ema/conv1/weights/.ATTRIBUTES/VARIABLE_VALUE``, slashes as object-graph
edges): :func:`mirror_module` builds that layout again, for restoring only. A run saved
that way is restored through a ``tf.train.Checkpoint`` whose ``ema`` is that mirror over the
same shadow variables, so the averages continue from the saved values; the run's own
checkpoint (and so every new save) keeps the current dict layout. Any other layout of ``ema``
stays "cannot resume" and says which two layouts were looked for.
"""

from __future__ import annotations

import sys
from typing import Any

import tensorflow as tf

from .common import TrainError, first_line

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
CURRENT, BEFORE_016F6D0 = "current", "before 016f6d0"


def mirror_module(named: dict[str, Any], name: str = "ema") -> tf.Module:
    """A module whose attribute paths are the keys of ``named`` (``conv1/weights`` ->
    ``module.conv1["weights"]``, saved as ``<name>/conv1/weights``): the layout of the
    ``--strategy parameter-server`` momentum buffers, and of ``ema`` before commit 016f6d0
    (restored from older runs only; new runs save their averages with
    :func:`.tf2.averages_dict`). Frozen: checkpoints already written in it are read back
    through it, so it must not change.

    Args:
        named: variables (or ShardedVariables) by slash-separated path.
        name: the module name.

    Returns:
        The module (its nested dicts are tracked as checkpoint dependencies).
    """
    tree: dict = {}
    for path, var in named.items():
        *parents, leaf = path.split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = var
    module = tf.Module(name=name)
    for key, value in tree.items():
        setattr(module, key, value)  # dicts become tracked _DictWrapper nodes
    return module


def _escaped(path: str) -> str:
    # how tf.train.Checkpoint names a dict key in the object graph (slashes as .S, dots doubled)
    return path.replace(".", "..").replace("/", ".S")


def ema_layout(path: str, keys: set[str], paths: list[str]) -> str:
    """Which layout holds the averages of ``paths`` in the checkpoint ``path``.

    Args:
        path: the checkpoint prefix (for the message).
        keys: its keys (``tf.train.list_variables``).
        paths: the model's slash paths whose averages the run keeps.

    Returns:
        :data:`CURRENT` (``ema/conv1.Sweights``) or :data:`BEFORE_016F6D0`
        (``ema/conv1/weights``).

    Raises:
        TrainError: neither layout holds every average ("cannot resume").
    """
    if all(f"ema/{_escaped(p)}{VALUE}" in keys for p in paths):
        return CURRENT
    if all(f"ema/{p}{VALUE}" in keys for p in paths):
        return BEFORE_016F6D0
    first = paths[0]
    saved = sorted(k for k in keys if k.startswith("ema/"))
    raise TrainError(
        f"cannot resume from {path}: its averages ({', '.join(saved[:2]) or 'none'}"
        f"{', ...' if len(saved) > 2 else ''}) are in neither the layout ckpt train saves "
        f"(ema/{_escaped(first)}) nor the one it saved before 016f6d0 (ema/{first})"
    )


def restore_run(
    ckpt: tf.train.Checkpoint, path: str, shadows: dict[str, Any], **objects: Any
) -> str:
    """Restore ``path`` into the run's objects, reading the averages from either layout.

    Args:
        ckpt: the run's checkpoint (``ema=shadows`` plus ``objects``), which new saves use.
        path: the checkpoint prefix to resume from.
        shadows: the run's averages by the weight's slash path (the dict saved as ``ema``).
        **objects: the run's other checkpoint dependencies (``model=``, ``step=``, ...), as
            given to ``ckpt``.

    Returns:
        The layout read (:data:`CURRENT` or :data:`BEFORE_016F6D0`); for the older one a line
        on stderr says so, and that new saves use the current layout.

    Raises:
        TrainError: not an object-based tf2 checkpoint, an unknown ``ema`` layout, or a
            checkpoint that does not match the run's objects.
    """
    keys = {name for name, _ in tf.train.list_variables(path)}
    if OBJECT_GRAPH_KEY not in keys or not any(k.startswith("ema/") for k in keys):
        raise TrainError(
            f"cannot resume from {path}: not an object-based checkpoint written by --api tf2"
        )
    layout = ema_layout(path, keys, list(shadows))
    root = ckpt
    if layout == BEFORE_016F6D0:
        root = tf.train.Checkpoint(ema=mirror_module(shadows), **objects)
    try:
        root.restore(path).assert_existing_objects_matched()
    except (AssertionError, tf.errors.OpError, ValueError) as exc:
        raise TrainError(f"cannot resume from {path}: {first_line(exc)}") from None
    if root is not ckpt:
        ckpt.save_counter.assign(root.save_counter)
        first = next(iter(shadows))
        sys.stderr.write(
            f"resuming {path}: its averages were read from the layout before 016f6d0 "
            f"(ema/{first}); new checkpoints save them as ema/{_escaped(first)}\n"
        )
    return layout
