"""A TF1 partitioned variable whose parts a Saver wrote whole, each under a key of its own.

TF saves a partitioned variable (``fixed_size_partitioner``) as one key holding its parts
as slices. A ``Saver(var_list=dict)`` naming each part instead writes each part whole under
its own key: an evaluation graph's ``Saver(ema.variables_to_restore())`` writes
``w/part_0/ExponentialMovingAverage`` from the part ``w/part_0`` itself. No key then holds
``w``, and ckpt does not assemble parts saved under separate keys, so neither its average
nor (``--allow-missing``) its raw value can be given: without this refusal ``w`` was left
out of an export with exit 0, or mapped to a key the file does not hold
(review-25-user-u27 F1).
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError
from .save_op import graph_named, written_sources
from .wording import counted


def parts_apart(ckpt: Checkpoint, targets) -> dict[str, list[str]]:
    """Returns variable -> the stored keys the ``.meta``'s save op wrote its parts into, for
    each of ``targets`` (variable keys the map expects) that no stored key holds, where the
    save op wrote a part of it (a graph variable whose save-slice info names the target as
    its whole) under another key; ``{}`` where nothing records the save op or none is so."""
    stored = ckpt.entries()
    wanted = {t for t in targets if t not in stored}
    sources = written_sources(ckpt) if wanted and ckpt.objects is None else None
    if not sources:
        return {}
    graph = ckpt.meta.variables if ckpt.meta is not None else {}
    found: dict[str, list[str]] = {}
    for key, read in sorted(sources.items()):
        for src in read:
            # a part only as the graph records it (save-slice info of src naming the
            # whole), not any variable whose name ends in part_N
            part = getattr(graph.get(src), "partition", None)
            whole = part.full_name if part is not None else None
            if whole in wanted and whole != src and key != whole:
                found.setdefault(whole, []).append(key)
    return found


def refuse_parts_apart(ckpt: Checkpoint, targets) -> None:
    """Refuses (exit 6) a map that expects a variable of ``targets`` whose parts the save
    op wrote whole under separate keys (:func:`parts_apart`): exporting it needs its parts
    assembled, which ckpt does not do, and ``--allow-missing`` has no raw value of it to give.

    Raises:
        UnprovenPairingError: naming the file, the variable and a key holding a part of it;
            no option decides (``--allow-missing`` does not either).
    """
    found = parts_apart(ckpt, targets)
    if not found:
        return
    var, keys = next(iter(sorted(found.items())))
    more = f" (and {counted(len(found) - 1, 'more variable')} so)" if len(found) > 1 else ""
    raise UnprovenPairingError(
        f"{ckpt.path}: {var} is a partitioned variable stored under no key of its own: its "
        f"{graph_named(ckpt)}'s save op wrote its parts whole under "
        f"{counted(len(keys), 'separate key')} (e.g. {keys[0]}), as a "
        "Saver(ema.variables_to_restore()) of an evaluation "
        f"graph writes them{more}; ckpt does not assemble parts saved under separate keys, "
        "so it gives neither the average of it nor (--allow-missing) a raw value; no option "
        "of ckpt decides: restore the checkpoint in the graph imported from the .meta "
        "(import_meta_graph(...).restore) and save it with a plain tf.train.Saver()",
        None, {k: (var,) for ks in found.values() for k in ks})
