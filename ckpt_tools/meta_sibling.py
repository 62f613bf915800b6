"""Doubt from the ``.meta`` files of other checkpoints of the same prefix, for a TF1
checkpoint saved without one of its own.

The usual TF1 loop writes the graph once: ``saver.save(sess, path, global_step=i,
write_meta_graph=(i == 1))``. ``model.ckpt-3`` then has no ``.meta``, and its keys alone
cannot tell a swapping Saver (``{v.op.name: ema.average(v), ema.average_name(v): v}``: each
key named as a variable holds its average) from a plain one; paired by the names, the raw
weights went out as the averages, exit 0, though ``model.ckpt-1.meta`` beside it records a
Saver that swapped (review-23-attack-r71 F2).

Nothing in a directory says which run wrote a ``.meta``: the ``checkpoint`` state file lists
an earlier run's checkpoints after a resume (``MonitoredTrainingSession`` calls
``saver.recover_last_checkpoints()``) and misses the run's own under
``keep_checkpoint_every_n_hours``, ``max_to_keep=None``, ``latest_filename=``, another path
spelling or a partial copy (review-24-attack-r78 F1-F4, F6, F8). So another checkpoint's
graph is never read as this one's (it would prove a pairing it may not be evidence of);
it may only ADD doubt. :func:`doubting` reads every ``<stem>-<N>.meta`` (and ``<stem>.meta``)
beside ``<stem>-<M>``, each with the bounds of a checkpoint's own ``.meta`` (junk is not
text-parsed whole: r74 F4); a file whose save op cannot be read, or that writes other keys,
or keys of other dtypes or shapes than its variables', is no Saver of this checkpoint and is
ignored. Where one records a save op of exactly this checkpoint's keys that reads a key from
another variable than the key's name (a swapping Saver; a training
``Saver(ema.variables_to_restore())``), the keys' names do not prove what they hold: the
pairing by names is refused (:func:`~ckpt_tools.swap_assumed.saver_assumptions`, exit 6)
until ``--not-swapped`` states it, or ``--raw --no-meta`` exports the keys as stored. Where
every such graph agrees with the names, nothing changes: the checkpoint is read as one
without a ``.meta``. A text-format ``.meta`` too large to parse
(:data:`~ckpt_tools.formats.text_bound.TEXT_META_MAX_LINE`) is refused rather than passed over: it
may be the graph that shows a swap (review-24-attack-r78 F5). How one ``.meta`` is read
against the checkpoint's keys: :mod:`~ckpt_tools.sibling_saves`.
"""

from __future__ import annotations

import os
import re
from collections import namedtuple
from collections.abc import Mapping

from .errors import (
    CorruptCheckpointError,
    UnprovenPairingError,
)
from .formats._io import is_url
from .formats.graph_def import keep
from .formats.remote_urls import url_join
from .formats.text_bound import TextMetaTooLargeError
from .formats.v1 import shard_base
from .sibling_listing import (
    MAX_URL_SIBLINGS,
    UnreadSiblingsError,
    directory_files,
    file_stamp_of,
    split,
)
from .sibling_probe import UnlistedSiblingsError
from .sibling_roles import against_names
from .sibling_saves import saved_graphs


class CarriedUnknownError(UnreadSiblingsError):
    """A checkpoint ``ckpt average`` wrote from inputs whose other graphs could not be known,
    as its record beside it says (:mod:`~ckpt_tools.average_unknown`)."""


_STEP = re.compile(r"^(.+)-(\d+)$")
_DIGITS = re.compile(r"\d+")


def candidates(prefix: str) -> list[str]:
    """The ``.meta`` files of the other checkpoints of ``prefix``'s stem in its directory:
    ``<stem>-<N>.meta`` for ``prefix`` ``<stem>-<M>`` (every other name of the stem, whatever the
    state file lists: it cannot tell which run wrote them, review-24-attack-r78), and
    ``<stem>.meta``; for a ``prefix`` without a step, ``<prefix>-<N>.meta``; and those of the
    stems differing only in their digits (``model_epoch_4.ckpt.meta`` beside
    ``model_epoch_3.ckpt``); newest step first. A URL's directory is read from the remote
    session's listing (review-26-attack-r90 F1).

    Returns:
        `list[str]`: the paths; ``[]`` for a directory that cannot be listed (a URL scheme
        without listings: :func:`listed_candidates` tells that apart).

    Raises:
        RemoteAccessError: a URL directory's listing failed.
    """
    return listed_candidates(prefix) or []


