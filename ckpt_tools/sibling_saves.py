"""One same-prefix ``.meta`` read for a checkpoint saved without its own
(:mod:`~ckpt_tools.meta_sibling`): :func:`saved_graphs`, its save ops of exactly the
checkpoint's keys, each of its variable's dtype and shape as the graph declares them, and
the binary walk that tells a damaged ``MetaGraphDef`` from junk before anything is parsed.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import CheckpointError, RemoteAccessError, UnsupportedFormatError
from .formats._io import close_map, is_url, map_file
from .formats.graph_def import read_graphs
from .formats.graph_nodes import attr_entry
from .formats.meta import proto_fields, read_meta_graph
from .formats.meta_saver import saved_sources_all
from .formats.text_bound import TextMetaTooLargeError
from .sibling_listing import UnreadSiblingsError

_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})
_FIELDS = 7  # a MetaGraphDef's top-level fields: meta_info_def (1) ... object_graph_def (7)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _shape(raw) -> tuple[int, ...] | None:
    """A ``TensorShapeProto``'s dims, ``None`` where its rank is unknown."""
    dims = []
    for n, w, v in proto_fields(raw):
        if n == 3 and w == 0 and v:
            return None
        if n == 2 and w == 2:
            dims.append(next((_signed(s) for f, sw, s in proto_fields(v) if f == 1 and sw == 0),
                             0))
    return tuple(dims)


def _declared(nodes, name: str) -> tuple[int | None, tuple[int, ...] | None] | None:
    """The dtype and shape variable ``name`` is declared with in the graph (either ``None``
    where not recorded), or ``None`` where ``name`` is no variable op of the graph."""
    if nodes.op(name) not in _VARIABLE_OPS:
        return None
    dtype = shape = None
    for n, w, v in proto_fields(nodes.serialized(name)):
        if n != 5 or w != 2:
            continue
        key, attr = attr_entry(v)
        if attr is None:
            continue
        for f, fw, fv in proto_fields(attr):
            if key == "dtype" and f == 6 and fw == 0:
                dtype = fv
            elif key == "shape" and f == 7 and fw == 2:
                shape = _shape(fv)
    return dtype, shape


def _fits(graph, sources: dict[str, list[str]], entries: Mapping) -> bool:
    """Whether every key saved from one variable is stored with that variable's dtype and
    shape as ``graph`` declares them (``-1`` dims and what is not recorded fit)."""
    for key, of in sources.items():
        declared = _declared(graph.nodes, of[0]) if len(of) == 1 else None
        if declared is None:
            continue  # a partitioned variable's parts, or a read the walk stopped at
        dtype, shape = declared
        entry = entries[key]
        if dtype is not None and dtype % 100 != entry.dtype % 100:  # a ref dtype: +100
            return False
        if shape is not None and (len(shape) != len(entry.shape) or any(
                d not in (-1, s) for d, s in zip(shape, entry.shape, strict=True))):
            return False
    return True


def saved_graphs(path: str, entries: Mapping) -> tuple[
        list[tuple[dict[str, list[str]], object]], object]:
    """The save ops of the graphs in ``path`` that write exactly ``entries``' keys, each of
    its variable's dtype and shape, with the nodes of the first graph they fit (``[]``: none,
    or the file cannot be read), and the file's collections (``None``: unread)."""
    stored = set(entries)
    meta = None
    try:
        # Read first as the checkpoint's own .meta is (binary, or text only where its head
        # says so): junk fails fast, not a text parse of GBs (r74 F4). A binary file whose
        # collections are damaged may still record its save op, which is all that is asked
        # of it here: only a file that does not even open as a binary MetaGraphDef is
        # dropped (review-24-attack-r78 F9).
        try:
            meta = read_meta_graph(path)
        except TextMetaTooLargeError:  # unread, not damaged: doubting refuses it
            raise
        except CheckpointError as exc:
            if is_url(path) and isinstance(exc, (RemoteAccessError, UnsupportedFormatError)):
                # not fetched (the network, over CKPT_REMOTE_MAX_BYTES): unread, not passed
                # over (review-26-attack-r90 F1)
                raise UnreadSiblingsError(f"{path} could not be read ({exc})") from None
            data = map_file(path)
            try:
                if not _top_level(data):
                    return [], None
            finally:
                close_map(data)
        # every Saver the graph builds, not only the one its SaverDef records: another may
        # have written the checkpoints (a plain Saver's .meta at step 1, a swapping one's
        # later saves: review-25-attack-r83 F2); this file may only add doubt
        graphs = read_graphs(path)
        each = [s for s in saved_sources_all(path) if set(s) == stored]
        if not each:
            return [], None
    except (TextMetaTooLargeError, UnreadSiblingsError):
        raise
    except (CheckpointError, OSError) as exc:  # a file that cannot be read proves nothing
        if is_url(path) and isinstance(exc, (RemoteAccessError, UnsupportedFormatError)):
            raise UnreadSiblingsError(f"{path} could not be read ({exc})") from None
        return [], None
    found = []
    for s in each:
        fit = next((g for g in graphs if all(of[0] in g.nodes for of in s.values())
                    and _fits(g, s, entries)), None)
        if fit is not None:
            found.append((s, fit.nodes))
    return found, meta


def _varint(data, pos: int) -> tuple[int, int]:
    """The varint at ``data[pos]`` and the position after it (``IndexError`` past the end)."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80 or shift > 63:
            return value, pos
        shift += 7


def _top_level(data) -> bool:
    """Whether ``data`` walks as a binary ``MetaGraphDef``'s top-level fields to its end
    (each payload skipped, not read, not copied): a file whose collections are damaged does,
    junk (zeros, random bytes, a text head padded out) fails within its first fields."""
    pos, end = 0, len(data)
    try:
        while pos < end:
            tag, pos = _varint(data, pos)
            if not 0 < tag >> 3 <= _FIELDS:
                return False
            wire = tag & 7
            if wire == 2:
                size, pos = _varint(data, pos)
                pos += size
            elif wire == 0:
                pos = _varint(data, pos)[1]
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return False
    except IndexError:
        return False
    return pos == end
