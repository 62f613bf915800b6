"""``ckpt average`` into an ``s3://`` / ``gs://`` URL (:func:`average_to_url`): written to a
local stage as any average, checked against what the URL already holds (an earlier output's
graphs, carried copies), then uploaded, its ``.index`` and state file last."""

from __future__ import annotations

import os
from dataclasses import replace

from .average_carried import record_name, remote_carried
from .average_result import AverageResult
from .average_write import write_average
from .checkpoint import Checkpoint
from .errors import CheckpointNotFoundError, UnsupportedFormatError
from .formats._io import is_url
from .formats.write_locks import local_stage
from .locate import STATE_FILE
from .output_graphs import refuse_held_graph_url


def average_to_url(ckpts: list[Checkpoint], why: str, url: str, ema, bake, name, overwrite,
                   progress, pairing=None, extra=(), drop=False) -> AverageResult:
    """Averages into a local temporary directory, then uploads data shards, graphs and
    record first, the ``.index`` and ``checkpoint`` state file last (a reader of ``url``
    never sees an index without its data and graphs); the temporary copy is removed."""
    from .formats import remote

    if ckpts[-1].location.saved_model:
        raise UnsupportedFormatError(
            f"{url}: a SavedModel output is written to a local directory only; average into "
            "one, then copy it")
    url = url.rstrip("/")
    base = name or ckpts[-1].name
    note_remote_inputs(ckpts, extra)
    remote.check_new(url, [base + ".index", STATE_FILE], overwrite=overwrite)
    try:  # (listed by check_new: no request) the carried graphs' copies take free names
        listing = remote.session().listing(url)
    except CheckpointNotFoundError:
        listing = {}
    taken = frozenset(listing)
    refuse_held_graph_url(url, base, listing)  # another's graph as its .meta (r102 F3)
    # --force: the copies an earlier average of this output carried there, as locally
    # (review-27-attack-r95 F6): new copies may take their names, the rest are deleted last
    stale = remote_carried(url, base, listing) if overwrite else {}
    with local_stage("average") as tmp:
        local = os.path.join(tmp, "out")
        result = write_average(ckpts, why, local, ema, bake, name, False, progress, pairing,
                               taken=taken - {n for n in stale if n != record_name(base)},
                               drop=drop)
        _refuse_stale_own_meta(url, os.path.basename(result.prefix), local, taken)
        files = sorted(os.listdir(local))
        remote.upload([os.path.join(local, f) for f in files], url,
                      overwrite=overwrite, progress=progress, remove=stale)
    return replace(
        result, prefix=remote.url_join(url, os.path.basename(result.prefix)),
        doubt_removed=[remote.url_join(url, n) for n in sorted(stale)
                       if n != record_name(base) and n not in files])


def _refuse_stale_own_meta(url: str, base: str, local: str, taken: frozenset) -> None:
    """Refuses an ``s3://`` --out holding ``<base>.meta`` where the output has no ``.meta`` of
    its own (its inputs had none): the upload would leave that file, which the output would
    then read as its own graph, an earlier output's, vouching for its keys' names where the
    inputs' graphs doubt them (review-26-attack-r90 F1).

    Raises:
        OutputError: (exit 7) naming the object.
    """
    from .errors import OutputError
    from .formats import remote

    if base + ".meta" in taken and not os.path.exists(os.path.join(local, base + ".meta")):
        raise OutputError(
            f"{remote.url_join(url, base + '.meta')}: exists, and the output has no .meta of "
            "its own (its inputs have none), so it would read that graph (an earlier "
            "output's) as its own: remove it or choose another --out")


def note_remote_inputs(ckpts: list[Checkpoint], extra) -> None:
    """Records every input's objects in the remote session: opening a URL starts a fresh
    session that records only that checkpoint's, and --out onto any of their runs must be
    refused (exit 7)."""
    from .formats import remote

    store = remote.session()
    for f in [f for ckpt in ckpts for f in ckpt.input_files()] + list(extra):
        if is_url(f):
            store.note_input(f)