def listed_candidates(prefix: str) -> list[str] | None:
    """:func:`candidates`, or ``None`` where ``prefix`` is a URL whose scheme has no listing
    (``http(s)://``): whether other graphs of its prefix lie beside it cannot be known.

    Raises:
        RemoteAccessError: a URL directory's listing failed.
    """
    listing = _listing(prefix)
    return None if listing is None else listing[0]


def _listing(prefix: str) -> tuple[list[str], str | None] | None:
    """:func:`listed_candidates`, and the path of the record ``ckpt average`` writes beside
    an output of this name (``<name>.carried.json``) where one lies there, else ``None``."""
    base = shard_base(prefix)
    directory, name = split(base)
    names = directory_files(directory)
    if names is None:
        return None
    join = url_join if is_url(base) else os.path.join
    record = name + ".carried.json"  # average_carried.record_name (not imported: list's path)
    return ([join(directory, other) for other in candidates_among(name, names)],
            join(directory, record) if record in names else None)


def candidates_among(name: str, names) -> list[str]:
    """:func:`candidates` of the checkpoint ``name`` among a directory's file ``names``.

    Returns:
        `list[str]`: base names, newest step first.
    """
    m = _STEP.match(name)
    # a checkpoint saved without a step (save(sess, "model.ckpt")) beside model.ckpt-N.meta
    # of the same run is its stem's too (review-25-attack-r83 F1)
    # a name ending in -<digits> may be a step-less one too (save(sess, "dir/resnet-50")
    # beside resnet-50-1.meta): both stems are read, which can only add doubt
    # (review-25-attack-r87 F2)
    stems = {m.group(1), name} if m else {name}
    # per-epoch names (model_epoch_3.ckpt beside model_epoch_4.ckpt.meta): stems differing
    # only in their digits are read too, which can only add doubt
    skeletons = {_DIGITS.sub("#", s) for s in stems}
    found = []
    for other in names:
        stem = other[:-5]
        if not other.endswith(".meta") or stem == name:
            continue
        hit = _STEP.match(stem)
        if _DIGITS.sub("#", stem) in skeletons or hit and _DIGITS.sub("#", hit.group(1)) \
                in skeletons:
            found.append((tuple(int(d) for d in _DIGITS.findall(stem)), other))
    found.sort(reverse=True)
    return [other for _, other in found]


Sibling = namedtuple("Sibling", "path saves meta")
Sibling.__doc__ = """One same-prefix ``.meta`` (:func:`candidates`) as read for a checkpoint saved
without its own: its save ops of exactly the checkpoint's keys, each with the nodes of the
first graph they fit (``((sources, nodes), ...)``), and its collections (a ``MetaGraph``;
``None`` where they cannot be read)."""

# The last readings of a prefix's siblings, by their files' stamps and the keys asked of them:
# a command asks doubting, layout_sibling and stated_graph, and may open the checkpoint again
# (reopened), each of one reading (review-25-attack-r83 F5, r81 F4)
_READ: dict[tuple, tuple[Sibling, ...]] = {}


def siblings(prefix: str, entries: Mapping) -> tuple[Sibling, ...]:
    """Each same-prefix ``.meta`` (:func:`candidates`, newest step first) recording a save
    op of exactly the keys of the checkpoint at ``prefix``, each of its variable's dtype and
    shape: read once while the files and keys are the same (the last two readings are kept).

    Returns:
        `tuple[Sibling, ...]`: ``()`` where none records these keys or none can be read.

    Raises:
        TextMetaTooLargeError: a candidate is a text-format ``.meta`` too large to parse.
        UnreadSiblingsError: a URL checkpoint with more than ``MAX_URL_SIBLINGS`` of them;
            :class:`~ckpt_tools.sibling_probe.UnlistedSiblingsError` where its directory has
            no listing and no probed graph records its keys.
    """
    return _listed_siblings(prefix, entries)[0]


