"""A ``tf.distribute`` SyncOnRead variable as a TF1 Saver's save op reads it.

``MirroredStrategy`` in a TF1 graph makes each variable one component per replica: ``v`` and
``v/replica_1``, ... A variable created with ``synchronization=ON_READ`` (Keras'
``BatchNormalization`` moving statistics, a metric's total) holds a different value in each,
and a Saver saves it as what reading it across replicas gives, built in the Saver's scope:

* ``aggregation=MEAN``: ``save/truediv = AddN(read v, read v/replica_1, ...) / n``;
* ``aggregation=SUM``: ``save/AddN`` over the same reads;

(``ONLY_FIRST_REPLICA``, and every MirroredVariable, are saved from ``v``'s own read). That is
the variable's own value, the one TF's restore then assigns to every component; the key was
written from ``v`` as much as a plain read's key is (review-21-attack-r54 F6).
:func:`on_read_variable` proves it from the ops: the reads are exactly ``v``'s components in
replica order, and a mean's divisor is their number. Anything else proves nothing.
"""

from __future__ import annotations

import re
import struct

from .graph_def import attr_entry, through_reads
from .meta import proto_fields

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
_DIVIDES = frozenset({"RealDiv", "TrueDiv", "Div"})
# the op names a Saver's aggregate read has: what the compiled walk's answer is checked for
AGGREGATE = re.compile(r"(?:^|/)(?:truediv|AddN)(?:_\d+)?$")
# TensorProto: field -> (struct format, element size) of one value, packed or not
_VALUES = {5: ("<f", 4), 6: ("<d", 8)}  # float_val, double_val (a half's divisor: unread)
_CONTENT = {1: ("<f", 4), 2: ("<d", 8)}  # dtype (DT_FLOAT, DT_DOUBLE) -> tensor_content's


def on_read_variable(nodes, name: str) -> str | None:
    """The variable op whose replicas' aggregate op ``name`` is (see the module), or
    ``None`` where it is not that.

    Args:
        nodes: a graph's nodes (:class:`~ckpt_tools.formats.graph_def.MetaGraph`'s).
        name: the op a save op's tensor reads (:func:`.graph_def.through_reads`).
    """
    if nodes.op(name) not in _DIVIDES | {"AddN"}:  # the head alone: no other node decoded
        return None
    node = nodes[name]
    count = None
    if node.op in _DIVIDES and len(node.inputs) == 2:
        count = const_number(nodes, through_reads(nodes, node.inputs[1]))
        if count is None:
            return None
        total = through_reads(nodes, node.inputs[0])
    elif node.op == "AddN":
        total = name
    else:
        return None
    reads = [through_reads(nodes, t) for t in nodes[total].inputs] \
        if nodes.op(total) == "AddN" else [total]
    first = reads[0] if reads else ""
    if reads != [first] + [f"{first}/replica_{i}" for i in range(1, len(reads))] \
            or any(nodes.op(r) not in VARIABLE_OPS for r in reads) \
            or (count is not None and count != len(reads)) \
            or (count is None and len(reads) < 2):
        return None
    return first


def const_number(nodes, name: str) -> float | None:
    """The one number a ``Const`` op of dtype float or double holds, or ``None``."""
    raw = nodes.serialized(name) if nodes.op(name) == "Const" else None
    if raw is None:
        return None
    for number, wire, value in proto_fields(raw):
        if number != 5 or wire != 2:  # attr map entries
            continue
        key, attr = attr_entry(value)
        if key != "value" or attr is None:
            continue
        for n, w, tensor in proto_fields(attr):
            if n == 8 and w == 2:  # AttrValue.tensor
                return _scalar(tensor)
    return None


def _scalar(tensor) -> float | None:
    """The value of a serialized ``TensorProto`` holding exactly one float or double, or
    ``None``."""
    dtype, found = 0, []
    for n, w, v in proto_fields(tensor):
        if n == 1 and w == 0:
            dtype = v
        elif n in _VALUES and w == 2:  # packed
            fmt, size = _VALUES[n]
            found += [struct.unpack_from(fmt, v, i)[0] for i in range(0, len(v) - size + 1, size)]
        elif n in _VALUES and w in (1, 5):  # one value, unpacked
            fmt, size = _VALUES[n]
            found.append(struct.unpack(fmt, v.to_bytes(size, "little"))[0])
        elif n == 4 and w == 2:
            found.append(bytes(v))
    if len(found) != 1:
        return None
    if isinstance(found[0], bytes):
        fmt, size = _CONTENT.get(dtype, ("", 0))
        return struct.unpack(fmt, found[0])[0] if size and len(found[0]) == size else None
    return found[0]
