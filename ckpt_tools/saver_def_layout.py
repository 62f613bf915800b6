"""What a TF1 checkpoint's own files show against the ``SaverDef`` its ``.meta`` records:
whether that Saver can have written them (review-28-attack-r101 F1, F2).

``--saver-def-wrote`` (:mod:`~ckpt_tools.saver_def_stated`) reads the keys through the
``SaverDef``'s save op alone. Where the graph's other Saver overwrote the prefix
(``write_meta_graph=False``) the statement is false, and the file often shows it:

- a ``Saver(sharded=True)`` of variables on N devices builds one save op per device, each
  writing one shard (``MergeV2Checkpoints`` numbers them), so its checkpoint's ``.index``
  records ``num_shards`` N, each key in the shard of the save op that wrote it; a Saver that
  is not sharded writes one shard whatever the devices;
- a ``Saver(write_version=V1)`` writes a V1 table file at the prefix (``Save``/``SaveSlices``
  ops, one file per device where sharded), never an ``.index``; a V2 Saver (``SaveV2``)
  writes a V2 bundle, never a V1 file.

:func:`layout_against` says what the file shows against the ``SaverDef`` (``""``: nothing);
the statement is then refused and never offered.
"""

from __future__ import annotations

from .wording import counted

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .formats import Reader

_FORMAT = {"SaveV2": "v2", "Save": "v1", "SaveSlices": "v1"}  # save op -> what it writes
_VERSION = {1: "v1", 2: "v2"}  # SaverDef.version (V1, V2; LEGACY 0 says nothing here)
_WRITES = {"v1": "V1 checkpoints (a table file at the prefix, never an .index)",
           "v2": "V2 bundles (an .index and .data files)"}
_IS = {"v1": "a V1 table file", "v2": "a V2 bundle (read from its .index)"}


def layout_against(meta_source: str, saver_version: int, reader: Reader, fmt: str) -> str:
    """What the checkpoint read by ``reader`` shows against the ``SaverDef`` that the
    ``.meta`` at ``meta_source`` records (its ``version`` ``saver_version``): its format (V1
    or V2) is not the one that Saver writes, or its number of shards (the ``.index``'s
    ``num_shards``, a sharded V1 checkpoint's files) is not that Saver's number of save ops,
    or two keys one save op writes lie in two shards, or keys of two save ops in one.

    Args:
        meta_source: the checkpoint's own ``.meta``.
        saver_version: its ``SaverDef.version`` (0: not recorded).
        reader: the checkpoint's reader (a V2 ``BundleReader`` or a ``V1Reader``).
        fmt: ``"v2"`` or ``"v1"``: the format read.

    Returns:
        `str`: a clause (``"the .meta's SaverDef records ..., while this checkpoint ..."``),
        or ``""`` where the file shows nothing against that Saver having written it.

    Raises:
        CheckpointError: the ``.meta`` cannot be opened or mapped.
    """
    from .formats.meta_saver import saver_def_save_ops

    if fmt not in _IS:
        return ""
    graphs = saver_def_save_ops(meta_source)
    ops = graphs[0] if graphs else []
    stated = _VERSION.get(saver_version)
    if stated and stated != fmt:
        return (f"the .meta's SaverDef records format version {stated.upper()}, so that Saver "
                f"writes {_WRITES[stated]}, while this checkpoint is {_IS[fmt]}")
    written = {_FORMAT[op] for op, _ in ops if op in _FORMAT}
    if len(written) == 1 and fmt not in written:
        kind = next(iter(written))
        return (f"the .meta's SaverDef's save op ({ops[0][0]}) writes {_WRITES[kind]}, while "
                f"this checkpoint is {_IS[fmt]}")
    if not ops:
        return ""
    return _shards_against(ops, reader, fmt)


def shows_otherwise(ckpt: Checkpoint, path: str) -> bool:
    """Whether the open checkpoint ``ckpt``'s files show that the Saver whose ``SaverDef`` its
    ``.meta`` at ``path`` records did not write it (:func:`layout_against`): then
    ``--saver-def-wrote`` is never offered.

    Returns:
        `bool`.

    Raises:
        CheckpointError: the ``.meta`` cannot be opened or mapped.
    """
    version = ckpt.meta.saver_version if ckpt.meta is not None else 0
    return bool(layout_against(path, version, ckpt.reader, ckpt.format))


def _shards_against(ops: list[tuple[str, frozenset[str]]], reader: Reader, fmt: str) -> str:
    """:func:`layout_against`'s shard check: ``""`` or the clause."""
    n = len(ops)
    saver = (f"a Saver with {n} save ops (sharded: one per device), writing {n} shards"
             if n > 1 else "a Saver with one save op, writing one shard")
    if fmt == "v1":
        files = len(reader.files()) if hasattr(reader, "files") else n
        if files != n:
            return (f"the .meta's SaverDef records {saver}, while this V1 checkpoint is "
                    f"{counted(files, 'file')}")
        return ""
    shards = getattr(reader, "num_shards", None)
    if shards is None:
        return ""
    if shards != n:
        return (f"the .meta's SaverDef records {saver}, while this checkpoint's .index "
                f"records {counted(shards, 'shard')}")
    if n == 1:
        return ""
    writer: dict[str, set[int]] = {}  # key -> the save ops writing it
    for at, (_, keys) in enumerate(ops):
        for key in keys:
            writer.setdefault(key, set()).add(at)
    held: dict[int, set[int]] = {}  # save op -> the shards its keys lie in
    for key, entry in reader.entries.items():
        ats = writer.get(key)
        if entry.slices or not ats or len(ats) != 1:  # a partitioned variable's parts: any
            continue
        held.setdefault(next(iter(ats)), set()).add(entry.shard_id)
    split = next((at for at, s in held.items() if len(s) > 1), None)
    if split is not None:
        return (f"the .meta's SaverDef records {saver}, while keys its save op "
                f"{split + 1} writes lie in shards {sorted(held[split])} of this checkpoint")
    seen: dict[int, int] = {}
    for at, s in sorted(held.items()):
        shard = next(iter(s))
        if shard in seen:
            return (f"the .meta's SaverDef records {saver}, while keys of its save ops "
                    f"{seen[shard] + 1} and {at + 1} lie in one shard ({shard}) of this "
                    "checkpoint")
        seen[shard] = at
    return ""
