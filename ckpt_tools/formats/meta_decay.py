"""The decay of an ``ExponentialMovingAverage.apply()``'s update, as the ``.meta``'s graph
shows it, for telling one EMA object applied twice from two objects of one name
(review-26-attack-r92 F1, review-27-attack-r100 F1).

Each ``apply()`` converts the object's decay in its own name scope (``fast/decay``,
``fast_1/decay``) and each of its ``AssignMovingAvg`` updates multiplies by ``1 - decay``
(cast to the variable's dtype where it differs). A float decay becomes a constant of each
scope: its number is what the scopes share (:func:`decay_text`). A decay given as a tensor
(``tf.constant(0.5)``, a ``placeholder_with_default``, a schedule) is passed through as it
is, so one object's ``apply()`` calls all read the very same tensor, and a variable is read
(``ReadVariableOp`` in each scope, or the ``read`` snapshot of a reference variable) from
the very same variable op: :func:`decay_source` names that node. Two objects given
different tensors or variables read different nodes, and one read through a control-flow
context's ``Switch``/``Enter`` (``apply()`` inside a v1 ``tf.cond``) reads another node
than one outside it: such decays are not shown equal.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from .graph_def import attr_entry
from .graph_nodes import READS, GraphNode, op_name
from .meta import proto_fields
from .meta_on_read import VARIABLE_OPS, const_number

_NO_NODE = GraphNode("", [], [])
Said = Callable[[str], "str | None"]  # a tensor -> its node as a decay's identity names it


def _one_minus(nodes, mul: GraphNode) -> GraphNode:
    """The ``1 - decay`` an ``AssignMovingAvg`` update's ``Mul`` takes (through its cast), or
    an empty node."""
    decay = nodes.get(op_name(mul.inputs[1]), _NO_NODE) if mul.op == "Mul" and \
        len(mul.inputs) == 2 else _NO_NODE
    if decay.op == "Cast" and decay.inputs:
        decay = nodes.get(op_name(decay.inputs[0]), _NO_NODE)
    return decay if decay.op == "Sub" and len(decay.inputs) == 2 else _NO_NODE


def decay_text(nodes, mul: GraphNode, scope: str, said: Said | None = None) -> str | None:
    """The decay of an ``AssignMovingAvg`` update whose decay ``apply()`` builds itself in
    ``scope`` (the ``.meta_updates`` reading proves it), as text: the number of its
    ``<scope>/decay`` constant (``0.5``: the shortest text giving the same float32), or
    ``min(0.5, (1 + n) / (10 + n)) with n = variable 'global_step'`` where ``num_updates``
    bounds it, naming the counter it reads (:func:`_counter`; ``min(tensor 'd', ...)`` where
    the bound is a tensor, :func:`decay_source`).

    In a library function's ``nodes`` (an ``apply()`` inside a control-flow-v2 ``tf.cond``,
    :class:`~.graph_nodes.FunctionNodes`) its node names are the function's own, so a tensor
    or variable named there proves nothing about the graph's (review-28-attack-r103 F3):
    numbers are read, and a tensor or variable only where ``said`` (:func:`argument_said`)
    names the graph's node the function is passed it as (a counter captured into the branch,
    review-28-attack-r104 F2).

    Returns:
        `str | None`: ``None`` where the decay is not read (in a function: where it is not
        numbers alone or the graph's nodes passed in).
    """
    if not hasattr(nodes, "serialized"):
        return None
    said = _sayer(nodes, said)
    decay = _one_minus(nodes, mul)
    if not decay.inputs:
        return None
    source = op_name(decay.inputs[1])
    if source == scope + "/Minimum":
        bound = nodes.get(source, _NO_NODE).inputs
        if not bound:
            return None
        value = const_number(nodes, op_name(bound[0]))
        named = _shortest(value) if value is not None else said(bound[0])
        counter = _counter(nodes, scope, said)
        return None if named is None or counter is None else \
            f"min({named}, (1 + n) / (10 + n)) with n {counter}"
    value = const_number(nodes, source)
    return None if value is None else _shortest(value)


def decay_source(nodes, mul: GraphNode, said: Said | None = None) -> str | None:
    """The node an ``AssignMovingAvg`` update whose decay ``apply()`` does not build itself
    reads its decay from, through reads: ``tensor 'dc5'`` (a ``Const``, a
    ``PlaceholderWithDefault``, a schedule's last op; ``'split:1'`` for another output than
    the first) or ``variable 'decay'`` (the variable op a ``ReadVariableOp`` or ``read``
    snapshot reads). Two updates naming the same node read one decay. In a function's
    ``nodes``, the graph's node it is passed as (``said``, :func:`argument_said`).

    Returns:
        `str | None`: ``None`` where ``nodes`` are a function's and ``said`` names no graph
        node (its names are its own), or the update does not multiply by ``1 - decay`` (a
        constant ``1``).
    """
    if not hasattr(nodes, "serialized"):
        return None
    decay = _one_minus(nodes, mul)
    if not decay.inputs or const_number(nodes, op_name(decay.inputs[0])) != 1.0:
        return None
    said = _sayer(nodes, said)
    return _float_counted(nodes, decay.inputs[1], said) or said(decay.inputs[1])


def float_counted_text(nodes, mul: GraphNode, scope: str, said: Said | None = None) -> str | None:
    """The decay of an ``AssignMovingAvg`` update where it is the one ``apply()`` builds in
    ``scope`` from a float32 ``num_updates`` (``tf.cast(step, tf.float32)``, a float variable),
    which it does not cast, so the scope has no ``<scope>/num_updates`` node: ``1 - d`` with
    ``d`` the scope's own ``<scope>/Minimum(decay, <scope>/truediv)``, the ratio
    ``(1.0 + n) / (10.0 + n)`` of TF's formula (``<scope>/add``, ``<scope>/add_1``, those
    constants) over one counter node ``n`` named through reads, and ``decay`` a number or a
    named node (:func:`_float_counted`). As :func:`decay_text` spells it:
    ``min(0.5, (1 + n) / (10 + n)) with n = tensor 'Cast'``. In a function's ``nodes``, the
    counter only where ``said`` names the graph's node it is passed as.

    Returns:
        `str | None`: ``None`` where the update's decay is not so built (other constants, another
        op, a counter or bound not named).
    """
    if not hasattr(nodes, "serialized"):
        return None
    decay = _one_minus(nodes, mul)
    if not decay.inputs or const_number(nodes, op_name(decay.inputs[0])) != 1.0 or \
            decay.inputs[1] not in (scope + "/Minimum", scope + "/Minimum:0"):
        return None
    return _float_counted(nodes, decay.inputs[1], _sayer(nodes, said))


def _float_counted(nodes, tensor: str, said: Said) -> str | None:
    """The decay ``apply()`` bounds by a float ``num_updates`` (``tf.cast(step, tf.float32)``,
    a float variable), as :func:`decay_text` spells it: ``min(0.5, (1 + n) / (10 + n)) with
    n = tensor 'Cast'``, naming the counter (note s28b). ``apply()`` casts the counter to
    float32 as ``<scope>/num_updates``; a float32 one is not cast, so the scope has no such
    node and ``<scope>/add``, ``<scope>/add_1`` read the counter itself (a float variable:
    each through its own read of the one variable). Each scope has its own
    ``Minimum``: named by its node, one object's ``apply()`` calls would never read one decay.

    Returns:
        `str | None`: ``None`` where ``tensor`` is not ``<scope>/Minimum`` of
        ``(1 + n) / (10 + n)`` over one named counter ``n`` and a read bound.
    """
    name, _sep, port = tensor.partition(":")
    scope = name.rpartition("/")[0]
    node = nodes.get(name, _NO_NODE)
    if port not in ("", "0") or not scope or name != scope + "/Minimum" or \
            node.op != "Minimum" or len(node.inputs) != 2 or \
            op_name(node.inputs[1]) != scope + "/truediv":
        return None
    ratio = nodes.get(scope + "/truediv", _NO_NODE)
    if ratio.op != "RealDiv" or [op_name(t) for t in ratio.inputs] != [scope + "/add",
                                                                       scope + "/add_1"]:
        return None
    counted = set()
    for part, first in (("add", 1.0), ("add_1", 10.0)):
        add = nodes.get(f"{scope}/{part}", _NO_NODE)
        if add.op not in ("Add", "AddV2") or len(add.inputs) != 2 or \
                const_number(nodes, op_name(add.inputs[0])) != first:
            return None
        counted.add(said(add.inputs[1]))  # a float variable: read once for each
    counter = counted.pop() if len(counted) == 1 else None
    bound = const_number(nodes, op_name(node.inputs[0]))
    named = _shortest(bound) if bound is not None else said(node.inputs[0])
    return None if named is None or counter is None else \
        f"min({named}, (1 + n) / (10 + n)) with n = {counter}"


def argument_said(function, outer: dict[str, str], graph) -> Said:
    """For a library function's nodes (``function``) called with the graph's (``graph``)
    tensors ``outer`` (argument name -> the graph's tensor passed, ``""``: none; see
    :class:`~.graph_def.Branch`): what names the graph's node a function tensor is, read
    through the function's reads back to an argument (``variable 'g_step'`` where a counter
    variable's handle is passed in), as :func:`_node_said` names a graph tensor. A tensor the
    function makes itself is named by nothing (``None``): its names are its own.
    The caller passes no ``outer`` for a loop's function, whose arguments change."""
    def said(tensor: str) -> str | None:
        if tensor.startswith("^"):
            return None
        name = op_name(tensor)
        for _ in range(16):
            node = function.get(name)
            if node is None:
                break
            if node.op not in READS or not node.inputs or node.inputs[0].startswith("^"):
                return None  # made in the function: its own name
            name = op_name(node.inputs[0])
        passed = outer.get(name)
        return _node_said(graph, passed) if passed else None

    return said


