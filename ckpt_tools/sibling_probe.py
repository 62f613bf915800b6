"""The other graphs of a checkpoint's prefix that can be known where its directory cannot be
listed (``http(s)://``), for :mod:`~ckpt_tools.meta_sibling`.

Over ``http(s)://`` no listing says which ``.meta`` files lie beside a checkpoint saved
without its own, and ``candidates()`` took that for "none": a swapping run served over http
exported its raw weights as the averages, exit 0, though ``model.ckpt-1.meta`` lay right
beside ``model.ckpt-3`` (review-27-attack-r95 F4). What can be known is probed instead: the
``.meta`` of each checkpoint the run's ``checkpoint`` state file lists, and the step-less
stem's ``<stem>.meta``. Where none of them records a save op of the checkpoint's keys, nothing
can tell whether an unlisted one (``keep_checkpoint_every_n_hours``, a resumed run's) would
doubt its names, and ``meta_sibling.doubting`` refuses (:class:`UnlistedSiblingsError`).
"""

from __future__ import annotations

import posixpath
import re

from .errors import CheckpointError
from .formats.v1 import shard_base
from .sibling_listing import UnreadSiblingsError, split

__all__ = ["UnlistedSiblingsError", "probed_candidates"]

_STEP = re.compile(r"^(.+)-(\d+)$")


class UnlistedSiblingsError(UnreadSiblingsError):
    """A URL checkpoint saved without its own ``.meta`` whose directory has no listing, and
    no probed graph of its prefix (:func:`probed_candidates`) records a save op of its keys:
    whether another one would doubt its names cannot be known."""


def probed_candidates(prefix: str, candidates_among) -> tuple[list[str], list[str]]:
    """The graphs of ``prefix``'s stem that exist beside it, among those that can be named
    without a listing: ``<name>.meta`` of each checkpoint the directory's ``checkpoint`` state
    file lists, and ``<stem>.meta`` for ``prefix`` ``<stem>-<N>`` (each kept only where
    ``candidates_among(name, names)`` reads it as a graph of this prefix).

    Returns:
        ``(found, probed)``: the URLs of those that exist, newest step first, and the names
        probed (for messages).

    Raises:
        RemoteAccessError: a probe failed (the network; over http(s) a 403 is the graph's
            absence, as a bucket without list permission answers for a missing object).
    """
    from .formats import remote
    from .formats.remote_urls import url_join
    from .state_file import STATE_FILE, read_state_file_at

    base = shard_base(prefix)
    directory, name = split(base)
    names = set()
    m = _STEP.match(name)
    if m:
        names.add(m.group(1) + ".meta")
    try:
        listed = read_state_file_at(url_join(directory, STATE_FILE))
    except CheckpointError:  # none, or it names nothing: only the stem's graph is probed
        listed = []
    for path in listed:
        names.add(posixpath.basename(path.rstrip("/")) + ".meta")
    wanted = candidates_among(name, names)
    store = remote.session()
    found = [url_join(directory, n) for n in wanted
             if store.probe_info(url_join(directory, n)) is not None]
    return found, wanted
