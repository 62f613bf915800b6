"""The record ``ckpt restore-ema`` leaves beside a TF1 checkpoint it wrote under a statement
that no file shows: ``<name>.restored.json`` (:func:`write_record`).

``--saver-def-wrote`` (:mod:`~ckpt_tools.saver_def_stated`) reads a checkpoint whose ``.meta``
builds Savers that write exactly its keys from different variables (a
``MonitoredTrainingSession``'s ``Scaffold`` Saver beside a swapping Saver) as the ``SaverDef``'s
Saver wrote it. restore-ema copies that ``.meta`` beside its output, whose keys then hold what
that Saver's would after a restore of the averages; so the output still builds both Savers and
every later command refused it again (exit 6) unless the statement was repeated. The record
states it for the output: the output is read as if ``--saver-def-wrote`` were given (the note
names the record), and nowhere else.

``--averages-only`` (keys named as averages, their variables not stored, read as averages)
gives an output whose variables hold those keys' values, and whose names then pair plainly:
exported with "EMA values" and no word of the statement, though a training run's
``Saver(ema.variables_to_restore())`` wrote its raw weights under those keys (review-26-attack-r94
F4). The record keeps the statement, so every command reading the output repeats its caveat.

Only the files the record names (the output's ``.index`` and ``.meta``), in its own directory,
whose size and SHA-256 are the recorded ones, are vouched for (as ``ckpt train``'s run record,
:mod:`~ckpt_tools.run_record`): a checkpoint saved again under that name (a new ``.index``) or
beside another ``.meta`` inherits nothing, and is read (or refused) as before. A user's own
statement comes first: ``--not-swapped`` or ``--no-meta`` leave the record unread.
"""

from __future__ import annotations

import os

from .wording import noun

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from .checkpoint import Checkpoint

#: The record's name: ``<output name>`` + this.
RECORD_SUFFIX = ".restored.json"
WRITER = "ckpt restore-ema"
#: The commands that write one: restore-ema, and average --ema --bake (its plain names hold
#: the averaged shadows beside the newest input's .meta, copied as restore-ema copies it).
WRITERS = (WRITER, "ckpt average")
_MAX_BYTES = 1 << 20  # a record names two files and some keys; a larger one is not ours


def record_name(name: str) -> str:
    """The record's file name for the output checkpoint ``name``."""
    return name + RECORD_SUFFIX


def recorded_statements(ckpt: Checkpoint, read=None) -> dict:
    """What restore-ema's record should state for an output written from ``ckpt``: the
    statements a reader of the output would need, and would otherwise lose.

    Args:
        read: the keys the output's variables were written from (a container answering
            ``in``); ``None``: every key the statement pairs. A key the command's
            ``--exclude`` left out is no key the statement read: ``--no-meta --averages-only
            --exclude model/c/ExponentialMovingAverage`` copies that key (raw ``c``) as it
            is, and the record said the user stated it holds an average
            (review-29-attack-r108, s29i "Left").

    Returns:
        `dict`: ``{"saver_def_wrote": True}`` where ``ckpt`` is read under
        ``--saver-def-wrote``; ``{"averages_only": {"keys": [...], "raw_if_trained":
        [...]}}`` where ``--averages-only`` read keys as averages (``raw_if_trained``: those
        the ``.meta``'s save op wrote from their variables outside an evaluation graph); empty
        where neither applies.
    """
    said: dict = {}
    if getattr(ckpt, "saver_def_wrote", False):
        said["saver_def_wrote"] = True
    if getattr(ckpt, "averages_only", False):
        from .raw_named import evaluation_graph, saved_from
        from .raw_shadows import stated_lone_averages
        from .save_op import written_sources

        lone = stated_lone_averages(ckpt)
        if read is not None:
            lone = {s: t for s, t in lone.items() if s in read}
        if lone:
            written = written_sources(ckpt) or {}
            trained = [] if any(evaluation_graph(ckpt, s) for s in lone) else \
                sorted(s for s, t in lone.items() if saved_from(written.get(s), t))
            said["averages_only"] = {"keys": sorted(lone), "raw_if_trained": trained}
    return said


