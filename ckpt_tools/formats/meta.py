"""Reader for ``.meta`` files (``MetaGraphDef``): collections, variables and saver settings.

Only the collections matter to us (which variables are trainable, global, moving-average…), so a
binary file is decoded one top-level field at a time and ``graph_def`` — often most of the file —
is skipped without being parsed or copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CheckpointNotFoundError, CorruptCheckpointError
from ._io import close_map, map_file
from ._protos import CollectionEntry, MetaGraphDef, MetaInfoDef, SaverDef, VariableDef, text
from ._wire import Cursor

# Collections whose members are serialized VariableDef protos.
VARIABLE_COLLECTIONS = (
    "variables", "trainable_variables", "moving_average_variables", "model_variables",
    "local_variables", "global_step", "metric_variables", "trainable_resource_variables",
)
_WIRE_SKIP = {0: None, 1: 8, 5: 4}


@dataclass(frozen=True)
class Partition:
    """Where one part of a partitioned variable sits in the full tensor (``SaveSliceInfoDef``)."""

    full_name: str
    full_shape: tuple[int, ...]
    var_offset: tuple[int, ...]
    var_shape: tuple[int, ...]


@dataclass(frozen=True)
class MetaVariable:
    """A variable as the graph knows it."""

    name: str  # op name in the graph, e.g. "emb/part_0"
    checkpoint_key: str  # key it is saved under, e.g. "emb"
    trainable: bool
    partition: Partition | None = None


@dataclass
class MetaGraph:
    """What a ``.meta`` file says about variables.

    Attributes:
        path: the file read.
        tensorflow_version: version that wrote it ("" if not recorded).
        collections: collection name -> member names (variable op names for variable
            collections, node/tensor names for node lists such as ``update_ops``).
        variables: op name -> :class:`MetaVariable` for every variable in any collection.
        saver_version: SaverDef.version (1 = V1, 2 = V2), 0 when absent.
    """

    path: str
    tensorflow_version: str = ""
    collections: dict[str, list[str]] = field(default_factory=dict)
    variables: dict[str, MetaVariable] = field(default_factory=dict)
    saver_version: int = 0
    saver_sharded: bool = False
    tags: tuple[str, ...] = ()  # MetaInfoDef.tags: how a SavedModel's loader selects the graph

    def collections_by_key(self) -> dict[str, list[str]]:
        """Returns checkpoint key -> sorted variable collections it belongs to.

        A partitioned variable's parts all map to their shared checkpoint key.
        """
        out: dict[str, set[str]] = {}
        for coll in VARIABLE_COLLECTIONS:
            for op_name in self.collections.get(coll, ()):
                var = self.variables.get(op_name)
                key = var.checkpoint_key if var else op_name
                out.setdefault(key, set()).add(coll)
        return {k: sorted(v) for k, v in out.items()}

    def keys_in(self, collection: str) -> list[str]:
        """Returns the checkpoint keys of a variable collection, deduplicated, in graph order."""
        seen: dict[str, None] = {}
        for op_name in self.collections.get(collection, ()):
            var = self.variables.get(op_name)
            seen[var.checkpoint_key if var else op_name] = None
        return list(seen)


def _op_name(tensor_name: str) -> str:
    return tensor_name[:-2] if tensor_name.endswith(":0") else tensor_name.split(":")[0]


def _variable(raw: bytes, path: str) -> MetaVariable:
    try:
        vd = VariableDef.FromString(raw)
    except Exception as exc:
        raise CorruptCheckpointError(f"cannot parse VariableDef: {exc}", path=path) from None
    name = _op_name(text(vd.variable_name))
    part = None
    if vd.HasField("save_slice_info_def") and vd.save_slice_info_def.full_name:
        s = vd.save_slice_info_def
        part = Partition(text(s.full_name), tuple(s.full_shape), tuple(s.var_offset),
                         tuple(s.var_shape))
    # VariableDef.trainable is only written by TF >= 1.14; older graphs rely on the collection.
    return MetaVariable(name=name, checkpoint_key=part.full_name if part else name,
                        trainable=vd.trainable, partition=part)


def _add_collection(graph: MetaGraph, entry) -> None:
    value = entry.value
    key = text(entry.key)
    if value.HasField("bytes_list") and key in VARIABLE_COLLECTIONS:
        members = []
        for raw in value.bytes_list.value:
            var = _variable(raw, graph.path)
            graph.variables.setdefault(var.name, var)
            members.append(var.name)
        graph.collections[key] = members
    elif value.HasField("node_list"):
        graph.collections[key] = [text(v) for v in value.node_list.value]
    elif value.HasField("bytes_list"):
        graph.collections[key] = [f"<{len(v)} bytes>" for v in value.bytes_list.value]


def read_meta_graph(path: str) -> MetaGraph:
    """Reads the collections and saver settings of a ``.meta`` file.

    Args:
        path: a binary (or text-format) ``MetaGraphDef`` file.

    Returns:
        A :class:`MetaGraph`.

    Raises:
        CheckpointNotFoundError: if ``path`` does not exist.
        CorruptCheckpointError: if it is not a MetaGraphDef.

    Example:
        >>> mg = read_meta_graph("train/model.ckpt-1000.meta")  # doctest: +SKIP
        >>> mg.collections["trainable_variables"][:2]  # doctest: +SKIP
        ['conv1/weights', 'conv1/biases']
    """
    try:
        data = map_file(path)
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CorruptCheckpointError("is a directory, expected a .meta file", path=path) from None
    try:
        try:
            return parse_meta_graph(data, path)
        except CorruptCheckpointError as binary_error:
            head = bytes(data[:4096])
            if b"meta_info_def" in head or b"collection_def" in head or b"graph_def" in head:
                return _read_text(bytes(data), path)
            raise binary_error
    finally:
        close_map(data)


def parse_meta_graph(data, path: str, *, start: int = 0, end: int | None = None) -> MetaGraph:
    """Decodes the binary ``MetaGraphDef`` in ``data[start:end]`` (a ``.meta`` file, or one
    graph inside a SavedModel's ``saved_model.pb``) without parsing or copying ``graph_def``.

    Returns:
        A :class:`MetaGraph`.

    Raises:
        CorruptCheckpointError: if the bytes are not a MetaGraphDef (offsets are of ``data``).
    """
    end = len(data) if end is None else end
    if end <= start:
        raise CorruptCheckpointError("empty, expected a MetaGraphDef", path=path, offset=start)
    graph = MetaGraph(path=path)
    cur = Cursor(data, path, start=start, end=end)
    seen_known = False
    while cur.remaining:
        tag_at = cur.pos
        tag = cur.varint()
        number, wire = tag >> 3, tag & 7
        if wire == 2:
            payload = cur.read(cur.varint())
        elif wire in _WIRE_SKIP:
            payload = None
            if wire == 0:
                cur.varint()
            else:
                cur.read(_WIRE_SKIP[wire])
        else:
            raise cur.error(f"not a MetaGraphDef (wire type {wire} in field {number})", tag_at)
        if number == 0 or number > 1000:
            raise cur.error(f"not a MetaGraphDef (field number {number})", tag_at)
        try:
            if number == 1 and payload is not None:
                info = MetaInfoDef.FromString(bytes(payload))
                graph.tensorflow_version = info.tensorflow_version
                graph.tags = tuple(text(t) for t in info.tags)
                seen_known = True
            elif number == 2:
                seen_known = True  # graph_def: skipped on purpose
            elif number == 3 and payload is not None:
                saver = SaverDef.FromString(bytes(payload))
                graph.saver_version, graph.saver_sharded = saver.version, saver.sharded
                seen_known = True
            elif number == 4 and payload is not None:
                _add_collection(graph, CollectionEntry.FromString(bytes(payload)))
                seen_known = True
        except CorruptCheckpointError:
            raise
        except Exception as exc:
            raise cur.error(f"not a MetaGraphDef (field {number}: {exc})", tag_at) from None
    if not seen_known:
        raise CorruptCheckpointError("not a MetaGraphDef (no graph, saver or collections)",
                                     path=path)
    return graph


def _read_text(text: bytes, path: str) -> MetaGraph:
    from google.protobuf import text_format

    msg = MetaGraphDef()
    try:
        text_format.Parse(text.decode("utf-8"), msg, allow_unknown_field=True,
                          allow_unknown_extension=True)
    except Exception as exc:
        raise CorruptCheckpointError(f"not a MetaGraphDef (text parse failed: {exc})",
                                     path=path) from None
    return meta_graph_from_message(msg, path)


def meta_graph_from_message(msg, path: str) -> MetaGraph:
    """Returns the :class:`MetaGraph` of a parsed (text-format) ``MetaGraphDef`` message."""
    graph = MetaGraph(path=path, tensorflow_version=msg.meta_info_def.tensorflow_version,
                      saver_version=msg.saver_def.version, saver_sharded=msg.saver_def.sharded,
                      tags=tuple(text(t) for t in msg.meta_info_def.tags))
    for entry in msg.collection_def:
        _add_collection(graph, entry)
    return graph
