"""``ckpt average`` of TF1 checkpoints saved without their own ``.meta`` whose keys' names
another checkpoint's graph of their prefix contradicts (``meta_doubt``:
:mod:`~ckpt_tools.meta_sibling`).

The output gets no ``.meta`` and a state file of its own; written alone, nothing would be left
to doubt its names, and exporting it paired the mean of a swapping Saver's raw weights as the
averages, exit 0 (review-25-attack-r83 F7). Refusing every such input left a swapping run's
meta-less checkpoints no way to be averaged at all (review-25-attack-r87 F3). So the plain
average (every key averaged under its own name, ``--ema`` left out) carries the doubt: the
graphs that doubt the inputs are copied beside the output, under names that read as other
checkpoints of its prefix, and the output, reopened in the stage, must be doubted the same way
before it is published. It is never the output's own ``.meta`` (that would prove what the
inputs' siblings only doubt). ``--ema`` (the keys named as shadows) stays refused unless
``--ema --bake --not-swapped`` states the plain reading; so does an input with a ``.meta`` of
its own beside a doubted one (the output would get that graph as its own).
"""

from __future__ import annotations

import os
import re

from .checkpoint import Checkpoint
from .errors import UnprovenPairingError
from .formats._io import is_url
from .formats._write import copy_file, os_errors

__all__ = ["carry_doubt", "doubt_to_carry", "refuse_marked_ema"]


def doubt_to_carry(ckpts: list[Checkpoint], ema: bool, bake: bool, *,
                   no_meta: bool = False) -> list[str]:
    """The graph files to copy beside the average of ``ckpts`` so that it is doubted as they
    are (:func:`carry_doubt`). ``no_meta``: ``--no-meta`` was given (:func:`refuse_marked_ema`
    says so).

    Returns:
        `list[str]`: the doubting ``.meta`` files of every input (each once, oldest input's
        first); ``[]`` where no input is doubted, or ``bake`` with ``--not-swapped`` stated.

    Raises:
        UnprovenPairingError: (exit 6) with ``ema`` (the keys named as shadows are what is
            doubted), or where another input has a ``.meta`` of its own, naming the input,
            the graph and ``--not-swapped``.
    """
    from .meta_sibling import doubt_note

    refuse_marked_ema(ckpts, ema, no_meta=no_meta)
    doubted = [c for c in ckpts if getattr(c, "meta_doubt", ())]
    if not doubted or bake and doubted[0].not_swapped:
        return []
    first = doubted[0]
    own = next((c for c in ckpts if c.meta is not None), None)
    if ema or own is not None:
        why = ("--ema averages the keys named as shadows, which a swapping Saver's keys named "
               "as averages are not (they hold the raw weights)" if ema else
               f"{own.path} has a .meta of its own, which the output would get as its graph")
        raise UnprovenPairingError(
            f"{first.path}: {doubt_note(first)}; {why}: refused. If a Saver of each variable "
            "under its own name wrote the inputs, average with --ema --bake --not-swapped (the "
            "averaged shadows written under the plain names); without --ema, every key is "
            "averaged under its own name and the output is doubted as the inputs are",
            option="--not-swapped")
    paths: list[str] = []
    seen: set[str] = set()
    for c in doubted:
        for path, _, _ in c.meta_doubt:
            real = path if is_url(path) else os.path.realpath(path)
            if real not in seen:
                seen.add(real)
                paths.append(path)
    return paths


def refuse_marked_ema(ckpts: list[Checkpoint], ema: bool, *, no_meta: bool = False) -> None:
    """Refuses ``--ema`` over an input whose ``_CKPT_TOOLS_RECORD`` mark says its names are
    doubted where no graph beside it doubts them (renamed, copied, read with ``--no-meta``):
    the mark's doubt weighs as the sibling graph's, which ``--no-meta`` does not lift either;
    ``average --ema --bake --no-meta`` of renamed marked averages baked the mean of the raw
    weights into the plain names, exit 0 (review-29-attack-r107 F4). ``--not-swapped``
    decides. The refusal says ``--no-meta`` does not decide it only where ``no_meta``
    (``--no-meta`` given).

    Raises:
        UnprovenPairingError: (exit 6) naming the input, the mark and ``--not-swapped``.
    """
    from .doubt_refusal import doubt_writers
    from .tools_mark import RECORD_KEY, names_doubted

    if not ema:
        return
    for c in ckpts:
        doubt = names_doubted(getattr(c, "tools_mark", None))
        if doubt and not c.not_swapped \
                and not getattr(c, "meta_doubt", ()) and not _own_graph_recorded(c):
            who, carried = doubt_writers(doubt)  # its writer, not always ckpt average (r117 M1)
            raise UnprovenPairingError(
                f"{c.path}: its {RECORD_KEY} key says {who} from inputs whose keys' names a "
                f"swapping Saver's graph doubts{carried}; --ema averages the keys named as "
                "shadows, which a swapping Saver's keys named as averages are not (they hold "
                "the raw weights)" + (", and --no-meta does not decide that" if no_meta
                                      else "") + ": refused. If a Saver of "
                "each variable under its own name wrote the inputs, average with --ema --bake "
                "--not-swapped; without --ema, every key is averaged under its own name",
                option="--not-swapped")