def _listed_siblings(prefix: str, entries: Mapping) -> tuple[tuple[Sibling, ...], bool]:
    """:func:`siblings`, and whether they were probed for want of a listing (http(s)):
    the directory is listed once for both."""
    listing = _listing(prefix)
    unlisted = listing is None  # http(s): what can be known is probed (review-27-attack-r95 F4)
    if unlisted:
        from .sibling_probe import probed_candidates

        paths, probed = probed_candidates(prefix, candidates_among)
    else:
        paths, record = listing
        if record is not None:  # an average of inputs whose other graphs were unknown
            from .average_unknown import read_unknown

            said = read_unknown(record)
            if said:
                exc = CarriedUnknownError(f"{os.path.basename(record)} records that ckpt "
                                          f"average wrote it from {said}")
                exc.why = _unknown_why(said)
                raise exc
    read = _siblings(prefix, paths, entries)
    if unlisted and not read:
        raise UnlistedSiblingsError(", ".join(probed) or "none")
    return read, unlisted


def _unknown_why(inputs: str) -> str:
    """Why the other graphs of an average's recorded ``inputs`` (its record's text) could not
    be known, true for each kind of input: an http(s) directory has no listing; a listed
    one (s3://) held more graphs than are read over a URL (s28c "Left")."""
    urls = [u.strip() for u in inputs.split(",") if "://" in u]
    http = [u for u in urls if u.lower().startswith(("http://", "https://"))]
    bound = (f"more graphs of their prefix beside them than the {MAX_URL_SIBLINGS} read over "
             "a URL")
    if http and len(http) == len(urls):
        return "no listing over http(s)"
    if not http and urls:
        return bound
    return f"no listing over http(s), or {bound}"


def _siblings(prefix: str, paths: list[str], entries: Mapping) -> tuple[Sibling, ...]:
    """:func:`siblings` among the graphs ``paths``."""
    if not paths:
        return ()
    if is_url(prefix) and len(paths) > MAX_URL_SIBLINGS:
        raise UnreadSiblingsError(
            f"{len(paths)} graphs of other checkpoints of this prefix lie beside it "
            f"({os.path.basename(paths[0])}, ...), more than the {MAX_URL_SIBLINGS} read over "
            "a URL (each is fetched whole)")
    stamps = tuple(file_stamp_of(p) for p in paths)
    key = None if None in stamps else (
        stamps, frozenset((k, e.dtype, tuple(e.shape)) for k, e in entries.items()))
    if key in _READ:
        return _READ[key]
    found = []
    for path in paths:
        saves, meta = saved_graphs(path, entries)
        if saves:
            found.append(Sibling(path, tuple(saves), meta))
    keep(_READ, key, tuple(found))  # (a file that cannot be stated: not kept)
    return tuple(found)


