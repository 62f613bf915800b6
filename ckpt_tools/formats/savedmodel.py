"""SavedModel directories: ``saved_model.pb`` (or ``.pbtxt``) beside ``variables/variables.*``.

TF1's ``SavedModelBuilder`` and TF2's ``tf.saved_model.save`` both store the weights as an
ordinary V2 checkpoint at ``variables/variables`` (read by :mod:`.bundle`; TF2's carries its
object graph, read by :mod:`.objgraph`). ``saved_model.pb`` holds one ``MetaGraphDef`` per tag
set; TF1 graphs keep their collections there (``moving_average_variables``…), which this module
reads with :func:`.meta.parse_meta_graph`, skipping every ``graph_def`` without parsing it.

TF Serving keeps one SavedModel per numeric version folder (``model/00000123/``); the parent
folder stands for its highest version, as the model server loads it.
"""

from __future__ import annotations

import os

from ..errors import CheckpointNotFoundError, CorruptCheckpointError
from ._io import close_map, map_file
from ._record import Record
from ._wire import Cursor
from .meta import MetaGraph, meta_graph_from_message, parse_meta_graph
from .text_bound import bounded_text

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
VARIABLES_PREFIX = os.path.join("variables", "variables")
# What a SavedModel output copies beside its variables/, unchanged, when the input has it.
# (fingerprint.pb records hashes of the input; TensorFlow reads it only for logging.
# keras_metadata.pb is what tf_keras.models.load_model reads the model from.)
SAVED_MODEL_EXTRAS = ("fingerprint.pb", "keras_metadata.pb", "assets", "assets.extra")
_MAX_EXTRA_FILES = 10_000  # listed as inputs; a vocabulary or two in the usual model


def saved_model_extras(saved_model: str) -> list[str]:
    """The files beside ``saved_model`` (a ``saved_model.pb``) that a SavedModel output copies:
    :data:`SAVED_MODEL_EXTRAS`, the files under its asset directories included (at most
    10,000; links are listed, not followed). Returns paths; none where there are none."""
    directory = os.path.dirname(saved_model)
    found: list[str] = []
    for extra in SAVED_MODEL_EXTRAS:
        path = os.path.join(directory, extra)
        if os.path.isfile(path) or os.path.islink(path):
            found.append(path)
        elif os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                found += [os.path.join(root, f) for f in files + [
                    d for d in dirs if os.path.islink(os.path.join(root, d))]]
                if len(found) > _MAX_EXTRA_FILES:
                    return found
    return found
_MAX_GRAPHS = 1000  # meta graphs in one SavedModel; real ones hold a handful


class SavedModel(Record):
    """What ``saved_model.pb`` says about variables.

    Attributes:
        path: the ``saved_model.pb`` (or ``.pbtxt``) file read.
        schema_version: ``saved_model_schema_version`` (1 for every TensorFlow so far).
        meta_graphs: one :class:`~.meta.MetaGraph` per tag set, in file order.
    """

    path: str
    schema_version: int
    meta_graphs: list[MetaGraph]
    _fields = ("path", "schema_version", "meta_graphs")

    def __init__(self, path: str, schema_version: int = 0,
                 meta_graphs: list[MetaGraph] | None = None) -> None:
        self.path = path
        self.schema_version = schema_version
        self.meta_graphs = [] if meta_graphs is None else meta_graphs

    def collections_graph(self) -> MetaGraph | None:
        """Returns the meta graph whose collections describe the variables, or ``None``.

        TF2 SavedModels record no variable collections (their object graph says what each
        variable is), so they give ``None``. Among TF1 graphs the first one that records
        ``moving_average_variables`` wins, else the one tagged ``serve``, else the first.
        """
        graphs = [g for g in self.meta_graphs if g.collections.get("variables")]
        for pick in (lambda g: bool(g.collections.get("moving_average_variables")),
                     lambda g: "serve" in g.tags, lambda g: True):
            for g in graphs:
                if pick(g):
                    return g
        return None