def _own_graph_recorded(ckpt: Checkpoint) -> bool:
    """Whether the marked ``ckpt`` is read through a graph of its own that its mark records
    as the one it was written with (opened, not refused nor deferred: a graph of other bytes
    is, :func:`~ckpt_tools.own_graph_mark.refuse_foreign_graph`): its keys are read as that
    graph says, as ``export`` in place reads them (review-30-attack-r110 F3)."""
    return ckpt.meta is not None and not getattr(ckpt, "meta_unread", None) \
        and getattr(ckpt, "meta_unknown", None) is None


def carry_doubt(paths: list[str], prefix: str, shown, taken=frozenset()) -> list[str]:
    """Copies ``paths`` beside the output checkpoint ``prefix`` (in its stage) under names that
    :func:`~ckpt_tools.meta_sibling.candidates` reads as other checkpoints' graphs of its prefix
    (each file's own name where it does, else ``<name>-<N>.meta``), then reopens the output
    and requires it doubted as the inputs were.

    Args:
        paths: :func:`doubt_to_carry`'s files.
        prefix: the staged output prefix.
        shown: maps a staged path to the name it will have under ``--out``.
        taken: names the copies must not take (the objects already in an ``s3://`` --out,
            staged in an empty local directory: an upload would replace them).

    Returns:
        `list[str]`: the copies, as named under ``--out``.

    Raises:
        UnprovenPairingError: (exit 6) the reopened output is not doubted (nothing written
            is published).
    """
    if not paths:
        return []
    from .checkpoint import open_checkpoint
    from .meta_sibling import candidates

    directory, name = os.path.split(prefix)
    copies = []
    for i, path in enumerate(paths, 1):
        target = os.path.join(directory, path.rstrip("/").rsplit("/", 1)[-1])
        if target == prefix + ".meta" or not _usable(target, taken):
            target = _free(directory, name, i, taken)
        _copy(path, target, shown(target))
        if target not in candidates(prefix):  # a name of another stem (--name)
            moved = _free(directory, name, i, taken)
            os.rename(target, moved)
            target = moved
        copies.append(target)
    with open_checkpoint(prefix) as out:
        doubted = bool(out.meta_doubt)
    if not doubted:
        raise UnprovenPairingError(
            f"{shown(prefix)}: the inputs' keys' names are doubted by "
            f"{', '.join(os.path.basename(p) for p in paths)} (other checkpoints' graphs of "
            "their prefix), and that doubt could not be carried into the output beside it: "
            "refused. If a Saver of each variable under its own name wrote the inputs, average "
            "with --ema --bake --not-swapped", option="--not-swapped")
    return [shown(c) for c in copies]


def _free(directory: str, name: str, start: int, taken=frozenset()) -> str:
    """The first ``<name>-<N>.meta`` in ``directory`` (from ``N = start``) that
    :func:`_usable` allows."""
    n = start
    while not _usable(os.path.join(directory, f"{name}-{n}.meta"), taken):
        n += 1
    return os.path.join(directory, f"{name}-{n}.meta")


def _usable(target: str, taken=frozenset()) -> bool:
    """Whether a carried copy may take the name ``target`` (``<dir>/<stem>.meta``): no file
    of that name in its directory or in ``taken``, and no checkpoint of ``<stem>`` there
    (``<stem>``, ``<stem>.index``, ``<stem>.data-*``, any other ``<stem>.*``, V1 shards
    ``<stem>-NNNNN-of-NNNNN``), whose own ``.meta`` it would become: a meta-less checkpoint
    saved with ``write_meta_graph=False`` then read the swapping graph as its own, which
    proved the swapped pairing of its plain keys, its raw weights exported as the averages,
    exit 0 (review-27-attack-r95 F3)."""
    directory, base = os.path.split(target)
    stem = base[:-len(".meta")]
    try:
        names = set(os.listdir(directory)) | set(taken)
    except OSError:
        names = set(taken)
    if base in names or os.path.lexists(target):
        return False
    shard = re.compile(re.escape(stem) + r"-\d{5}-of-\d{5}")
    return not any(n == stem or n.startswith(stem + ".") or shard.fullmatch(n)
                   for n in names)


def _copy(path: str, target: str, shown: str) -> None:
    """Copies the input graph ``path`` (a local file, or a URL fetched whole within
    ``CKPT_REMOTE_MAX_BYTES``, as the reading of it was) to the new file ``target``."""
    if not is_url(path):
        copy_file(path, target, shown)
        return
    from .formats._io import close_map, fetched, map_file

    data = fetched(path) or map_file(path)  # (kept from its reading: no request again)
    try:
        with os_errors(shown, "writing"), open(target, "xb") as out:
            out.write(data)
    finally:
        close_map(data)

