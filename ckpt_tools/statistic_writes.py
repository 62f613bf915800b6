"""Whether a write of a TF1 variable that a ``.meta``'s graph holds is a batch norm
statistic's update, proven by the graph's ops, never by the variable's name.

A batch norm in training mode keeps each statistic as a running average of a batch moment:
``assign_moving_average(moving_mean, mean, decay)`` (tf_slim's ``batch_norm``, Keras'
``BatchNormalization``: ``moving_mean -= (moving_mean - mean) * (1 - decay)``) or a
hand-written ``tf1.assign(moving_mean, d * moving_mean + (1 - d) * mean)``, where ``mean`` is a
``Mean`` op (``tf.nn.moments``, ``tf.reduce_mean``) of the layer's input. A fine-tune's step
writes a gradient (``assign_sub(v, lr * g)``), or an optimizer's ``Apply*`` does: whatever the
variable is named (``moving_mean`` too), that is no statistic's update
(review-25-attack-r88 F1).
"""

from __future__ import annotations

import re

from .checkpoint import Checkpoint
from .errors import CheckpointError
from .formats.graph_def import read_graphs, through_reads
from .formats.graph_nodes import op_name

# ops a batch moment passes through unchanged in value (tf.nn.moments squeezes its Means)
_PASS = frozenset({"Identity", "Snapshot", "Squeeze", "Cast", "StopGradient", "Reshape"})
_ASSIGN = frozenset({"Assign", "AssignVariableOp"})
_ASSIGN_SUB = frozenset({"AssignSub", "AssignSubVariableOp"})
_ADD = frozenset({"Add", "AddV2"})
# an op tf.gradients() made: in its "gradients" scope, or a *Grad kernel
_GRADIENT = re.compile(r"(?:^|/)gradients(?:_\d+)?/")
_GRAD_OP = re.compile(r"Grad(?:V\d+)?$")
_MAX_SEEN = 50_000  # ops read back from a moment at most; beyond, nothing is proven


def statistic_write(ckpt: Checkpoint, variable: str, op: str) -> bool:
    """Whether the ``.meta``'s op ``op`` writing ``variable`` (graph op names, as
    :class:`~ckpt_tools.formats.meta_updates.UpdateOps`' ``writers`` give them) is a batch
    norm statistic's update: a running average of ``variable`` itself toward a batch moment
    (:func:`batch_moment`), in either form the module names. Returns ``False`` without a
    ``.meta``, where it cannot be read, or where ``op`` is in none of its graphs (a function's
    op: not read, so not proven)."""
    meta = ckpt.meta
    if meta is None:
        return False
    try:
        graphs = read_graphs(meta.path)
    except (OSError, CheckpointError):
        return False
    return any(op in g.nodes and _moving_average_write(g.nodes, variable, op) for g in graphs)


def _moving_average_write(nodes, variable: str, op: str) -> bool:
    """:func:`statistic_write` in one graph's ``nodes``."""
    node = nodes[op]
    if len(node.inputs) < 2 or through_reads(nodes, op_name(node.inputs[0])) != variable:
        return False
    value = nodes.get(op_name(node.inputs[1]))
    if value is None:
        return False
    if node.op in _ASSIGN_SUB:  # v -= (v - m) * d
        return any(_difference_to_moment(nodes, variable, x) for x in _factors(nodes, value))
    if node.op in _ASSIGN and value.op in _ADD and len(value.inputs) == 2:  # a*v + b*m
        sides = [nodes.get(op_name(x)) for x in value.inputs]
        if any(s is None for s in sides):
            return False
        own = [any(_reads(nodes, variable, f) for f in _factors(nodes, s)) for s in sides]
        moment = [any(batch_moment(nodes, f, variable) for f in _factors(nodes, s))
                  for s in sides]
        return (own[0] and moment[1]) or (own[1] and moment[0])
    return False


def _factors(nodes, node) -> list[str]:
    """The op names ``node`` multiplies (``Mul``'s two inputs), else ``node``'s own inputs'
    one-element reading: the term itself (``v`` alone in ``v + m``)."""
    if node.op == "Mul" and len(node.inputs) == 2:
        return [op_name(x) for x in node.inputs]
    return [op_name(x) for x in node.inputs[:1]] if node.op in _PASS else []


def _reads(nodes, variable: str, name: str) -> bool:
    """Whether op ``name`` reads ``variable`` (through reads)."""
    return through_reads(nodes, name) == variable


def _difference_to_moment(nodes, variable: str, name: str) -> bool:
    """Whether op ``name`` is ``variable - m`` for a batch moment ``m``."""
    node = nodes.get(name)
    return node is not None and node.op == "Sub" and len(node.inputs) == 2 and _reads(
        nodes, variable, op_name(node.inputs[0])) and batch_moment(
            nodes, op_name(node.inputs[1]), variable)


def batch_moment(nodes, name: str, variable: str = "") -> bool:
    """Whether op ``name`` of a graph's ``nodes`` is a batch moment: a ``Mean`` (through
    squeezes, casts and reads) of a tensor that no gradient op and no read of ``variable``
    (the statistic itself) makes. A gradient's ``Mean`` (``assign(v, d * v + lr *
    reduce_mean(g))``) or a mean of the statistic's own value is none."""
    for _ in range(16):
        node = nodes.get(name)
        if node is None or node.op not in _PASS or not node.inputs:
            break
        name = op_name(node.inputs[0])
    node = nodes.get(name)
    if node is None or node.op != "Mean" or not node.inputs:
        return False
    seen: set[str] = set()
    todo = [op_name(node.inputs[0])]
    while todo:
        each = todo.pop()
        if each in seen:
            continue
        seen.add(each)
        if len(seen) > _MAX_SEEN:
            return False
        up = nodes.get(each)
        if up is None:
            continue
        if _GRADIENT.search(each) or _GRAD_OP.search(up.op) or (variable and each == variable):
            return False
        todo.extend(op_name(x) for x in up.inputs)
    return True