def saved_model_file(directory: str) -> str | None:
    """Returns ``directory/saved_model.pb`` (or ``.pbtxt``) when it exists, else ``None``.

    Anything there counts (exists(), not isfile()): a FIFO or directory under that name is then
    refused by :func:`read_saved_model` with a clear error rather than taken as missing.
    """
    for name in SAVED_MODEL_FILES:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            return path
    return None


def serving_version(directory: str) -> str | None:
    """Returns the highest numeric version folder of a TF Serving model directory (one holding
    ``<version>/saved_model.pb``), or ``None`` when ``directory`` has none."""
    return serving_versions(directory)[0]


def serving_versions(directory: str) -> tuple[str | None, list[str]]:
    """Returns (the highest numeric version folder holding a SavedModel, or ``None``; the
    higher-numbered folders skipped because they hold none, highest first) -- the model
    server does the same, and the caller says so rather than skipping silently."""
    try:
        names = os.listdir(directory)
    except OSError:
        return None, []
    numeric = sorted((n for n in names if n.isdigit() and n.isascii()
                      and os.path.isdir(os.path.join(directory, n))), key=int, reverse=True)
    for i, n in enumerate(numeric):
        if saved_model_file(os.path.join(directory, n)):
            return os.path.join(directory, n), numeric[:i]
    return None, []


def variables_prefix(directory: str) -> str:
    """Returns the checkpoint prefix of a SavedModel's weights (``<dir>/variables/variables``)."""
    return os.path.join(directory, VARIABLES_PREFIX)


def read_saved_model(path: str) -> SavedModel:
    """Reads the meta graphs' collections, tags and saver settings from ``saved_model.pb``.

    Args:
        path: a binary ``saved_model.pb`` or a text-format ``saved_model.pbtxt``.

    Returns:
        A :class:`SavedModel`.

    Raises:
        CheckpointNotFoundError: if ``path`` does not exist.
        CorruptCheckpointError: if it is not a SavedModel proto.
    """
    try:
        data = map_file(path)
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CorruptCheckpointError("is a directory, expected saved_model.pb",
                                     path=path) from None
    try:
        if path.endswith(".pbtxt"):
            return _read_text(data, path)
        return _read_binary(data, path)
    finally:
        close_map(data)


def _read_binary(data, path: str) -> SavedModel:
    if len(data) == 0:
        raise CorruptCheckpointError("file is empty, expected a SavedModel", path=path)
    model = SavedModel(path=path)
    cur = Cursor(data, path)
    while cur.remaining:
        tag_at = cur.pos
        tag = cur.varint()
        number, wire = tag >> 3, tag & 7
        if number == 1 and wire == 0:
            model.schema_version = cur.varint()
        elif number == 2 and wire == 2:
            size = cur.varint()
            start = cur.pos
            cur.read(size)  # bounds-checked; the graph is decoded in place, not copied
            if len(model.meta_graphs) >= _MAX_GRAPHS:
                raise cur.error(f"more than {_MAX_GRAPHS} meta graphs", tag_at)
            model.meta_graphs.append(parse_meta_graph(data, path, start=start, end=cur.pos))
        else:
            raise cur.error(f"not a SavedModel (field {number}, wire type {wire})", tag_at)
    if not model.meta_graphs:
        raise CorruptCheckpointError("not a SavedModel (no meta graph)", path=path)
    return model


def _read_text(data, path: str) -> SavedModel:
    """Parses the text-format ``SavedModel`` in ``data`` (the file's bytes or its map), within
    :func:`.text_bound.bounded_text`'s bounds (review-25-attack-r81 F3)."""
    from google.protobuf import text_format

    from ._protos import SavedModel as SavedModelProto  # text-format files only

    text = bounded_text(data, path, "SavedModel")
    msg = SavedModelProto()
    try:
        text_format.Parse(text, msg, allow_unknown_field=True,
                          allow_unknown_extension=True)
    except Exception as exc:
        raise CorruptCheckpointError(f"not a SavedModel (text parse failed: {exc})",
                                     path=path) from None
    if not msg.meta_graphs:
        raise CorruptCheckpointError("not a SavedModel (no meta graph)", path=path)
    return SavedModel(path=path, schema_version=msg.saved_model_schema_version,
                      meta_graphs=[meta_graph_from_message(g, path) for g in msg.meta_graphs])