def doubting(prefix: str, entries: Mapping) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """The same-prefix ``.meta`` files (:func:`candidates`) recording a save op of exactly the
    keys of the checkpoint at ``prefix`` (which has no ``.meta`` of its own) that reads a key
    from another variable than its name's: evidence that the names may not say what the keys
    hold, never proof of what they do.

    Args:
        prefix: the checkpoint prefix (V2), file or shard pattern (V1).
        entries: its stored keys -> :class:`~ckpt_tools.formats.entry.TensorEntry`.

    Returns:
        ``((path, key, sources), ...)``: each such file, newest step first, with the first
        key its save op reads otherwise and the variables it reads it from; ``()`` where none
        does (none records these keys, or all agree with the names).

    Raises:
        CorruptCheckpointError: a candidate is a text-format ``.meta`` too large to parse
            (:class:`~ckpt_tools.formats.text_bound.TextMetaTooLargeError`), naming ``--no-meta``.
        UnprovenPairingError: (exit 6) its ``ckpt average`` record names a carried graph
            no longer beside it (:mod:`~ckpt_tools.carried_missing`); a URL checkpoint with
            more candidates than
            :data:`~ckpt_tools.sibling_listing.MAX_URL_SIBLINGS`, or whose directory has no
            listing where no probed graph records its keys
            (:mod:`~ckpt_tools.sibling_probe`), or an average of such checkpoints
            (:mod:`~ckpt_tools.average_unknown`), naming ``--no-meta``.
    """
    from .carried_missing import refuse_missing_copies

    refuse_missing_copies(prefix)  # average's record names a graph gone from beside it (u30 F1)
    try:
        read, unlisted = _listed_siblings(prefix, entries)
    except TextMetaTooLargeError as exc:  # a swapping run's graph as text passed over
        # paired its raw weights by names as the averages, exit 0 (review-24-attack-r78 F5)
        raise CorruptCheckpointError(
            f"{prefix} has no .meta of its own, and the same-prefix {exc}: unread, its "
            "save op may be the one that shows what the keys hold (a swapping Saver's), "
            "so it is not passed over: write it binary to have it read, or pass --no-meta "
            "(Python: use_meta=False) to pair by key names, which a swapping Saver's keys "
            "defeat") from None
    except CarriedUnknownError as exc:  # an average of such inputs (s28c)
        raise UnprovenPairingError(
            f"{prefix} has no .meta of its own, and {exc}, checkpoints saved without theirs "
            "whose other graphs of their prefix could not be known "
            f"({getattr(exc, 'why', 'no listing over http(s)')}): "
            "whether one shows that the keys' names do not say what they hold (a swapping "
            "Saver's run) cannot be known, so the pairing by names is refused, as theirs is. "
            "Pass --no-meta (Python: use_meta=False), which states no graph applies and pairs "
            "by the keys' names (a swapping Saver's keys defeat that)",
            option="--no-meta") from None
    except UnlistedSiblingsError as exc:  # http(s): nothing probed tells (r95 F4)
        raise UnprovenPairingError(
            f"{prefix} has no .meta of its own, and its directory cannot be listed over this "
            f"URL scheme: no graph of its prefix that can be probed without a listing (those "
            f"of the checkpoints its 'checkpoint' state file lists and its stem's: probed "
            f"{exc}) records a save op of its keys, so whether another graph beside it shows "
            "that its keys' names do not say what they hold (a swapping Saver's run: "
            "model.ckpt-1.meta beside model.ckpt-3) cannot be known: refused rather than "
            "paired by names. Copy the checkpoint with its directory locally (or to s3://) to "
            "have its graphs read, or pass --no-meta (Python: use_meta=False), which states "
            "no graph applies and pairs by the keys' names (a swapping Saver's keys defeat "
            "that)", option="--no-meta") from None
    except UnreadSiblingsError as exc:  # bounded over a URL, never cut short: an unread
        # file may be the swapping graph (review-26-attack-r90 F1)
        raise UnprovenPairingError(
            f"{prefix} has no .meta of its own, and {exc}: unread, such a graph may record a "
            "save op that shows its keys' names do not say what they hold (a swapping Saver's), so "
            "the pairing by names is refused: copy the checkpoint with those files locally, "
            "or pass --no-meta (Python: use_meta=False) to pair by key names, which a "
            "swapping Saver's keys defeat", option="--no-meta") from None
    found = []
    for sibling in read:
        for sources, nodes in sibling.saves:
            against = against_names(sources, nodes)
            if against is not None:
                found.append((sibling.path, against[0], tuple(against[1])))
                break
    if not found and read and unlisted:
        # http(s): the probed graphs agree with the names, but a graph no probe can name
        # (a swapping run's model.ckpt-1.meta its state file no longer lists, beside a plain
        # model.ckpt.meta) may not: agreement proves nothing (review-27-attack-r100 F2)
        raise UnprovenPairingError(
            f"{prefix} has no .meta of its own, and its directory cannot be listed over this "
            f"URL scheme: the graphs of its prefix that can be probed without a listing "
            f"({', '.join(os.path.basename(s.path) for s in read)}) agree with the keys' "
            "names, but another graph beside it (a swapping Saver's run: model.ckpt-1.meta "
            "beside model.ckpt-3) cannot be named, so agreement proves nothing: refused "
            "rather than paired by names. Copy the checkpoint with its directory locally (or "
            "to s3://) to have its graphs read, or pass --no-meta (Python: use_meta=False), "
            "which states no graph applies and pairs by the keys' names (a swapping Saver's "
            "keys defeat that)", option="--no-meta")
    return tuple(found)


def doubt_note(ckpt) -> str | None:
    """What a command says of a checkpoint saved without its own ``.meta`` beside other
    checkpoints' graphs whose save op reads its keys otherwise (``Checkpoint.meta_doubt``),
    naming them (``"model.ckpt-1.meta records ..."``: review-24-attack-r78 F7); ``None``
    otherwise."""
    doubt = getattr(ckpt, "meta_doubt", ())
    if not doubt:
        return None
    _, key, sources = doubt[0]
    several = len(doubt) > 1
    kind = "graphs of other checkpoints" if several else "graph of another checkpoint"
    return (f"{doubt_files(doubt)}, the {kind} of this prefix "
            f"(maybe another run's), {'record' if several else 'records'} a save op of exactly "
            f"these keys that wrote {key} from {', '.join(sources)}; this checkpoint has no "
            ".meta of its own, so its keys' names do not prove what they hold"
            + ("; --keys-are-raw is stated, so that save op is read for which keys hold the "
               "raw weights" if getattr(ckpt, "meta_stated", None) else ""))


