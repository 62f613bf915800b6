"""The :class:`MetaGraph` record :mod:`~ckpt_tools.formats.meta` reads from a ``.meta`` file:
its variables (with their partitions), collections and saver settings.
"""

from __future__ import annotations

from ._record import Frozen, Record

# Collections whose members are serialized VariableDef protos.
VARIABLE_COLLECTIONS = (
    "variables", "trainable_variables", "moving_average_variables", "model_variables",
    "local_variables", "global_step", "metric_variables", "trainable_resource_variables",
)


class Partition(Frozen):
    """Where one part of a partitioned variable sits in the full tensor (``SaveSliceInfoDef``)."""

    full_name: str
    full_shape: tuple[int, ...]
    var_offset: tuple[int, ...]
    var_shape: tuple[int, ...]
    _fields = ("full_name", "full_shape", "var_offset", "var_shape")

    def __init__(self, full_name: str, full_shape: tuple[int, ...], var_offset: tuple[int, ...],
                 var_shape: tuple[int, ...]) -> None:
        self.__dict__.update(full_name=full_name, full_shape=full_shape, var_offset=var_offset,
                             var_shape=var_shape)


class MetaVariable(Frozen):
    """A variable as the graph knows it."""

    name: str  # op name in the graph, e.g. "emb/part_0"
    checkpoint_key: str  # key it is saved under, e.g. "emb"
    trainable: bool
    partition: Partition | None
    _fields = ("name", "checkpoint_key", "trainable", "partition")

    def __init__(self, name: str, checkpoint_key: str, trainable: bool,
                 partition: Partition | None = None) -> None:
        self.__dict__.update(name=name, checkpoint_key=checkpoint_key, trainable=trainable,
                             partition=partition)


class MetaGraph(Record):
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
    tensorflow_version: str
    collections: dict[str, list[str]]
    variables: dict[str, MetaVariable]
    saver_version: int
    saver_sharded: bool
    tags: tuple[str, ...]  # MetaInfoDef.tags: how a SavedModel's loader selects the graph
    _fields = ("path", "tensorflow_version", "collections", "variables", "saver_version",
               "saver_sharded", "tags")

    def __init__(self, path: str, tensorflow_version: str = "",
                 collections: dict[str, list[str]] | None = None,
                 variables: dict[str, MetaVariable] | None = None, saver_version: int = 0,
                 saver_sharded: bool = False, tags: tuple[str, ...] = ()) -> None:
        self.path = path
        self.tensorflow_version = tensorflow_version
        self.collections = {} if collections is None else collections
        self.variables = {} if variables is None else variables
        self.saver_version = saver_version
        self.saver_sharded = saver_sharded
        self.tags = tags

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
