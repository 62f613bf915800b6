"""Which variables a TF1 ``.meta``'s ``ema.apply()`` updates average a tensor no variable
holds (``bn_ema.apply([mean, variance])`` of ``tf.nn.moments``: a hand-made batch norm's
statistics), read from its ``graph_def`` as :mod:`.meta_updates` reads the update ops."""

from __future__ import annotations

from ..errors import CheckpointError
from .graph_def import op_name, read_branches, read_graphs, through_reads
from .meta_update_ops import ASSIGN_SUB, MOVING_AVG, NO_NODE, SWITCHES, VARIABLE_OPS


def tensor_average_updates(path: str) -> dict[str, tuple[str, str]]:
    """Shadow variable op -> ``(averaged op, EMA name scope)`` for each ``AssignMovingAvg``
    update in ``ExponentialMovingAverage.apply()``'s form (grouped by a ``NoOp`` of its
    scope's name) that averages a tensor no variable holds (``bn_ema.apply([mean,
    variance])`` of ``tf.nn.moments``: a hand-made batch norm's statistics), in the ``.meta``'s
    graph at ``path`` or in a control-flow-v2 ``tf.cond``'s branch functions, whose arguments
    are read as the ops the cond passes in (review-16-attack-r33 F4). ``{}`` where the file
    shows none or cannot be read."""
    try:
        graphs = read_graphs(path)
        branches = [b for b in read_branches(path).branches if b.graph == 0] if graphs else []
    except (OSError, CheckpointError):
        return {}
    if not graphs:
        return {}
    main = graphs[0].nodes  # the .meta's graph, whose tf.cond ops call the branches

    def outer(name: str) -> tuple[str, bool]:
        """The main graph's op ``name`` reads (through the ``Switch`` a control-flow-v1
        ``tf.cond`` passes it into a branch by, as :func:`.meta_updates.read_update_ops` reads
        variables: review-16-attack-r34 F13), and whether it is a variable op."""
        name = op_name(name)
        for _ in range(8):
            name = through_reads(main, name)
            head = main.head(name)
            if head is None or head[0] not in SWITCHES or not head[1]:
                break
            name = head[1]
        return name, main.op(name) in VARIABLE_OPS

    out: dict[str, tuple[str, str]] = {}
    calls = [(main, op_name)] + [(b.nodes, dict(zip(b.args, b.outer, strict=True)).get)
                                 for b in branches]  # read_branches: as many of each
    for nodes, arg in calls:
        for shadow, value, scope in _tensor_updates(nodes, arg):
            if shadow is None or value is None:
                continue
            (s, s_var), (v, v_var) = outer(shadow), outer(value)
            if s_var and not v_var and v in main:
                out[s] = (v, scope)
    return out


def _tensor_updates(nodes, arg):
    """``(shadow, value, scope)`` of each ``AssignMovingAvg`` update grouped by a ``NoOp`` of
    its scope in ``nodes`` (a graph's or a function's), ``shadow`` and ``value`` the inputs
    read (through reads) as ``arg`` gives them: a name of the graph, or ``None``."""
    def read(name: str) -> str:
        for _ in range(8):
            node = nodes.get(op_name(name))
            if node is None or node.op not in ("Identity", "ReadVariableOp") or not node.inputs:
                break
            name = node.inputs[0]
        return op_name(name)

    for name, node in nodes.items():
        if node.op not in ASSIGN_SUB or len(node.inputs) != 2:
            continue
        at = name if MOVING_AVG.search(name) else name.rpartition("/")[0]
        if not MOVING_AVG.search(at):
            continue
        scope = at.rpartition("/")[0]
        mul = nodes.get(op_name(node.inputs[1]), NO_NODE)
        sub = nodes.get(op_name(mul.inputs[0]), NO_NODE) if mul.op == "Mul" and mul.inputs \
            else NO_NODE
        if sub.op != "Sub" or len(sub.inputs) != 2 or nodes.get(scope, NO_NODE).op != "NoOp":
            continue
        yield arg(read(node.inputs[0])), arg(read(sub.inputs[1])), scope
