"""What the save ops of a live TF1 graph write each key from, so that :func:`ema_saver` without
``checkpoint=`` never follows TF's naming where the graph it is given shows the names lie.

A graph imported from the ``.meta`` of a swapping Saver (``Saver({v.op.name: ema.average(v),
ema.average_name(v): v})``) holds that Saver's save op: it writes the key
``W/ExponentialMovingAverage`` from ``W`` itself, and ``W`` from the shadow. A Saver that
restores ``W/ExponentialMovingAverage`` into ``W`` (TF's naming, ``variables_to_restore()``)
would restore the raw weights as the averages with no error (review-17-user-u19 F9). The save
op is in the graph: each of its keys is read back (``tensor_names``) with the variable each
tensor is read from (through ``Identity``/``ReadVariableOp`` reads, as
:mod:`ckpt_tools.formats.meta_saver` reads a ``.meta``).

Savers :func:`ema_saver` built are left out (:func:`mark_own_saver`): they map the average's key
into ``W`` on purpose, and their save ops write it from ``W``.
"""

from __future__ import annotations

import weakref

from .formats.graph_def import READS

_SAVE_OPS = {"SaveV2": 3, "SaveSlices": 3, "Save": 2}  # op -> index of its first tensor input
_OWN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> our save op names


def mark_own_saver(graph, saver) -> None:
    """Records ``saver`` (built by :func:`ema_saver` in ``graph``) as one whose save op maps
    averages into model variables on purpose."""
    scope = saver.saver_def.save_tensor_name.rpartition("/")[0]
    _OWN.setdefault(graph, set()).add(scope + "/")


def save_op_writers(graph) -> dict[str, tuple[str, set[str]]]:
    """Key -> (a save op writing it, the variables (op names) it is written from), over every
    save op of ``graph`` not built by :func:`ema_saver`. A key several save ops write from
    different variables lists them all."""
    from tensorflow import make_ndarray

    own = _OWN.get(graph, set())
    out: dict[str, tuple[str, set[str]]] = {}
    for op in graph.get_operations():
        first = _SAVE_OPS.get(op.type)
        if first is None or any(op.name.startswith(s) for s in own):
            continue
        inputs = list(op.inputs)
        if len(inputs) <= first or inputs[1].op.type != "Const":
            continue
        keys = make_ndarray(inputs[1].op.get_attr("value")).ravel().tolist()
        tensors = inputs[first:]
        if len(keys) != len(tensors):
            continue  # not the layout a Saver builds: say nothing
        for key, tensor in zip(keys, tensors, strict=True):
            key = key.decode() if isinstance(key, bytes) else str(key)
            out.setdefault(key, (op.name, set()))[1].add(_variable_of(tensor.op))
    return out


def _variable_of(op) -> str:
    for _ in range(16):
        if op.type not in READS or not op.inputs:
            break
        op = op.inputs[0].op
    return op.name


def contradicted(writers: dict[str, tuple[str, set[str]]], used: dict[str, tuple[list, bool]],
                 ema_name: str) -> list[str]:
    """Lines for each key of ``used`` (key -> (the variables restored from it, whether it is
    their average's key by TF's naming)) that a save op of the graph writes from other
    variables than TF's naming says: the shadow ``<v>/<ema_name>`` for an average's key,
    the variable itself for its own."""
    lines = []
    for key, (variables, average) in used.items():
        found = writers.get(key)
        if found is None:
            continue
        names = [v.op.name for v in variables]
        expected = {f"{n}/{ema_name}" for n in names} if average else set(names)
        if not found[1] <= expected:
            what = f"{names[0]}'s average" if average else f"{names[0]}'s own value"
            lines.append(f"{found[0]} writes {key} ({what} by TF's naming) from "
                         + ", ".join(sorted(found[1])))
    return lines