def _sayer(nodes, said: Said | None) -> Said:
    """``said``, or how ``nodes`` name a tensor's node themselves: a graph's by
    :func:`_node_said`, a function's by nothing (its names are its own)."""
    if said is not None:
        return said
    if getattr(nodes, "function", False):
        return lambda _tensor: None
    return lambda tensor: _node_said(nodes, tensor)


def _counter(nodes, scope: str, said: Said) -> str | None:
    """The ``num_updates`` an ``apply()`` in ``scope`` reads (``<scope>/num_updates``, its
    cast to float): ``= variable 'g_step'``, ``= tensor 'n'``, or ``= 1000000`` where it is
    a constant, by its value (a Python number becomes a constant of each scope). One object
    reads the same counter in each of its ``apply()`` calls; two objects given the same decay
    and different counters (a GAN's ``g_step``, ``d_step``) decay differently
    (review-28-attack-r103 F1). ``said`` names a tensor's node (:func:`_sayer`).

    Returns:
        `str | None`: ``None`` where the counter is not read.
    """
    cast = nodes.get(scope + "/num_updates", _NO_NODE)
    if cast.op != "Cast" or not cast.inputs:
        return None
    if cast.inputs[0].startswith("^"):
        return None
    held = _const_value(nodes, op_name(cast.inputs[0]))
    if held is not None:
        return f"= {held}"
    node = said(cast.inputs[0])
    return None if node is None else f"= {node}"


