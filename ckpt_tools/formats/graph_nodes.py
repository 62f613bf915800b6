"""A ``GraphDef``'s nodes, decoded from their wire bytes: a ``NodeDef``'s name, op, data
inputs, a ``Const``'s strings and its ``attr`` entries, and a graph's nodes by name, each
decoded on first access (:class:`LazyNodes`). :mod:`.graph_def` reads the graphs of a file
with them.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping

from ..errors import CorruptCheckpointError
from .meta import meta_decode_error, proto_fields

READS = frozenset({"Identity", "ReadVariableOp", "Snapshot"})

# collections.namedtuple, not typing.NamedTuple: `ckpt list` imports this module and never
# typing (tests/test_cli_list.py).
GraphNode = namedtuple("GraphNode", "op inputs strings")
GraphNode.__doc__ = """One ``NodeDef``: its op (`str`), its data inputs (`list[str]`: op names;
control inputs left out) and, for a ``Const``, the strings it holds (`list[str]`: a Saver's
``tensor_names``)."""


def op_name(tensor: str) -> str:
    """The op a tensor name (``w/read:0``, ``^init``) comes from (``w/read``, ``init``)."""
    return tensor.lstrip("^").split(":")[0]


def text_of(raw) -> str:
    """A string field's bytes as text (UTF-8; bytes that are not, replaced)."""
    return bytes(raw).decode("utf-8", "replace")


def decode_node(raw) -> tuple[str, GraphNode]:
    """A serialized ``NodeDef``'s name and :class:`GraphNode`, decoded whole.

    Raises:
        CorruptCheckpointError: the bytes are not a binary proto.
    """
    name = op = ""
    inputs: list[str] = []
    strings: list[str] = []
    for number, wire, value in proto_fields(raw):
        if wire != 2:
            continue
        if number == 1:
            name = text_of(value)
        elif number == 2:
            op = text_of(value)
        elif number == 3 and not bytes(value[:1]) == b"^":
            inputs.append(op_name(text_of(value)))
        elif number == 5 and op == "Const":  # attr entry; op (field 2) is written before it
            key, attr = attr_entry(value)
            if key == "value" and attr is not None:
                for n, w, v in proto_fields(attr):
                    if w == 2 and n == 8:  # AttrValue.tensor: TensorProto
                        strings = [text_of(s) for f, sw, s in proto_fields(v)
                                   if f == 8 and sw == 2]  # string_val
    return name, GraphNode(op, inputs, strings)


def _field(raw, at: int, tag: int) -> tuple[str, int] | None:
    """The length-delimited field ``tag`` starting at byte ``at`` of ``raw``: its text and
    the offset after it, or ``None`` where another field (or a long varint) is there."""
    if at >= len(raw) or raw[at] != tag:
        return None
    size, shift = 0, 0
    for i in range(at + 1, min(at + 6, len(raw))):
        byte = raw[i]
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return text_of(raw[i + 1:i + 1 + size]), i + 1 + size
    return None


def node_name(raw) -> tuple[str, int]:
    """A ``NodeDef``'s name without decoding the rest (field 1, written first by every
    serializer) and the offset after it (-1 where the node is laid out otherwise: it is then
    decoded whole when asked)."""
    name = _field(raw, 0, 0x0A)
    return name if name else (decode_node(raw)[0], -1)


class LazyNodes(Mapping):
    """A graph's nodes by name, each decoded on first access; :meth:`op` and :meth:`head`
    read a node's op and first input alone. The save op and the reads it follows are a few
    of a large graph's tens of thousands of nodes (``ckpt list`` asks only them)."""

    def __init__(self, raw: dict[str, tuple[memoryview, int]], path: str):
        self._raw = raw  # name -> (serialized NodeDef, offset after its name)
        self._decoded: dict[str, GraphNode] = {}
        self._path = path  # a node decoded late still names its file (review-20-attack-r50 F4)

    def head(self, name: str) -> tuple[str, str] | None:
        """Node ``name``'s op and first data input (``""``: none), or ``None`` (no such
        node), read from the node's first fields where it is laid out as TF writes it."""
        found = self._raw.get(name)
        if found is None:
            return None
        raw, at = found
        op = _field(raw, at, 0x12) if at >= 0 else None
        first = _field(raw, op[1], 0x1A) if op else None
        if op and (first is None or not first[0].startswith("^")):
            return op[0], op_name(first[0]) if first else ""
        node = self[name]
        return node.op, node.inputs[0] if node.inputs else ""

    def op(self, name: str) -> str:
        """The op of node ``name`` (``""``: no such node)."""
        head = self.head(name)
        return head[0] if head else ""

    def serialized(self, name: str):
        """Node ``name``'s serialized ``NodeDef`` (a ``memoryview``), or ``None``: for the
        rare question its decoded fields do not answer (a ``Const``'s number)."""
        found = self._raw.get(name)
        return None if found is None else found[0]

    def __getitem__(self, name: str) -> GraphNode:
        node = self._decoded.get(name)
        if node is None:
            try:
                node = self._decoded[name] = decode_node(self._raw[name][0])[1]
            except CorruptCheckpointError as exc:
                raise meta_decode_error(self._path, exc) from None
        return node

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __iter__(self):
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


def attr_entry(raw) -> tuple[str, object]:
    """One entry of a NodeDef's ``attr`` map (field 5): its key (field 1) and its AttrValue
    bytes (field 2, ``None`` where absent)."""
    key, attr = "", None
    for n, w, v in proto_fields(raw):
        if w == 2 and n == 1:
            key = text_of(v)
        elif w == 2 and n == 2:
            attr = v
    return key, attr


class FunctionNodes(dict):
    """A library function's nodes by name (:class:`GraphNode`), with :meth:`op` and
    :meth:`serialized` as :class:`LazyNodes` has them for the small ``Const`` nodes it keeps
    (a decay's number inside a control-flow-v2 ``tf.cond`` branch, review-28-attack-r103 F3).
    Its names are the function's own, not the graph's: ``function`` says so."""

    function = True

    def __init__(self) -> None:
        super().__init__()
        self.consts: dict[str, bytes] = {}  # name -> serialized NodeDef of a small Const

    def op(self, name: str) -> str:
        """The op of node ``name`` (``""``: no such node)."""
        node = self.get(name)
        return node.op if node is not None else ""

    def serialized(self, name: str) -> bytes | None:
        """Node ``name``'s serialized ``NodeDef`` where it is a ``Const`` kept, else
        ``None``."""
        return self.consts.get(name)
