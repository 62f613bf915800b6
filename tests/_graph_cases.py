"""Hand-built ``.meta`` and ``saved_model.pb`` bytes for tests/test_cwire_graph.py: a Saver's
graph laid out as TensorFlow writes it (encoded here, independently of ckpt_tools), and every
way out of that layout the save-op walk meets (fields reordered, repeated, malformed, not
ASCII, huge). The Python path (formats/meta_saver.py) is the reference for each."""

from __future__ import annotations


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _f(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _enc(s: str | bytes) -> bytes:
    return s if isinstance(s, bytes) else s.encode()


def _node(name: str | bytes, op: str, *inputs: str | bytes, strings=None, attr_first=False,
          extra: bytes = b"") -> bytes:
    """A NodeDef laid out as TensorFlow writes it (name, op, inputs, attrs); ``strings``: a
    Const's string tensor (``value`` attr)."""
    attrs = b""
    if strings is not None:
        tensor = _f(8, b"".join(_f(8, _enc(s)) for s in strings))  # AttrValue.tensor.string_val
        attrs = _f(5, _f(1, b"dtype") + _f(2, b"\x30\x07")) + _f(5, _f(1, b"value") + _f(2, tensor))
    head = _f(1, _enc(name))
    body = _f(2, _enc(op)) + b"".join(_f(3, _enc(i)) for i in inputs)
    return head + (attrs + body if attr_first else body + attrs) + extra


node_def = _node  # the tests' public name for it


def _saver_graph(**change) -> list[bytes]:
    """A Saver's graph for variables ``w``, ``b`` (resource, read by ``.../Read/ReadVariableOp``)
    and ``u`` (a ref variable, read by ``u/read``)."""
    keys = change.get("keys", ["w", "b", "u"])
    tensors = change.get("tensors", ["w/Read/ReadVariableOp", "b/Read/ReadVariableOp:0",
                                     "u/read"])
    return [
        _node("w", "VarHandleOp"), _node("w/Read/ReadVariableOp", "ReadVariableOp", "w"),
        _node("b", "VarHandleOp"), _node("b/Read/ReadVariableOp", "ReadVariableOp", "b",
                                         "^w"),
        _node("u", "VariableV2"), _node("u/read", "Identity", "u:0"),
        _node("save/Const", "PlaceholderWithDefault"),
        _node("save/SaveV2/tensor_names", "Const", strings=keys),
        _node("save/SaveV2/shape_and_slices", "Const", strings=[""] * len(keys)),
        _node("save/SaveV2", change.get("op", "SaveV2"), "save/Const",
              "save/SaveV2/tensor_names", "save/SaveV2/shape_and_slices", *tensors),
        _node("save/control_dependency", "Identity", "save/Const", "^save/SaveV2"),
    ]


def meta_of(nodes: list[bytes], save_tensor: str | bytes = "save/control_dependency:0",
          saver: bytes | None = None, extra: bytes = b"") -> bytes:
    graph = b"".join(_f(1, n) for n in nodes) + _f(4, b"\x08\x01")  # versions
    if saver is None:
        st = save_tensor if isinstance(save_tensor, bytes) else save_tensor.encode()
        saver = _f(1, b"save/Const:0") + _f(2, st) + _f(3, b"save/restore_all")
    return _f(1, _f(4, b"serve")) + _f(2, graph) + _f(3, saver) + extra


_BASE = _saver_graph()
_READS = [_node(f"r{i}", "Identity", f"r{i + 1}") for i in range(20)] + [_node("r20", "Identity",
                                                                               "v"),
                                                                         _node("v", "VariableV2")]
CASES = {
    "as TensorFlow writes it": meta_of(_BASE),
    "legacy Save (tensors from input 2)": meta_of(
        [*_BASE[:7], _node("save/names", "Const", strings=["w", "b"]),
         _node("save/Save", "Save", "save/Const", "save/names", "w/Read/ReadVariableOp",
               "b/Read/ReadVariableOp")]),
    "SaveSlices": meta_of(_saver_graph(op="SaveSlices")),
    "another op": meta_of(_saver_graph(op="RestoreV2")),
    "fewer keys than tensors": meta_of(_saver_graph(keys=["w", "b"])),
    "no tensors": meta_of(_saver_graph(keys=[], tensors=[])),
    "one key twice (a partitioned variable)": meta_of(_saver_graph(keys=["w", "w", "u"])),
    "keys node missing": meta_of([n for n in _BASE if b"tensor_names\x12" not in n]),
    "keys node not a Const": meta_of([_node("save/SaveV2/tensor_names", "Identity", "x")
                                    if b"tensor_names\x12" in n else n for n in _BASE]),
    "keys Const with its attrs before its op": meta_of(
        [_node("save/SaveV2/tensor_names", "Const", strings=["w", "b", "u"], attr_first=True)
         if b"tensor_names\x12" in n else n for n in _BASE]),
    "keys not UTF-8": meta_of(_saver_graph(keys=[b"w\xff", "b", b"\xe2\x82"])),
    "keys non-ASCII UTF-8": meta_of(_saver_graph(keys=["w\u00e9", "b", "u"])),
    "tensor through a control input first": meta_of(
        [*_BASE, _node("c", "Identity", "^w", "u")], ),
    "read with control input first": meta_of(
        [_node("u/read", "Identity", "^w", "u") if n.startswith(b"\x0a\x06u/read") else n
         for n in _BASE]),
    "read without inputs": meta_of(
        [_node("u/read", "Identity") if n.startswith(b"\x0a\x06u/read") else n
         for n in _BASE]),
    "a chain of 22 reads (16 followed)": meta_of(
        [*_READS, *_saver_graph(keys=["v", "w", "b"], tensors=["r0", "w", "b"])]),
    "tensor not in the graph": meta_of(_saver_graph(tensors=["nowhere:0", "w", "b"])),
    "read of a node not in the graph": meta_of([n for n in _BASE if n != _node("u", "VariableV2")]),
    "save tensor with ^": meta_of(_BASE, "^save/control_dependency"),
    "save tensor without a scope": meta_of(_BASE, "control_dependency:0"),
    "save tensor at the root": meta_of(_BASE, "/control_dependency:0"),
    "save tensor empty": meta_of(_BASE, ""),
    "save tensor not ASCII": meta_of(_BASE, b"sav\xc3\xa9/x:0"),
    "another scope": meta_of(_BASE, "other/x:0"),
    "scope a prefix of another": meta_of(_BASE, "sav/x:0"),
    "no saver": _f(2, b"".join(_f(1, n) for n in _BASE)),
    "no graph": _f(3, _f(2, b"save/x:0")),
    "empty graph": _f(2, b"") + _f(3, _f(2, b"save/x:0")),
    "empty file": b"",
    "saver's first field malformed": meta_of(_BASE, saver=b"\x0a\x7fsave"),
    "saver malformed after its save tensor": meta_of(
        _BASE, saver=_f(2, b"save/control_dependency:0") + b"\x0a\x7f"),
    "two save tensors (the first counts)": meta_of(
        _BASE, saver=_f(2, b"save/x:0") + _f(2, b"other/x:0")),
    "two graphs (the last counts)": _f(2, _f(1, _node("x", "Const"))) + meta_of(_BASE),
    "two savers (the last counts)": _f(3, _f(2, b"other/x:0")) + meta_of(_BASE),
    "trailing garbage": meta_of(_BASE) + b"\x07",
    "field number 0": meta_of(_BASE) + b"\x02\x00",
    "group wire type": meta_of(_BASE, extra=b"\x0b"),
    "fixed64 and fixed32 fields": meta_of(_BASE, extra=b"\x41" + bytes(8) + b"\x45" + bytes(4)),
    "varint of 10 bytes": meta_of(_BASE, extra=b"\x48" + b"\xff" * 9 + b"\x01"),
    "varint of 11 bytes": meta_of(_BASE, extra=b"\x48" + b"\xff" * 10 + b"\x01"),
    "huge length": meta_of(_BASE) + b"\x2a\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
    "huge name length": meta_of([*_BASE, b"\x0a\xff\xff\xff\xff\x0fab"]),
    "name length of 6 bytes": meta_of([*_BASE, b"\x0a\x81\x80\x80\x80\x80\x00" + b"\x12\x01x"]),
    "op length past its node": meta_of([*_BASE[:-1], _BASE[-1][:-4] + b"\x12\xff\x01"]),
    "node without a name first": meta_of([*_BASE, _f(2, b"Const") + _f(1, b"late")]),
    "node without a name": meta_of([*_BASE, _f(2, b"Const")]),
    "empty node": meta_of([*_BASE, b""]),
    "node name twice": meta_of([*_BASE, _f(1, b"x") + _f(1, b"y") + _f(2, b"NoOp")]),
    "two nodes of one name": meta_of([*_BASE, _node("w", "Const")]),
    "two save ops of one name": meta_of([*_BASE, _BASE[-2]]),
    "node name not ASCII": meta_of([*_BASE, _node("w\u00e9", "VarHandleOp")]),
    "node names not UTF-8": meta_of([*_BASE, _node(b"x\xff", "NoOp"), _node(b"x\xfe", "NoOp")]),
    "input not ASCII": meta_of(_saver_graph(tensors=["w", "b", "u\u00e9"])),
    "control input not ASCII": meta_of([*_BASE[:-1], _node("save/control_dependency", "Identity",
                                                         "save/Const", "^save/SaveV2\u00e9")]),
    "op not ASCII": meta_of(_saver_graph(op="SaveV2\u00e9")),
    "save op malformed after its inputs": meta_of(
        [*_BASE[:-2], _BASE[-2] + b"\x2a\x05\x0a\x01", _BASE[-1]]),
    "read malformed after its first input": meta_of(
        [*_BASE[:5], _node("u/read", "Identity", "u", extra=b"\x22\x7f"), *_BASE[6:]]),
    "read malformed, its control input first": meta_of(
        [*_BASE[:5], _node("u/read", "Identity", "^w", "u", extra=b"\x22\x7f"), *_BASE[6:]]),
    "keys Const with two values (the last counts)": meta_of(
        [*_BASE[:7], _node("save/SaveV2/tensor_names", "Const", strings=["w", "b", "u"],
                           extra=_f(5, _f(1, b"value") + _f(2, _f(8, _f(8, b"x"))))),
         *_BASE[8:]]),
    "keys Const with two tensors in its value": meta_of(
        [*_BASE[:7], _node("save/SaveV2/tensor_names", "Const", extra=_f(5, _f(1, b"value") + _f(
            2, _f(8, _f(8, b"x")) + _f(8, b"".join(_f(8, k) for k in (b"w", b"b", b"u")))))),
         *_BASE[8:]]),
    "keys Const whose value attr is named twice (the last counts)": meta_of(
        [*_BASE[:7], _node("save/SaveV2/tensor_names", "Const", extra=_f(5, _f(1, b"dtype") + _f(
            1, b"value") + _f(2, _f(8, b"".join(_f(8, k) for k in (b"w", b"b", b"u")))))),
         *_BASE[8:]]),
    "keys tensor with a varint field 8": meta_of(
        [*_BASE[:7], _node("save/SaveV2/tensor_names", "Const", extra=_f(5, _f(1, b"value") + _f(
            2, _f(8, b"\x40\x01" + b"".join(_f(8, k) for k in (b"w", b"b", b"u")))))),
         *_BASE[8:]]),
    "keys Const with a malformed tensor": meta_of(
        [*_BASE[:7], _node("save/SaveV2/tensor_names", "Const", strings=["w", "b", "u"],
                           extra=_f(5, _f(1, b"value") + _f(2, _f(8, b"\x42\x05ab")))),
         *_BASE[8:]]),
    "keys Const with a malformed other attr": meta_of(
        [*_BASE[:7], _node("save/SaveV2/tensor_names", "Const", strings=["w", "b", "u"],
                           extra=_f(5, _f(1, b"_class") + _f(2, b"\x0a\x05"))), *_BASE[8:]]),
    "read op after its device": meta_of(
        [*_BASE[:5], _f(1, b"u/read") + _f(4, b"/cpu:0") + _f(2, b"Identity") + _f(3, b"u"),
         *_BASE[6:]]),
    "read input after its device": meta_of(
        [*_BASE[:5], _f(1, b"u/read") + _f(2, b"Identity") + _f(4, b"/cpu:0") + _f(3, b"u"),
         *_BASE[6:]]),
    "op length past its read's node": meta_of(
        [*_BASE[:5], b"\x0a\x06u/read\x12\x20Identity", *_BASE[6:]]),
    "a Snapshot read": meta_of(
        [*_BASE[:5], _node("u/read", "Snapshot", "u"), *_BASE[6:]]),
    "save op of another scope sharing its start": meta_of(
        [*_BASE, _node("save_1/names", "Const", strings=["x"]),
         _node("save_1/SaveV2", "SaveV2", "save/Const", "save_1/names", "s", "w")]),
    "read's first input empty": meta_of(
        [*_BASE[:5], _node("u/read", "Identity", ""), *_BASE[6:]]),
}


def _saved_model(*metas: bytes, extra: bytes = b"") -> bytes:
    return b"\x08\x01" + b"".join(_f(2, m) for m in metas) + extra


SAVED_MODELS = {
    "two meta graphs": _saved_model(meta_of(_BASE), meta_of(_saver_graph(keys=["b", "w", "u"]))),
    "one without a save op": _saved_model(meta_of(_BASE, ""), meta_of(_BASE)),
    "second malformed": _saved_model(meta_of(_BASE), meta_of(_BASE) + b"\x07"),
    "malformed after them": _saved_model(meta_of(_BASE), extra=b"\x12\x05ab"),
    "none": _saved_model(),
}

BASE_NODES = _BASE  # the Saver graph's nodes, for tests that add their own