def doubt_files(doubt) -> str:
    """The file names of ``Checkpoint.meta_doubt``'s entries, joined (``"model.ckpt-1.meta
    and model.ckpt-2.meta"``; the first four, then how many more)."""
    names = [os.path.basename(p) for p, _, _ in doubt]
    if len(names) > 4:
        names = [*names[:4], f"{len(names) - 4} more"]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _vtr_layout(sources: dict[str, list[str]]) -> bool:
    """Whether ``sources`` is a ``Saver(ema.variables_to_restore())``'s layout: every key
    saved from the one variable of its own name, or from the one variable its name sits
    under (``w/ExponentialMovingAverage`` from ``w``, a part's ``w/part_0/...`` from
    ``w/part_0``), at least one so; a swapping or renaming Saver's is not."""
    under = [k for k, of in sources.items() if of != [k]]
    return bool(under) and all(len(sources[k]) == 1 and k.startswith(sources[k][0] + "/")
                               for k in under)


def layout_sibling(prefix: str, entries: Mapping) -> str | None:
    """The same-prefix ``.meta`` (:func:`candidates`) whose save op shows the layout
    ``export --raw --keys-are-raw`` reads for a checkpoint saved without its own: a
    ``Saver(ema.variables_to_restore())`` of exactly its keys (:func:`_vtr_layout`), every
    other same-prefix graph recording a save op of these keys recording the same one
    (review-25-attack-r81 F9). It proves nothing of what the keys hold, nor that its run
    wrote them: only the caller's ``keys_are_raw`` says that; it shows which keys the
    statement speaks of (a second object's averages under names read as weights are then
    what its update ops show, as with the checkpoint's own ``.meta``).

    Returns:
        `str`: the newest such file; ``None`` where none records these keys, two record
        different save ops of them, or the one recorded is no such layout.
    """
    sibling = _layout_sibling(siblings(prefix, entries))
    return None if sibling is None else sibling.path


def _layout_sibling(read: tuple[Sibling, ...]) -> Sibling | None:
    """:func:`layout_sibling`'s file among ``read`` (:func:`siblings`), or ``None``."""
    found = [(sibling, s) for sibling in read for s, _ in sibling.saves]
    if not found or any(s != found[0][1] for _, s in found) or not _vtr_layout(found[0][1]):
        return None
    return found[0][0]


def stated_graph(prefix: str, entries: Mapping):
    """The graph of :func:`layout_sibling`'s file, read for a checkpoint saved without its
    own ``.meta`` whose caller states ``keys_are_raw``.

    Returns:
        ``(MetaGraph, path)``, or ``None`` where there is no such file or its collections
        cannot be read (the statement then decides nothing: refused as without a ``.meta``).
    """
    sibling = _layout_sibling(siblings(prefix, entries))
    if sibling is None or sibling.meta is None:
        return None
    return sibling.meta, sibling.path


def stated_offer(ckpt) -> str:
    """What a refusal of a checkpoint saved without its own ``.meta`` adds where a
    same-prefix graph shows a ``Saver(ema.variables_to_restore())`` of exactly its keys
    (:func:`layout_sibling`), in place of "keep the training .meta": that file, and that
    ``--raw --keys-are-raw`` then exports them as the raw weights, the statement deciding;
    ``""`` otherwise (or with ``--no-meta``)."""
    if not getattr(ckpt, "meta_doubt", ()) or ckpt.meta is not None:
        return ""
    path = ckpt.memo("layout_sibling", lambda: layout_sibling(
        ckpt.location.prefix, ckpt.entries()))
    if path is None:
        return ""
    return (f"{os.path.basename(path)}, the graph of another checkpoint of this prefix "
            "(maybe another run's), records a Saver(ema.variables_to_restore()) of exactly "
            "these keys, which proves nothing of what they hold: if a training graph saved "
            "them (its raw weights), pass --raw --keys-are-raw (Python: open_checkpoint(path, "
            "keys_are_raw=True), export_weights(ema=False)), which that graph's save op then "
            "reads")
