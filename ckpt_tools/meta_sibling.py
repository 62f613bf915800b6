"""The ``.meta`` of another checkpoint of the same Saver, for a TF1 checkpoint saved without one.

The usual TF1 loop writes the graph once: ``saver.save(sess, path, global_step=i,
write_meta_graph=(i == 1))`` (or a hook that writes it once). ``model.ckpt-3`` then has no
``.meta``, and its keys alone cannot tell a swapping Saver (``{v.op.name: ema.average(v),
ema.average_name(v): v}``: each key named as a variable holds its average) from a plain one;
paired by the names, the raw weights went out as the averages, exit 0, though
``model.ckpt-1.meta`` beside it records the very Saver that proves the swap
(review-23-attack-r71 F2).

:func:`borrowed_graph` looks only at the ``.meta`` files of the checkpoints its directory's
``checkpoint`` state file lists together with it (one running Saver's checkpoints), of its
own prefix and of steps at or before its own, newest first (no other file is parsed): where
there is no state file, or it does not list this checkpoint, nothing is borrowed, since a
``.meta`` of another run proves nothing of the Saver that wrote this one (an averages-only
run's graph beside a later training run's checkpoint of the same keys, review-24-attack-r74
F1, F2, F5, F7). Each is read with the bounds of a checkpoint's own ``.meta``, and one that
cannot be read is as if absent (F4, F8). It keeps the graphs whose Saver's save op writes
exactly this checkpoint's keys, each of the dtype and shape its variable is declared
with. One such graph (or several recording the same save op) is taken as the checkpoint's own
(:class:`~ckpt_tools.checkpoint.Checkpoint` says so: ``meta_borrowed``). Several that disagree
about what a key was saved from (a swapping Saver's graph beside a plain one's) prove nothing
alone: the newest is read, the others named beside it, and the save op is then taken as
unrecorded, the keys' name pairing refused, as for a graph file recording crossed save ops
(:func:`~ckpt_tools.save_op.crossed_keys`). A graph whose save op writes other keys is not
this checkpoint's Saver's and is ignored.
A text-format ``.meta`` too large to parse (:data:`~ckpt_tools.formats.meta.TEXT_META_MAX_LINE`)
is refused rather than passed over: it may be the graph that proves a swap
(review-24-attack-r78 F5).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from .errors import CheckpointError, CorruptCheckpointError
from .formats._io import is_url
from .formats.graph_def import read_graphs
from .formats.graph_nodes import attr_entry
from .formats.meta import TextMetaTooLargeError, proto_fields, read_meta_graph
from .formats.meta_saver import saved_sources_each
from .formats.v1 import shard_base
from .state_file import read_state_order

_STEP = re.compile(r"^(.+)-(\d+)$")
_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})


def candidates(prefix: str) -> list[str]:
    """The ``.meta`` files of the other checkpoints of ``prefix``'s run in its directory:
    ``<stem>-<N>.meta`` of each ``<stem>-<N>`` the directory's ``checkpoint`` state file lists
    together with ``prefix`` (``<stem>-<M>``), of a step ``N <= M``, newest step first.

    Only the state file says which checkpoints one running Saver wrote: a ``.meta`` of the
    same prefix that it does not list beside this checkpoint is an earlier (or later) run's,
    whose Saver may have written the same keys from other tensors (an averages-only run's
    graph beside a later training run's checkpoint, review-24-attack-r74 F1, F2, F7); a step
    after ``M`` is a graph saved after this checkpoint (F5).

    Returns:
        `list[str]`: the paths; ``[]`` for a name without a step, a URL, a directory without
        a readable state file, or a checkpoint the state file does not list.
    """
    base = shard_base(prefix)
    if is_url(base):
        return []
    directory, name = os.path.split(base)
    m = _STEP.match(name)
    if not m:
        return []
    try:
        listed, latest = read_state_order(directory or ".")
    except (CheckpointError, OSError):  # no state file (or an unreadable one): no run known
        return []
    here = os.path.abspath(directory or ".")
    names = set()
    for path in (*listed, latest):
        if not is_url(path) and os.path.dirname(os.path.abspath(path)) == here:
            names.add(os.path.basename(shard_base(path)))  # its own directory only
    if name not in names:
        return []
    found = []
    for other in names:
        hit = _STEP.match(other)
        if hit and hit.group(1) == m.group(1) and int(hit.group(2)) <= int(m.group(2)) \
                and other != name:
            meta = os.path.join(directory, other + ".meta")
            if os.path.isfile(meta):
                found.append((int(hit.group(2)), meta))
    found.sort(reverse=True)
    return [path for _, path in found]


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


def _written(path: str, entries: Mapping) -> tuple:
    """``(MetaGraph, save ops)``: the collections read from ``path`` and the save ops of its
    graphs that write exactly ``entries``' keys, each of its variable's dtype and shape
    (``(None, [])``: none, or the file cannot be read)."""
    stored = set(entries)
    try:
        # Read first as the checkpoint's own .meta is (binary, or text only where its head
        # says so): junk fails fast, not a text parse of GBs (r74 F4), and damaged
        # collections make it absent, not fatal to a checkpoint that needs none (r74 F8).
        meta = read_meta_graph(path)
        each = [s for s in saved_sources_each(path) if set(s) == stored]
        if not each:
            return None, []
        graphs = read_graphs(path)
    except TextMetaTooLargeError:  # unread, not damaged: borrowed_graph refuses it
        raise
    except CheckpointError:  # a damaged neighbour proves nothing: as if it were not there
        return None, []
    return meta, [s for s in each if any(_fits(g, s, entries) for g in graphs
                                         if all(of[0] in g.nodes for of in s.values()))]


def borrowed_graph(prefix: str, entries: Mapping) -> tuple:
    """The same-prefix ``.meta`` to read as the graph of the checkpoint at ``prefix`` (which
    has none of its own), and the others whose save ops write its keys from other variables.

    Args:
        prefix: the checkpoint prefix (V2), file or shard pattern (V1).
        entries: its stored keys -> :class:`~ckpt_tools.formats.entry.TensorEntry`.

    Returns:
        ``(MetaGraph, path, crossed)``: the newest ``.meta`` whose save op writes exactly
        these keys (its collections as :func:`_written` read them: each candidate is read
        once), and the other such files that record a different save op (``()``: they all
        agree); ``(None, None, ())`` where no same-prefix ``.meta`` records the keys.

    Raises:
        CorruptCheckpointError: a candidate is a text-format ``.meta`` too large to parse
            (:class:`~ckpt_tools.formats.meta.TextMetaTooLargeError`), naming ``--no-meta``.
    """
    matched: list[tuple[str, object, list[dict[str, list[str]]]]] = []
    for path in candidates(prefix):
        try:
            meta, written = _written(path, entries)
        except TextMetaTooLargeError as exc:  # a swapping run's graph as text passed over
            # paired its raw weights by names as the averages, exit 0 (review-24-attack-r78 F5)
            raise CorruptCheckpointError(
                f"{prefix} has no .meta of its own, and the same-prefix {exc}: unread, its "
                "save op may be the one that shows what the keys hold (a swapping Saver's), "
                "so it is not passed over: write it binary to have it read, or pass --no-meta "
                "(Python: use_meta=False) to pair by key names, which a swapping Saver's keys "
                "defeat") from None
        if written:
            matched.append((path, meta, written))
    if not matched:
        return None, None, ()
    first = matched[0][2][0]
    crossed = tuple(p for p, _, written in matched[1:] if any(s != first for s in written))
    return matched[0][1], matched[0][0], crossed


def borrowed_note(ckpt) -> str | None:
    """What a command says of a checkpoint whose graph is another checkpoint's ``.meta``
    (``Checkpoint.meta_borrowed``): ``"graph from model.ckpt-1.meta (saved without its own
    .meta)"``, and the files recording another save op of its keys; ``None`` otherwise."""
    if not getattr(ckpt, "meta_borrowed", None):
        return None
    said = f"graph from {os.path.basename(ckpt.meta_borrowed)} (saved without its own .meta)"
    if ckpt.meta_crossed:
        said += ("; " + ", ".join(os.path.basename(p) for p in ckpt.meta_crossed)
                 + " of the same prefix records another save op of the same keys, so which "
                 "Saver wrote them is not proven")
    return said
