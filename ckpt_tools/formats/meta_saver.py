"""Which variable each key of a TF1 checkpoint was saved from, read from its ``.meta``.

A ``tf.compat.v1.train.Saver`` writes the tensors its save op (``save/SaveV2``) is given under
the names in its ``tensor_names`` constant. A Saver built from ``ema.variables_to_restore()``
(the evaluation mapping, used by mistake to save during training) is given the model variable
``w`` under the name ``w/ExponentialMovingAverage``: the checkpoint then holds the raw weight
where the average's key says the average is, and no average at all. Only the graph records
it: the key's tensor is ``w``'s read (``w/Read/ReadVariableOp``), not the shadow's.

:func:`saved_sources` reads the ``MetaGraphDef``'s ``SaverDef`` (which save op wrote the
checkpoint) and that op's inputs from ``graph_def`` (parsed only here: ``read_meta_graph``
skips it), following reads (``Identity``, ``ReadVariableOp``) back to the variable.
"""

from __future__ import annotations

from ..errors import CorruptCheckpointError
from ._io import close_map, map_file
from .meta import proto_fields

_SAVE_OPS = {"SaveV2": 3, "SaveSlices": 3, "Save": 2}  # op -> index of its first tensor input
_READS = frozenset({"Identity", "ReadVariableOp", "Snapshot"})


def _op(tensor: str) -> str:
    return tensor.lstrip("^").split(":")[0]


def _text(raw) -> str:
    return bytes(raw).decode("utf-8", "replace")


def _node(raw) -> tuple[str, str, list[str], list[str]]:
    """A ``NodeDef``: ``(name, op, inputs, string values of its 'value' attr)``."""
    name = op = ""
    inputs: list[str] = []
    strings: list[str] = []
    for number, wire, value in proto_fields(raw):
        if wire != 2:
            continue
        if number == 1:
            name = _text(value)
        elif number == 2:
            op = _text(value)
        elif number == 3:
            inputs.append(_text(value))
        elif number == 5:  # attr: map<string, AttrValue> entry
            key, attr = "", None
            for n, w, v in proto_fields(value):
                if w == 2 and n == 1:
                    key = _text(v)
                elif w == 2 and n == 2:
                    attr = v
            if key == "value" and attr is not None:
                for n, w, v in proto_fields(attr):
                    if w == 2 and n == 8:  # AttrValue.tensor: TensorProto
                        strings = [_text(s) for f, sw, s in proto_fields(v)
                                   if f == 8 and sw == 2]  # string_val
    return name, op, inputs, strings


def saved_sources(path: str) -> dict[str, list[str]] | None:
    """Checkpoint key -> the variables (op names) its value was saved from, as the ``.meta``
    at ``path`` records the save op of its ``SaverDef``.

    Returns:
        `dict[str, list[str]]` (several sources: a partitioned variable's parts), or ``None``
        where the file does not record it (text format, no ``SaverDef`` or save op).

    Raises:
        CorruptCheckpointError: the file is not a binary ``MetaGraphDef``.
    """
    data = map_file(path)
    try:
        graph = saver = None
        try:
            for number, wire, value in proto_fields(data):
                if number == 2 and wire == 2:
                    graph = value
                elif number == 3 and wire == 2:
                    saver = value
        except CorruptCheckpointError:
            return None  # text format: the collections reader handles it; nothing read here
        if graph is None or saver is None:
            return None
        save_tensor = next((_text(v) for n, w, v in proto_fields(saver) if n == 2 and w == 2),
                           "")
        scope = _op(save_tensor).rpartition("/")[0]
        if not scope:
            return None
        nodes = {}
        for number, wire, value in proto_fields(graph):
            if number == 1 and wire == 2:
                name, op, inputs, strings = _node(value)
                nodes[name] = (op, inputs, strings)
    finally:
        close_map(data)

    def source(tensor: str) -> str:
        name = _op(tensor)
        for _ in range(16):  # a read of a read of the variable
            op, inputs, _s = nodes.get(name, ("", [], []))
            if op not in _READS or not inputs:
                break
            name = _op(inputs[0])
        return name

    out: dict[str, list[str]] = {}
    for name, (op, inputs, _s) in nodes.items():
        first = _SAVE_OPS.get(op)
        if first is None or not name.startswith(scope + "/") or len(inputs) <= first:
            continue
        keys = nodes.get(_op(inputs[1]), ("", [], []))[2]
        tensors = [i for i in inputs[first:] if not i.startswith("^")]
        if len(keys) != len(tensors):
            continue  # not the layout a Saver builds: say nothing
        for key, tensor in zip(keys, tensors, strict=True):
            out.setdefault(key, []).append(source(tensor))
    return out or None