def write_record(prefix: str, stated: dict, shown, writer: str = WRITER) -> str | None:
    """Writes ``<prefix>.restored.json`` stating ``stated`` (:func:`recorded_statements`) for
    the checkpoint ``prefix`` just written: its ``.index`` and (where written) ``.meta``, with
    their sizes and SHA-256; ``writer`` is the command that wrote it (:data:`WRITERS`).

    Returns:
        `str`: the record's path; ``None`` where ``stated`` is empty (nothing written).

    Raises:
        WriteError: it cannot be written.
    """
    if not stated:
        return None
    import json

    from .formats._write import os_errors
    from .run_record import file_digest

    name = os.path.basename(prefix)
    files = {os.path.basename(p): file_digest(p) for p in (prefix + ".index", prefix + ".meta")
             if os.path.isfile(p)}
    doc = {"written_by": writer, "version": 1, "output": name, "stated": stated,
           "note": f"{writer} wrote this checkpoint under these statements, which no "
                   "file shows; it vouches for the files named here only while their bytes "
                   "are these",
           "files": files}
    path = prefix + RECORD_SUFFIX
    with os_errors(shown(path), "writing"), open(path, "x", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    return path


def stated_record_said(records) -> str:
    """What the write-time line of ``restore-ema`` and ``average`` adds where it wrote the
    record(s) ``records`` (paths or file names): ``" (record: X.restored.json ...)"``, else
    ``""`` (review-28-user-u30 F2)."""
    names = [os.path.basename(r) for r in records if r.endswith(RECORD_SUFFIX)]
    if not names:
        return ""
    stem = names[0][:-len(RECORD_SUFFIX)]
    return (f" (record: {', '.join(names)}, which states for later reads the statement no file "
            f"shows; keep it with the checkpoint's files, as cp {stem}.* does)")


def _read(path: str) -> dict | None:
    from .run_record import read_json_object

    doc = read_json_object(path, _MAX_BYTES)
    if doc is None or doc.get("written_by") not in WRITERS \
            or doc.get("version") != 1 \
            or not isinstance(doc.get("stated"), dict) or not isinstance(doc.get("files"), dict):
        return None
    return doc


def vouching_record(prefix: str) -> tuple[str, dict, str] | None:
    """The record beside the local checkpoint ``prefix`` that vouches for it, and what it
    states: named ``<prefix>.restored.json``, naming the ``.index`` and every ``.meta`` of
    ``prefix`` there is, each with its recorded size and SHA-256.

    Returns:
        ``(record path, stated, the command that wrote it)`` or ``None`` (no record: one
        stat; not one of :data:`WRITERS`', or a file changed, added or gone).
    """
    if "://" in prefix:
        return None
    path = prefix + RECORD_SUFFIX
    if not os.path.isfile(path):  # the common case: one stat, nothing read
        return None
    doc = _read(path)
    if doc is None or doc.get("output") != os.path.basename(prefix):
        return None
    files = doc["files"]
    here = {os.path.basename(p) for p in (prefix + ".index", prefix + ".meta")
            if os.path.isfile(p)}
    if set(files) != here or os.path.basename(prefix) + ".index" not in here:
        return None
    from .run_record import file_digest

    try:
        if any(file_digest(os.path.join(os.path.dirname(prefix), n)) != said
               for n, said in files.items()):
            return None
    except OSError:
        return None
    return path, doc["stated"], doc["written_by"]


def has_record(prefix: str) -> bool:
    """Whether a record sits beside the checkpoint ``prefix`` (one stat;
    :func:`vouching_record` says whether it vouches for it)."""
    return "://" not in prefix and os.path.isfile(prefix + RECORD_SUFFIX)


def read_record(ckpt: Checkpoint, saver_def_wrote: bool, not_swapped: bool) -> None:
    """Reads the record vouching for the open TF1 checkpoint ``ckpt`` (:func:`vouching_record`)
    into ``ckpt.restored_record`` (its path and statements) and, where it states
    ``saver_def_wrote`` and the statement fits the file (own ``.meta`` read, no
    ``--not-swapped``: :func:`~ckpt_tools.saver_def_stated.refuse_unfit_saver_def`), sets
    ``ckpt.saver_def_wrote``. Call before anything reads the ``.meta``'s save ops."""
    ckpt.restored_record = None
    if ckpt.objects is not None or getattr(ckpt.reader, "keras", None) is not None:
        return
    found = vouching_record(ckpt.location.prefix)
    if found is None:
        found = marked_statement(ckpt)
    if found is None:
        return
    ckpt.restored_record = found
    if not found[1].get("saver_def_wrote") or saver_def_wrote or not_swapped \
            or ckpt.meta_stated or ckpt.meta_source != ckpt.location.meta_path:
        return
    from .errors import OptionError
    from .saver_def_stated import refuse_unfit_saver_def

    try:
        refuse_unfit_saver_def(ckpt.location.prefix, ckpt.meta_source, None,
                               ckpt.entries(), not_swapped=False)
    except OptionError:  # it decides nothing here: the file is read as if unrecorded
        return
    ckpt.saver_def_wrote = True


def marked_statement(ckpt: Checkpoint) -> tuple[str, dict, str] | None:
    """What the mark inside ``ckpt`` (:mod:`~ckpt_tools.tools_mark`) states of
    ``--averages-only``, where no record beside it vouches for it: renamed, copied without its
    ``.meta`` or record, written to ``s3://`` (review-28-attack-r105 F4, F5). Its caveat is
    repeated as the record's would be; it opens nothing (a ``--saver-def-wrote`` it records
    is left to the user to state again: without the record the file is refused).

    Returns:
        ``(where, {"averages_only": ...}, the command that wrote it)`` or ``None``.
    """
    from .tools_mark import RECORD_KEY, stated_of

    stated = stated_of(getattr(ckpt, "tools_mark", None))
    said = stated.get("averages_only")
    if not isinstance(said, dict):
        return None
    return (f"{ckpt.path}'s {RECORD_KEY} key", {"averages_only": said},
            str(stated.get("by", WRITER)))


def saver_def_record(ckpt: Checkpoint) -> tuple[str, str] | None:
    """The record's path and writer where it, not the caller, states ``saver_def_wrote`` for
    ``ckpt``."""
    found = getattr(ckpt, "restored_record", None)
    if not found or not found[1].get("saver_def_wrote") or not ckpt.saver_def_wrote:
        return None
    return found[0], found[2]


def stated_fields(ckpt: Checkpoint) -> dict:
    """The ``--json`` fields of the statements ``--saver-def-wrote`` and the record make for
    ``ckpt`` (review-28-user-u30 F4), as the other ``stated_*`` fields: a script parsing the
    document sees what the pairing rests on.

    Returns:
        `dict`: ``"stated_saver_def_wrote": true`` where the statement reads ``ckpt`` (given,
        or stated by its record: then ``"saver_def_wrote_record"``, the record's path);
        ``"stated_averages_only": {"keys": [...], "raw_if_trained": [...]}`` and
        ``"averages_only_record"`` where restore-ema's record of an ``--averages-only`` input
        vouches for ``ckpt`` (or its mark inside the bundle states it);
        ``"written_under"`` (``{"saver_def_wrote": true, "not_swapped": true, "no_meta":
        true}``) and
        ``"written_under_record"`` where its mark (:mod:`~ckpt_tools.tools_mark`) says the
        statements it was written under; ``{}`` where none applies.
    """
    found: dict = {}
    if getattr(ckpt, "saver_def_wrote", False):
        found["stated_saver_def_wrote"] = True
        by_record = saver_def_record(ckpt)
        if by_record:
            found["saver_def_wrote_record"] = by_record[0]
    record = getattr(ckpt, "restored_record", None)
    said = record[1].get("averages_only") if record else None
    if isinstance(said, dict):
        found["stated_averages_only"] = {
            "keys": [k for k in said.get("keys") or [] if isinstance(k, str)],
            "raw_if_trained": [k for k in said.get("raw_if_trained") or [] if isinstance(k, str)]}
        found["averages_only_record"] = record[0]
    from .tools_mark import RECORD_KEY, stated_of

    marked = {k: True for k, v in stated_of(getattr(ckpt, "tools_mark", None)).items()
              if k in ("saver_def_wrote", "not_swapped", "no_meta") and v}
    if marked:  # what the output was written under, repeated (review-28-attack-r105)
        found["written_under"] = marked
        found["written_under_record"] = f"{ckpt.path}'s {RECORD_KEY} key"
    return found


def averages_only_note(ckpt: Checkpoint) -> str:
    """The caveat every command reading restore-ema's output of an ``--averages-only`` input
    repeats (review-26-attack-r94 F4): ``"warning: ..."`` where the input's save op wrote the
    keys from their variables outside an evaluation graph, else ``"note: ..."``.

    Returns:
        `str`, or ``""`` where no record states it.
    """
    found = getattr(ckpt, "restored_record", None)
    said = found[1].get("averages_only") if found else None
    if not isinstance(said, dict):
        return ""
    keys = [k for k in said.get("keys") or [] if isinstance(k, str)]
    trained = said.get("raw_if_trained")
    e = f" (e.g. {keys[0]})" if keys else ""
    made = _carried_from(ckpt, found)
    # the command that wrote it (the record's, or the mark's writer), or, where a later
    # command carried the statement, the one that made it over its own output and the
    # carrier: the output of `ckpt average` was said written by restore-ema (s32f)
    wrote = (" and ".join(f"{b} wrote the variables of {' and '.join(ps)}"
                          for b, ps in made.items()) if made
             else f"{found[2]} wrote {ckpt.path}'s variables")
    carried = f", and {found[2]} carried that statement into {ckpt.path}" if made else ""
    head = (f"{wrote} from {noun(len(keys), 'key', 'keys')}{e} its input's "
            f"--averages-only stated hold averages{carried} (its record {found[0]} says so)")
    if trained:
        return (f"warning: {head}: that input's .meta's save op wrote them from their "
                "variables, so if a training run saved it they hold its raw weights, not "
                "averages")
    return (f"note: {head}: that statement, not the file, makes them averages; if the "
            "input's keys held raw weights, so do these variables")


def _carried_from(ckpt: Checkpoint, found: tuple) -> dict[str, list[str]]:
    """Who made the ``--averages-only`` statement the mark inside ``ckpt`` carries
    (:func:`~ckpt_tools.tools_mark.output_mark`'s ``"origins"``), where ``found``
    (:func:`marked_statement`) is that mark's: command -> the outputs it wrote under it.

    Returns:
        `dict` (``{}``: the statement was made by the command that wrote ``ckpt``, or a
        record beside it states it).
    """
    from .tools_mark import stated_of

    stated = stated_of(getattr(ckpt, "tools_mark", None))
    origins = stated.get("origins") if isinstance(stated.get("origins"), dict) else {}
    if found[1].get("averages_only") is not stated.get("averages_only"):
        return {}  # a record beside it (restore-ema's own) states it, not the mark
    made: dict[str, list[str]] = {}
    for b, p in origins.get("averages_only") or []:
        made.setdefault(b, []).append(p)
    return made
