"""A checkpoint output never takes the name of a graph another checkpoint in ``--out`` reads.

A checkpoint output ``<name>`` owns ``<name>.meta`` in its directory: ``--force`` replaces it
with the output's own graph, or deletes it where the output has none. Where that file is a
graph an earlier ``ckpt average`` carried beside another output (named in that output's
``<other>.carried.json``), or one another checkpoint there reads (a meta-less checkpoint
reads its run's other graphs, :func:`~ckpt_tools.average_carried.other_readers`), replacing
it took away the doubt about that checkpoint's keys: ``average --name model.ckpt-1 --force``
or ``restore-ema`` (default name ``model.ckpt-1``) into the ``--out`` of a swapping run's
average, which then exported its raw weights as the averages, exit 0 (review-28-attack-r102
F3). Such a name is refused (exit 7), locally (:func:`refuse_held_graph`) and on ``s3://``
(:func:`refuse_held_graph_url`).
"""

from __future__ import annotations

import os
import stat

from .average_carried import (
    RECORD_SUFFIX,
    fetch_output,
    other_readers,
    parse_record,
    record_name,
)
from .errors import OutputError
from .formats._io import is_url

__all__ = ["held_graph", "refuse_held_graph", "refuse_held_graph_url"]


def held_graph(name: str, names, read) -> str | None:
    """What holds ``<name>.meta`` among a directory's file ``names``, which the output
    ``name`` would replace or delete: another checkpoint there reading it as its graph, or
    another output's record naming it as a graph carried beside that output (``read(file)``
    returns a record's bytes, or ``None``).

    Returns:
        `str`: a clause naming the holder; ``None`` where nothing else holds it (or it is
        not there).
    """
    from .bake_outputs import checkpoint_names

    meta = name + ".meta"
    names = set(names)
    if meta not in names:
        return None
    readers = other_readers(meta, names, checkpoint_names(name))
    if readers:
        return f"the checkpoint {readers[0]} there reads it as its graph"
    for n in sorted(names):
        if n.endswith(RECORD_SUFFIX) and n != record_name(name):
            other = n[: -len(RECORD_SUFFIX)]
            if meta in parse_record(read(n) or b"", other):
                return (f"{n} records it as the graph carried beside the output {other} "
                        "(the graph that doubts its keys)")
    return None


def _refusal(shown: str, why: str) -> OutputError:
    return OutputError(
        f"{shown}: {why}; the output would replace or delete it as its own .meta "
        "(--force never does: that checkpoint would lose its graph); choose another --name "
        "or --out")


def refuse_held_graph(out_dir: str, name: str) -> None:
    """Refuses to write the checkpoint ``name`` into the local directory ``out_dir`` where
    ``<name>.meta`` there is held by another checkpoint (:func:`held_graph`).

    Raises:
        OutputError: (exit 7) naming the file and what holds it.
    """
    if is_url(out_dir) or not os.path.isdir(out_dir):
        return
    try:
        names = os.listdir(out_dir)
    except OSError:
        return  # the staging's checks say why

    def read(n: str) -> bytes | None:
        path = os.path.join(out_dir, n)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
            with open(path, "rb") as f:
                return f.read(1 << 20)
        except OSError:
            return None

    why = held_graph(name, names, read)
    if why:
        raise _refusal(os.path.join(out_dir, name + ".meta"), why)


def refuse_held_graph_url(url: str, name: str, listing) -> None:
    """:func:`refuse_held_graph` for a URL directory ``url`` of objects ``listing`` (name ->
    listing entry); records are fetched as the output's.

    Raises:
        OutputError: (exit 7) naming the object and what holds it.
        RemoteAccessError: a record could not be fetched (forbidden, the network).
    """
    from .formats.remote import url_join

    names = {n for n, info in listing.items() if (info or {}).get("type") != "directory"}
    why = held_graph(name, names, lambda n: fetch_output(url, n))
    if why:
        raise _refusal(url_join(url, name + ".meta"), why)
