"""Minimal protobuf message classes for the TensorFlow protos we read.

TensorFlow's own ``*_pb2`` modules import all of TensorFlow, so we declare just the fields we use
(field numbers from TensorFlow's ``.proto`` files) and let protobuf skip the rest as unknown
fields. Messages are declared with proto2 syntax so ``HasField`` works on scalars (needed for
``TensorSliceProto.Extent.length``); the wire format is the same as proto3.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_T = {
    "int32": _F.TYPE_INT32, "int64": _F.TYPE_INT64, "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64, "bool": _F.TYPE_BOOL, "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES, "float": _F.TYPE_FLOAT, "double": _F.TYPE_DOUBLE,
    "fixed32": _F.TYPE_FIXED32,
}

# message name -> [(field name, number, type or message name, repeated)]
_MESSAGES: dict[str, list[tuple[str, int, str, bool]]] = {
    "VersionDef": [("producer", 1, "int32", False), ("min_consumer", 2, "int32", False),
                   ("bad_consumers", 3, "int32", True)],
    "Dim": [("size", 1, "int64", False), ("name", 2, "string", False)],
    "TensorShapeProto": [("dim", 2, ".ckpt.Dim", True), ("unknown_rank", 3, "bool", False)],
    "Extent": [("start", 1, "int64", False), ("length", 2, "int64", False)],
    "TensorSliceProto": [("extent", 1, ".ckpt.Extent", True)],
    "BundleHeaderProto": [("num_shards", 1, "int32", False), ("endianness", 2, "int32", False),
                          ("version", 3, ".ckpt.VersionDef", False)],
    "BundleEntryProto": [("dtype", 1, "int32", False),
                         ("shape", 2, ".ckpt.TensorShapeProto", False),
                         ("shard_id", 3, "int32", False), ("offset", 4, "int64", False),
                         ("size", 5, "int64", False), ("crc32c", 6, "fixed32", False),
                         ("slices", 7, ".ckpt.TensorSliceProto", True)],
    "TensorProto": [("dtype", 1, "int32", False),
                    ("tensor_shape", 2, ".ckpt.TensorShapeProto", False),
                    ("tensor_content", 4, "bytes", False), ("half_val", 13, "int32", True),
                    ("float_val", 5, "float", True), ("double_val", 6, "double", True),
                    ("int_val", 7, "int32", True), ("string_val", 8, "bytes", True),
                    ("scomplex_val", 9, "float", True), ("int64_val", 10, "int64", True),
                    ("bool_val", 11, "bool", True), ("dcomplex_val", 12, "double", True),
                    ("uint32_val", 16, "uint32", True), ("uint64_val", 17, "uint64", True)],
    "SavedSliceMeta": [("name", 1, "string", False), ("shape", 2, ".ckpt.TensorShapeProto", False),
                       ("type", 3, "int32", False), ("slice", 4, ".ckpt.TensorSliceProto", True)],
    "SavedTensorSliceMeta": [("tensor", 1, ".ckpt.SavedSliceMeta", True),
                             ("versions", 2, ".ckpt.VersionDef", False)],
    "SavedSlice": [("name", 1, "string", False), ("slice", 2, ".ckpt.TensorSliceProto", False),
                   ("data", 3, ".ckpt.TensorProto", False)],
    "SavedTensorSlices": [("meta", 1, ".ckpt.SavedTensorSliceMeta", False),
                          ("data", 2, ".ckpt.SavedSlice", False)],
    # Binary MetaGraphDefs are decoded field by field (see meta.py) so graph_def is never
    # parsed; this declaration (without graph_def) serves text-format files.
    "MetaGraphDef": [("meta_info_def", 1, ".ckpt.MetaInfoDef", False),
                     ("saver_def", 3, ".ckpt.SaverDef", False),
                     ("collection_def", 4, ".ckpt.CollectionEntry", True)],
    # saved_model.proto; binary files are decoded field by field too (see savedmodel.py).
    "SavedModel": [("saved_model_schema_version", 1, "int64", False),
                   ("meta_graphs", 2, ".ckpt.MetaGraphDef", True)],
    "MetaInfoDef": [("meta_graph_version", 1, "string", False), ("tags", 4, "string", True),
                    ("tensorflow_version", 5, "string", False),
                    ("tensorflow_git_version", 6, "string", False)],
    "SaverDef": [("filename_tensor_name", 1, "string", False),
                 ("save_tensor_name", 2, "string", False), ("restore_op_name", 3, "string", False),
                 ("max_to_keep", 4, "int32", False), ("sharded", 5, "bool", False),
                 ("keep_checkpoint_every_n_hours", 6, "float", False),
                 ("version", 7, ".ckpt.CheckpointFormatVersion", False)],
    "NodeList": [("value", 1, "string", True)],
    "BytesList": [("value", 1, "bytes", True)],
    "Int64List": [("value", 1, "int64", True)],
    "FloatList": [("value", 1, "float", True)],
    "CollectionDef": [("node_list", 1, ".ckpt.NodeList", False),
                      ("bytes_list", 2, ".ckpt.BytesList", False),
                      ("int64_list", 3, ".ckpt.Int64List", False),
                      ("float_list", 4, ".ckpt.FloatList", False)],
    "CollectionEntry": [("key", 1, "string", False), ("value", 2, ".ckpt.CollectionDef", False)],
    "SaveSliceInfoDef": [("full_name", 1, "string", False), ("full_shape", 2, "int64", True),
                         ("var_offset", 3, "int64", True), ("var_shape", 4, "int64", True)],
    "VariableDef": [("variable_name", 1, "string", False),
                    ("initializer_name", 2, "string", False),
                    ("snapshot_name", 3, "string", False),
                    ("save_slice_info_def", 4, ".ckpt.SaveSliceInfoDef", False),
                    ("is_resource", 5, "bool", False), ("initial_value_name", 6, "string", False),
                    ("trainable", 7, "bool", False), ("synchronization", 8, "int32", False),
                    ("aggregation", 9, "int32", False)],
    "ObjectReference": [("node_id", 1, "int32", False), ("local_name", 2, "string", False)],
    "SerializedTensor": [("name", 1, "string", False), ("full_name", 2, "string", False),
                         ("checkpoint_key", 3, "string", False)],
    "SlotVariableReference": [("original_variable_node_id", 1, "int32", False),
                              ("slot_name", 2, "string", False),
                              ("slot_variable_node_id", 3, "int32", False)],
    "TrackableObject": [("children", 1, ".ckpt.ObjectReference", True),
                        ("attributes", 2, ".ckpt.SerializedTensor", True),
                        ("slot_variables", 3, ".ckpt.SlotVariableReference", True)],
    "TrackableObjectGraph": [("nodes", 1, ".ckpt.TrackableObject", True)],
    # A text-format graph's save op (formats/graph_def.py): the nodes' names, ops, inputs and
    # string constants, re-encoded to the binary layout the graph reader walks.
    # and its function library (the functions its If/Case/While/call ops name: r39 F6)
    "StringTensor": [("string_val", 8, "bytes", True)],
    "NameAttrList": [("name", 1, "string", False)],
    "ListValue": [("func", 9, ".ckpt.NameAttrList", True)],
    "AttrValue": [("list", 1, ".ckpt.ListValue", False),
                  ("tensor", 8, ".ckpt.StringTensor", False),
                  ("func", 10, ".ckpt.NameAttrList", False)],
    "AttrEntry": [("key", 1, "string", False), ("value", 2, ".ckpt.AttrValue", False)],
    "NodeDef": [("name", 1, "string", False), ("op", 2, "string", False),
                ("input", 3, "string", True), ("attr", 5, ".ckpt.AttrEntry", True)],
    "ArgDef": [("name", 1, "string", False)],
    "OpDef": [("name", 1, "string", False), ("input_arg", 2, ".ckpt.ArgDef", True)],
    "FunctionDef": [("signature", 1, ".ckpt.OpDef", False),
                    ("node_def", 3, ".ckpt.NodeDef", True)],
    "FunctionDefLibrary": [("function", 1, ".ckpt.FunctionDef", True)],
    "GraphDef": [("node", 1, ".ckpt.NodeDef", True),
                 ("library", 2, ".ckpt.FunctionDefLibrary", False)],
    "GraphOfMeta": [("graph_def", 2, ".ckpt.GraphDef", False),
                    ("saver_def", 3, ".ckpt.SaverDef", False)],
    "GraphsOfSavedModel": [("meta_graphs", 2, ".ckpt.GraphOfMeta", True)],
}


# enum name -> [(value name, number)]; text-format files spell these by name ("version: V2").
_ENUMS: dict[str, list[tuple[str, int]]] = {
    "CheckpointFormatVersion": [("LEGACY", 0), ("V1", 1), ("V2", 2)],
}


def _build() -> dict[str, type]:
    fdp = descriptor_pb2.FileDescriptorProto(name="ckpt_tools_min.proto", package="ckpt",
                                             syntax="proto2")
    for enum_name, values in _ENUMS.items():
        enum = fdp.enum_type.add(name=enum_name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    for msg_name, fields in _MESSAGES.items():
        msg = fdp.message_type.add(name=msg_name)
        for fname, number, ftype, repeated in fields:
            field = msg.field.add(name=fname, number=number,
                                  label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if ftype.startswith("."):
                field.type = _F.TYPE_ENUM if ftype[len(".ckpt."):] in _ENUMS else _F.TYPE_MESSAGE
                field.type_name = ftype
            else:
                field.type = _T[ftype]
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    get_class = getattr(message_factory, "GetMessageClass", None)
    classes = {}
    for msg_name in _MESSAGES:
        desc = pool.FindMessageTypeByName(f"ckpt.{msg_name}")
        if get_class is not None:
            classes[msg_name] = get_class(desc)
        else:  # protobuf < 4.21
            classes[msg_name] = message_factory.MessageFactory(pool).GetPrototype(desc)
    return classes


_CLASSES = _build()


def text(value) -> str:
    """A string field as ``str``: protobuf returns ``bytes`` when a damaged file holds invalid
    UTF-8 there, and every key we build must be ``str``."""
    return value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
BundleHeaderProto = _CLASSES["BundleHeaderProto"]
BundleEntryProto = _CLASSES["BundleEntryProto"]
TensorShapeProto = _CLASSES["TensorShapeProto"]
TensorSliceProto = _CLASSES["TensorSliceProto"]
TensorProto = _CLASSES["TensorProto"]
SavedTensorSlices = _CLASSES["SavedTensorSlices"]
MetaGraphDef = _CLASSES["MetaGraphDef"]
MetaInfoDef = _CLASSES["MetaInfoDef"]
SavedModel = _CLASSES["SavedModel"]
SaverDef = _CLASSES["SaverDef"]
CollectionEntry = _CLASSES["CollectionEntry"]
VariableDef = _CLASSES["VariableDef"]
TrackableObjectGraph = _CLASSES["TrackableObjectGraph"]
GraphOfMeta = _CLASSES["GraphOfMeta"]
GraphsOfSavedModel = _CLASSES["GraphsOfSavedModel"]


def text_graphs_binary(text: str, saved_model: bool) -> bytes:
    """A text-format ``.meta`` or ``saved_model.pbtxt`` (its text as
    :func:`.text_bound.bounded_text` gives it) re-encoded to the binary layout, with its
    graphs' nodes (names, ops, inputs, string constants, the functions their attrs name),
    function libraries and save op only (``b""`` where it does not parse)."""
    from google.protobuf import text_format

    msg = GraphsOfSavedModel() if saved_model else GraphOfMeta()
    try:
        text_format.Parse(text, msg, allow_unknown_field=True, allow_unknown_extension=True)
    except Exception:  # not text either: the collections reader says why
        return b""
    return msg.SerializeToString()