def _const_value(nodes, name: str) -> str | None:
    """The value of the ``Const`` op ``name``: its one integer (``int_val``/``int64_val``) or
    float, else its ``value`` attribute (dtype, shape, contents) serialized, as hex: equal
    for two constants of one value, whatever their names; ``None`` for another op."""
    number = const_number(nodes, name)
    if number is not None:
        return repr(number)
    raw = nodes.serialized(name) if nodes.op(name) == "Const" else None
    for field, wire, value in proto_fields(raw) if raw is not None else ():
        if field == 5 and wire == 2:  # attr map entries
            key, attr = attr_entry(value)
            if key == "value" and attr is not None:
                ints = [v for n, w, v in proto_fields(attr) if n == 8 and w == 2]
                found = [v if w == 0 else _varints(v) for n, w, v in proto_fields(ints[0])
                         if n in (7, 10) and w in (0, 2)] if len(ints) == 1 else []
                found = [v[0] if isinstance(v, list) and len(v) == 1 else v for v in found]
                return str(found[0]) if len(found) == 1 and isinstance(found[0], int) else \
                    "constant " + bytes(attr).hex()
    return None


def _varints(packed) -> list[int]:
    """The varints of a packed repeated integer field."""
    out, value, shift = [], 0, 0
    for byte in bytes(packed):
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            out.append(value)
            value, shift = 0, 0
    return out


def _node_said(nodes, tensor: str) -> str | None:
    """The node ``tensor`` reads, through reads (``Identity``, ``ReadVariableOp``) of a first
    output, as ``variable '<op>'`` or ``tensor '<op>[:port]'``; ``None`` for a control input
    or a node the graph lacks."""
    if tensor.startswith("^"):
        return None
    for _ in range(16):
        name, _sep, port = tensor.partition(":")
        node = nodes.get(name)
        if node is None:
            return None
        if node.op in READS and port in ("", "0") and node.inputs \
                and not node.inputs[0].startswith("^"):
            tensor = node.inputs[0]
            continue
        if node.op in VARIABLE_OPS and port in ("", "0"):
            return f"variable {name!r}"
        return f"tensor {name!r}" if port in ("", "0") else f"tensor '{name}:{port}'"
    return None


def _shortest(value: float) -> str:
    """``value`` as the shortest text that reads back as the same float32 (``0.9``), or
    Python's own where it is no float32 (a double's)."""
    def f32(x: float) -> float:
        return struct.unpack("<f", struct.pack("<f", x))[0]

    if f32(value) == value:
        for digits in range(1, 10):
            text = f"{value:.{digits}g}"
            if f32(float(text)) == value:
                return text
    return repr(value)
