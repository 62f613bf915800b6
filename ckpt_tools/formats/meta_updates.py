"""Which variable each TF1 update op writes, read from a ``.meta``'s ``graph_def``.

An ``ExponentialMovingAverage`` and an optimizer may store tensors under the same name:
``ExponentialMovingAverage(name="Momentum")`` beside a ``MomentumOptimizer`` gives ``w`` a
``w/Momentum`` and a ``w/Momentum_1``, one the average and one the momentum buffer, in the
order the two were built. The keys do not tell which is which; the graph does:

- ``ema.apply()`` updates each shadow with ``<scope>/AssignMovingAvg[_N]`` (an ``AssignSub`` or
  ``AssignSubVariableOp`` whose first input is the shadow), the difference it subtracts being
  ``AssignMovingAvg/sub_1 = shadow - value``, where ``value`` reads the averaged variable;
- an optimizer updates its slots in ``Apply*``/``ResourceApply*`` ops
  (``Momentum/update_w/ResourceApplyMomentum``), whose first input is the trained variable and
  whose other variable inputs are its slots.

:func:`read_update_ops` walks ``graph_def`` (parsed only here and in :mod:`.meta_saver`:
``read_meta_graph`` skips it), following reads (``Identity``, ``ReadVariableOp``) back to the
variable ops.
"""

from __future__ import annotations

import re

from ..errors import CheckpointError, CorruptCheckpointError
from ._io import close_map, map_file
from ._record import Frozen
from .meta import proto_fields

_READS = frozenset({"Identity", "ReadVariableOp", "Snapshot"})
_VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
_ASSIGN_SUB = frozenset({"AssignSub", "AssignSubVariableOp"})
_MOVING_AVG = re.compile(r"(?:^|/)AssignMovingAvg(?:_\d+)?$")
_APPLY = re.compile(r"^(?:Resource)?(?:Sparse)?Apply[A-Z]\w*$")


class UpdateOps(Frozen):
    """What a graph's update ops write (variable op names, as the graph names them).

    Attributes:
        averages: shadow -> ``(averaged variable, EMA name scope)``: the shadow an
            ``AssignMovingAvg`` op updates from that variable (``ExponentialMovingAverage_1``:
            the scope of one ``ema.apply()``, as TF made it unique in the graph).
        slots: slot -> ``(trained variable, update op)`` for each variable input but the first
            of an optimizer's ``Apply*`` op.
    """

    averages: dict[str, tuple[str, str]]
    slots: dict[str, tuple[str, str]]
    _fields = ("averages", "slots")

    def __init__(self, averages: dict[str, tuple[str, str]],
                 slots: dict[str, tuple[str, str]]) -> None:
        self.__dict__.update(averages=averages, slots=slots)


def _op(tensor: str) -> str:
    return tensor.lstrip("^").split(":")[0]


def _nodes(graph) -> dict[str, tuple[str, list[str]]]:
    """``graph_def``'s nodes: name -> ``(op, data inputs)`` (control inputs left out)."""
    nodes = {}
    for number, wire, raw in proto_fields(graph):
        if number != 1 or wire != 2:
            continue
        name = op = ""
        inputs: list[str] = []
        for n, w, v in proto_fields(raw):
            if w != 2:
                continue
            if n == 1:
                name = bytes(v).decode("utf-8", "replace")
            elif n == 2:
                op = bytes(v).decode("utf-8", "replace")
            elif n == 3 and not bytes(v).startswith(b"^"):
                inputs.append(_op(bytes(v).decode("utf-8", "replace")))
        nodes[name] = (op, inputs)
    return nodes


def read_update_ops(path: str) -> UpdateOps | None:
    """Reads which shadows ``ema.apply()`` updates and which slots optimizers update in the
    ``.meta`` at ``path``.

    Returns:
        An :class:`UpdateOps`, or ``None`` where the file records no graph (a text-format or
        graph-less ``MetaGraphDef``) or cannot be read: then nothing is proven by it.
    """
    try:
        data = map_file(path)
    except (OSError, CheckpointError):  # gone or unreadable since (a URL): nothing proven
        return None
    try:
        graph = None
        for number, wire, value in proto_fields(data):
            if number == 2 and wire == 2:
                graph = value
        if graph is None:
            return None
        nodes = _nodes(graph)
    except CorruptCheckpointError:
        return None  # text format: the collections reader handles it
    finally:
        close_map(data)

    def variable(name: str) -> str | None:
        for _ in range(16):  # a read of a read of the variable
            op, inputs = nodes.get(name, ("", []))
            if op in _VARIABLE_OPS:
                return name
            if op not in _READS or not inputs:
                return None
            name = inputs[0]
        return None

    averages: dict[str, tuple[str, str]] = {}
    slots: dict[str, tuple[str, str]] = {}
    for name, (op, inputs) in nodes.items():
        if op in _ASSIGN_SUB and len(inputs) == 2:
            scope = name if _MOVING_AVG.search(name) else name.rpartition("/")[0]
            if not _MOVING_AVG.search(scope):
                continue
            shadow = variable(inputs[0])
            mul = nodes.get(inputs[1], ("", []))
            sub = nodes.get(mul[1][0], ("", [])) if mul[0] == "Mul" and mul[1] else ("", [])
            averaged = variable(sub[1][1]) if sub[0] == "Sub" and len(sub[1]) == 2 else None
            if shadow is not None and averaged is not None and shadow != averaged:
                averages[shadow] = (averaged, scope.rpartition("/")[0])
        elif _APPLY.match(op) and inputs:
            trained = variable(inputs[0])
            for tensor in inputs[1:]:
                slot = variable(tensor)
                if trained is not None and slot is not None and slot != trained:
                    slots.setdefault(slot, (trained, name))
    return UpdateOps(averages, slots)
