"""The inputs of ``ckpt average``: the files of one checkpoint given together are that checkpoint.

A shell glob such as ``run/model.ckpt-*`` gives each checkpoint's ``.data-*``, ``.index`` and
``.meta`` files (review-27-user-u29 F2). Each of those names the checkpoint, as it does for
every other command, so several distinct files of one checkpoint are taken as that checkpoint
once. The same checkpoint named twice in another way (its prefix and one of its files, a
directory and a file of its latest checkpoint, or one file twice) is refused (exit 6), naming
both paths as given: averaging would count it twice.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .average_order import identity
from .errors import EmaError
from .formats._io import canonical_location, is_url
from .formats.v1 import shard_base, shard_pattern
from .locate import DATA_RE, Location, locate


def _spelled(path: str) -> str:
    """``path`` with its directory's links resolved (a URL as given, less a trailing ``/``):
    two spellings of one file compare equal, two files of one prefix do not."""
    path = canonical_location(path)
    if is_url(path):
        return path.rstrip("/")
    head, tail = os.path.split(path)
    return os.path.join(os.path.realpath(head or "."), tail)


def is_file_of(path: str, location: Location) -> bool:
    """Returns True when ``path`` names one file of the checkpoint at ``location``: its
    ``.index``, a ``.data-*`` shard, its ``.meta``, a V1 checkpoint file or one shard of a
    sharded V1 checkpoint; False for its prefix, a directory or a state file leading to it."""
    given, prefix = _spelled(path), _spelled(location.prefix)
    if given in (prefix + ".index", shard_base(prefix) + ".meta"):
        return True
    data = DATA_RE.match(given)
    if data:
        return data.group(1) == prefix
    if location.format != "v1":
        return False
    if given == prefix:  # a V1 file is its own prefix; a shard pattern is no file
        return shard_pattern(prefix) is None
    return shard_pattern(given) == prefix


def one_per_checkpoint(named: Sequence[tuple[str, Location]]) -> tuple[list[int],
                                                                        list[list[str]]]:
    """Takes distinct files of one checkpoint (a shell glob's ``.data-*``, ``.index`` and
    ``.meta``) as that checkpoint once, and refuses a checkpoint named twice otherwise.

    Args:
        named: each input as given, with where it resolved to (:func:`~ckpt_tools.locate.locate`).

    Returns:
        The indices into ``named`` to keep, in the given order: of each group of files, the
        ``.index`` one (else the first), at the first one's place. Then each group of two or
        more paths taken as one checkpoint (as given), for a note.

    Raises:
        EmaError: (exit 6) a checkpoint named twice but as distinct files of it (its prefix,
            or a directory leading to it, and a file of it; one file twice): averaging would
            count it twice. Names both paths as given.
    """
    first: dict[str, int] = {}  # identity -> index of the first input naming it
    groups: dict[str, list[int]] = {}  # identity -> indices of the distinct files given
    files: dict[str, set[str]] = {}
    for i, (path, location) in enumerate(named):
        ident = identity(location.prefix)
        spelled = _spelled(path)
        if ident not in first:
            first[ident] = i
            groups[ident] = [i] if is_file_of(path, location) else []
            files[ident] = {spelled}
            continue
        if not groups[ident] or spelled in files[ident] or not is_file_of(path, location):
            earlier = named[first[ident]][0]
            both = f"{path} twice" if _spelled(earlier) == spelled else f"{earlier} and {path}"
            raise EmaError(
                f"{location.prefix}: given twice (as {both}); averaging would count it twice: "
                "give each checkpoint once: its prefix, or its files (.index, .data-*, .meta) "
                "each once")
        groups[ident].append(i)
        files[ident].add(spelled)
    chosen = {}
    for ident, group in groups.items():
        index = [i for i in group if named[i][0].endswith(".index")]
        chosen[first[ident]] = (index or group or [first[ident]])[0]
    merged = [[named[i][0] for i in group] for group in groups.values() if len(group) > 1]
    return [chosen[i] for i in sorted(first.values())], merged


def distinct_checkpoints(paths: Sequence[str | os.PathLike]) -> tuple[list[str],
                                                                     list[list[str]]]:
    """:func:`one_per_checkpoint` of ``paths``, each resolved by
    :func:`~ckpt_tools.locate.locate` (inside the caller's remote session, if any).

    Returns:
        The paths to average (each checkpoint once), and each group of paths taken as one
        checkpoint.

    Raises:
        CheckpointError: a path names no checkpoint (as :func:`~ckpt_tools.locate.locate`).
        EmaError: a checkpoint named twice, not as distinct files of it (exit 6).
    """
    given = [os.fspath(p) for p in paths]
    keep, merged = one_per_checkpoint([(p, locate(p)) for p in given])
    return [given[i] for i in keep], merged


def merged_note(given: int, kept: int, merged: list[list[str]]) -> str:
    """The note saying that ``given`` paths named ``kept`` checkpoints, with one example."""
    first = merged[0]
    shown = ", ".join([first[0]] + [os.path.basename(p) for p in first[1:]])
    return (f"note: {given} paths name {kept} checkpoints: the files of one checkpoint (e.g. "
            f"{shown}) are that checkpoint, averaged once")
