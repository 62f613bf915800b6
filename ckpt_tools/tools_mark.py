"""The record our writers put INSIDE a checkpoint they wrote under a doubt or a statement:
the key ``_CKPT_TOOLS_RECORD``, a scalar ``DT_STRING`` tensor holding a small JSON document
(as TensorFlow's own ``_CHECKPOINTABLE_OBJECT_GRAPH`` key holds the object graph).

Sidecar records (``<name>.carried.json``, ``<name>.restored.json``) are lost whenever the
checkpoint is renamed, symlinked, copied as ``.index`` + ``.data`` only, or written to
``s3://``; the output then read as proven averages, its raw weights exported as the averages,
exit 0 (review-28-attack-r105 F1-F5). A key in the bundle itself travels with every copy. A
TF1 ``Saver`` restores only the keys it names, so TensorFlow ignores it;
:func:`take_mark` hides it from the variables (every command) and keeps what it says on the
open checkpoint (``Checkpoint.tools_mark``).

What it says (:func:`mark_doc`):

* ``names_doubted``: ``ckpt average`` wrote the keys under their own names from inputs whose
  names a swapping Saver's graph of their prefix doubts (:mod:`~ckpt_tools.average_doubt`).
  Where no graph beside the checkpoint doubts it any more (renamed, copied without the graph,
  ``s3://``), its pairing by names is refused (exit 6,
  :func:`~ckpt_tools.doubt_refusal.names_doubted_refusal`); where
  the carried graph is still beside it, that graph doubts it as before. Its
  ``graph_proved`` lists what the inputs' graph proved beyond that, which no statement lifts
  (:mod:`~ckpt_tools.own_graph_doubt`); carried into every output written from it.
* ``weights``: where the writer put the averages into the keys named as the variables
  (:mod:`~ckpt_tools.weights_mark`, review-33-attack-r128 F1); a mark without it (every
  mark written before) says nothing of them: read as before.
* ``stated``: the statements the output was written under (``--averages-only``,
  ``--saver-def-wrote``, ``--not-swapped``, ``--no-meta`` over a graph or mark that decides
  or doubts its input's names: :mod:`~ckpt_tools.no_meta_mark`), repeated by every read of it
  (:func:`stated_notes`, and :mod:`~ckpt_tools.restored_record`'s caveat).

Outputs written from a marked input carry its mark (:func:`merged`): a statement or doubt
carried is said ``by`` the carrying writer, with its ``origins`` (the command that made it and
the output it wrote), which the note or refusal names (review-30-attack-r112 F1; the doubt:
s32f). A doubt the writer made itself besides the one it carried is ``"own"``.
"""

from __future__ import annotations

from .errors import CorruptCheckpointError
from .own_graph_doubt import GRAPH_OF_INPUT, PROVED, PROVED_KEY, proved_of

__all__ = ["RECORD_KEY", "add_mark", "graph_written", "mark_doc", "merged", "names_doubted",
           "empty_mark", "stated_notes", "stated_of", "take_mark"]

#: The key our writers add to a checkpoint they mark.
RECORD_KEY = "_CKPT_TOOLS_RECORD"
_KIND = "ckpt_tools record"
_MAX_BYTES = 1 << 20


def mark_doc(doubted: dict | None = None, stated: dict | None = None,
             by: str = "ckpt average") -> dict | None:
    """A mark saying ``doubted`` (``{"graphs": [...], "inputs": [...]}``: the doubting
    graphs' names and the inputs they doubt) and/or ``stated`` (statement -> its detail, e.g.
    ``{"averages_only": {"keys": [...], "raw_if_trained": [...]}}``), written by ``by``.

    Returns:
        `dict`, or ``None`` where there is nothing to say.
    """
    if not doubted and not stated:
        return None
    doc: dict = {"kind": _KIND, "version": 1}
    if doubted:
        doc["names_doubted"] = {**doubted, "by": by}
    if stated:
        doc["stated"] = {**stated, "by": by}
    return doc


def merged(*docs: dict | None) -> dict | None:
    """One mark saying all that ``docs`` (marks of the inputs, the output's own) say: the
    doubted graphs and inputs joined, the statements joined (the first's detail kept). The
    ``graph_sha256`` of the graph an output was written with is kept where every joined
    ``names_doubted`` records the same one (the writer then says whether it wrote that graph
    beside its output: :func:`graph_written`); where they differ, or one records none, none
    is kept (its reads through any own graph are refused: fail-closed).

    Returns:
        `dict`, or ``None`` where none says anything.
    """
    out: dict | None = None
    shas: set = set()
    for doc in docs:
        if not doc:
            continue
        if out is None:
            out = {"kind": _KIND, "version": 1}
        d = doc.get("names_doubted")
        if isinstance(d, dict):
            _join_doubt(out.setdefault("names_doubted", {"by": d.get("by", "ckpt average")}), d)
            shas.add(d.get("graph_sha256"))
        s = doc.get("stated")
        if isinstance(s, dict):
            _join_stated(out.setdefault("stated", {}), s)
    d = names_doubted(out)
    if d is not None and not d.get("origins"):
        d.pop("own", None)  # all of it its writer's own: said without origins
    if out is not None and len(shas) == 1 and isinstance(next(iter(shas)), str):
        out["names_doubted"]["graph_sha256"] = next(iter(shas))  # (s29h "Seen")
    return out


def _join_doubt(have: dict, d: dict) -> None:
    """Adds the ``names_doubted`` ``d`` to ``have``: its graphs and inputs, and its
    ``"origins"`` (the commands that made a carried doubt over their outputs) where it was
    carried, else ``"own"`` (the writer made it: s32f)."""
    for field in ("graphs", "inputs"):
        joined = list(have.get(field) or [])
        joined += [x for x in d.get(field) or [] if x not in joined]
        have[field] = joined
    origins = _pairs(d.get("origins"))
    if origins:
        joined = have.setdefault("origins", [])
        joined += [o for o in origins if o not in joined]
    if not origins or d.get("own"):
        have["own"] = True
    # what no statement lifts is carried into every output written from it: an average of
    # a bake's copies kept its doubt but lost what its input's graph proved (a bake over
    # another object's keys), and --not-swapped then read slow's averages as fast's
    # (review-32-attack-r119 F1)
    _set_proved(have, proved_of(have) | proved_of(d))


def _set_proved(d: dict, proved) -> None:
    """Records ``proved`` (values of :data:`~ckpt_tools.own_graph_doubt.PROVED`) as what the
    ``names_doubted`` part ``d`` says its inputs' graph proved: one field, a sorted list,
    none where empty; session 32's flags dropped."""
    for flag in (PROVED_KEY, *PROVED):
        d.pop(flag, None)
    if proved:
        d[PROVED_KEY] = sorted(proved)


def _pairs(x) -> list[list[str]]:
    """``x`` (a mark's ``origins`` list) as ``[command, output]`` pairs (``[]``: none)."""
    return [list(o) for o in x] if isinstance(x, list) else []


def _join_stated(have: dict, s: dict) -> None:
    """Adds the statements of ``s`` (a mark's ``stated``) to ``have``: the first detail and
    ``"by"`` kept; each statement's ``"origins"`` (the commands that made it over the outputs
    it was carried from) kept for a statement first said with them, joined where every
    statement of it was carried (review-30-attack-r112 F1)."""
    origins = s.get("origins") if isinstance(s.get("origins"), dict) else {}
    for k, v in s.items():
        if k == "origins":
            continue
        first = k not in have
        if first:
            have[k] = v
        if k == "by" or not origins.get(k):
            continue
        if first:
            have.setdefault("origins", {})[k] = [list(o) for o in origins[k]]
        elif k in have.get("origins", {}):
            joined = have["origins"][k]
            joined += [list(o) for o in origins[k] if list(o) not in joined]


def graph_written(doc: dict | None, sha256: str | None, carried: bool = False,
                  proved=frozenset()) -> dict | None:
    """``doc`` (a mark about to be written) whose ``names_doubted`` records ``sha256``, the
    SHA-256 of the graph written beside the output as its own ``.meta``, or no
    ``graph_sha256`` where none was (``sha256`` ``None``): a graph recorded for an output
    must be the one it was written with, never one only its input had. Its
    ``"graph_written"`` says whether the writer wrote any doubting graph beside the output
    (that one, or ``carried``: copies of other checkpoints' graphs), so that a refusal never
    says one was lost by a copy where none was ever written (s32f). ``proved``: what the
    writer's input's graph proved (:func:`~ckpt_tools.own_graph_doubt.bake_proved`), joined
    with what the mark already says. Where that holds
    :data:`~ckpt_tools.own_graph_doubt.GRAPH_OF_INPUT` the graph written beside a bake's
    output no longer says what its keys hold (review-32-attack-r117 F1-F3): no digest is
    recorded (:func:`~ckpt_tools.own_graph_mark.refuse_foreign_graph`).

    Returns:
        ``doc``, changed in place.
    """
    d = names_doubted(doc)
    if d is not None:
        # an input's own (merged) finding is kept: its keys were baked over before (r119
        # F1); a bake that copies no graph (--add-scope) records it too (r119 F3)
        proved = proved_of(d) | set(proved)
        _set_proved(d, proved)
        if sha256 and GRAPH_OF_INPUT not in proved:
            d["graph_sha256"] = sha256
        else:
            d.pop("graph_sha256", None)
        d["graph_written"] = bool(sha256) or carried
    return doc


def add_mark(writer, doc: dict | None) -> None:
    """Adds ``doc`` (:func:`mark_doc`, :func:`merged`) to the bundle ``writer`` as
    :data:`RECORD_KEY`; nothing where ``doc`` is ``None``."""
    if not doc:
        return
    import json

    from .formats.dtypes import STRING
    from .formats.strings import encode_strings

    # a scalar DT_STRING, encoded without NumPy: restore-ema copies stored bytes and marks
    # every output (its plain names hold the averages), never importing it
    data, crc = encode_strings([json.dumps(doc, sort_keys=True).encode("utf-8")])
    writer.add_bytes(RECORD_KEY, STRING, (), data, crc)


def take_mark(reader, path: str) -> dict | None:
    """Removes :data:`RECORD_KEY` from the open ``reader``'s entries (no variable, no key
    any command lists or copies) and returns what it says.

    Returns:
        `dict`, or ``None`` where the checkpoint holds no such key.

    Raises:
        CorruptCheckpointError: it is no scalar string holding our JSON document (a mark
            unread would drop its doubt: refused rather than passed over).
    """
    entries = reader.entries
    entry = entries.get(RECORD_KEY)
    if entry is None:
        return None
    from .formats.dtypes import STRING

    if entry.dtype != STRING or entry.num_elements != 1 or entry.nbytes > _MAX_BYTES:
        raise CorruptCheckpointError(f"{RECORD_KEY} is not a small scalar string", path=path)
    import json

    raw = reader.read(RECORD_KEY)
    del entries[RECORD_KEY]
    try:
        doc = json.loads(bytes(raw.reshape(-1)[0]))
    except (ValueError, UnicodeDecodeError, RecursionError):  # (deep nesting: r107 F5)
        doc = None
    if not isinstance(doc, dict) or doc.get("kind") != _KIND:
        raise CorruptCheckpointError(
            f"{RECORD_KEY} holds no record ckpt_tools wrote: what it says of the keys cannot "
            "be read, so the checkpoint is not read without it", path=path)
    if not _well_formed(doc):  # a part of another type would be passed over or crash (F5)
        raise CorruptCheckpointError(
            f"{RECORD_KEY} holds a record whose parts are not of the types ckpt_tools writes: "
            "what it says of the keys cannot be read, so the checkpoint is not read without "
            "it", path=path)
    return doc


def _strings(x) -> bool:
    return isinstance(x, list) and all(isinstance(i, str) for i in x)


def _well_formed(doc: dict) -> bool:
    """Whether every part of the mark ``doc`` has the type our writers give it
    (:func:`mark_doc`, :func:`merged`, the SHA-256 of F1/F2), so that no reader skips or
    trips over a part (review-29-attack-r107 F5)."""
    d = doc.get("names_doubted")
    if d is not None:
        if not isinstance(d, dict) or not isinstance(d.get("by", ""), str) \
                or not isinstance(d.get("graph_sha256", ""), str) \
                or not isinstance(d.get("own", True), bool) \
                or not isinstance(d.get("graph_written", True), bool) \
                or not _strings(d.get(PROVED_KEY, [])) \
                or not set(d.get(PROVED_KEY, [])) <= set(PROVED) \
                or not all(isinstance(d.get(f, True), bool) for f in PROVED) \
                or not all(_strings(d.get(f, [])) for f in ("graphs", "inputs")) \
                or not (isinstance(d.get("origins", []), list) and all(
                    _strings(x) and len(x) == 2 for x in d.get("origins", []))):
            return False
    w = doc.get("weights")
    if w is not None and not (isinstance(w, dict) and w.get("averages") is True
                              and isinstance(w.get("by", ""), str)
                              and isinstance(w.get("ema_name", ""), str)
                              and _strings(w.get("raw", []))):
        return False
    s = doc.get("stated")
    if s is None:
        return True
    if not isinstance(s, dict) or not isinstance(s.get("by", ""), str):
        return False
    o = s.get("origins")
    if o is not None and not (isinstance(o, dict) and all(
            isinstance(v, list) and all(_strings(x) and len(x) == 2 for x in v)
            for v in o.values())):
        return False
    a = s.get("averages_only")
    if a is not None and not (isinstance(a, dict) and all(_strings(v) for v in a.values())):
        return False
    return all(isinstance(s.get(k, True), bool) for k in _STATED)


def names_doubted(doc: dict | None) -> dict | None:
    """The mark's ``names_doubted`` part, or ``None``."""
    d = (doc or {}).get("names_doubted")
    return d if isinstance(d, dict) else None


def stated_of(doc: dict | None) -> dict:
    """The mark's ``stated`` part (statement -> detail, and ``"by"``), or ``{}``."""
    s = (doc or {}).get("stated")
    return s if isinstance(s, dict) else {}


_STATED = {
    "saver_def_wrote": "--saver-def-wrote (the .meta's SaverDef Saver wrote its input)",
    "not_swapped": "--not-swapped (its input was not saved swapped: a Saver of each variable "
                   "under its own name wrote it, no SwapEMAWeights or swap_weights() had put "
                   "the averages in the weights)",
    "no_meta": "--no-meta (a graph that decides or doubts what its input's keys' names hold "
               "was not read: the keys named as averages were taken as the averages)",
}


def stated_notes(path: str, doc: dict | None) -> list[str]:
    """The notes every read of the checkpoint ``path`` repeats for the statements its mark
    records besides ``--averages-only`` (whose caveat
    :func:`~ckpt_tools.restored_record.averages_only_note` repeats): what the user stated
    when it was written, which no file shows.

    Returns:
        `list[str]`: ``"note: ..."`` lines (``[]``: none stated).
    """
    stated = stated_of(doc)
    by = stated.get("by", "ckpt_tools")
    origins = stated.get("origins") if isinstance(stated.get("origins"), dict) else {}
    own = [v for k, v in _STATED.items() if stated.get(k) and not origins.get(k)]
    made: dict[tuple, list[str]] = {}  # who made them, over which outputs -> statements
    for k, v in _STATED.items():
        if stated.get(k) and origins.get(k):
            made.setdefault(tuple(tuple(o) for o in origins[k]), []).append(v)
    tail = (f"its {RECORD_KEY} key says: that statement, not the file, makes its plain names "
            "hold averages")
    notes = [f"note: {by} wrote {path} from an input read under {' and '.join(own)}, {tail}"
             ] if own else []
    for who, said in made.items():
        writers = {}
        for b, p in who:
            writers.setdefault(b, []).append(p)
        wrote = " and ".join(f"{b} wrote {' and '.join(ps)}" for b, ps in writers.items())
        notes.append(f"note: {wrote} from {'an input' if len(who) == 1 else 'inputs'} read "
                     f"under {' and '.join(said)}, and {by} carried that statement into "
                     f"{path}, {tail}")
    return notes


def output_mark(inputs, stated: dict | None = None, doubted: dict | None = None,
                by: str = "ckpt average") -> dict | None:
    """The mark of an output written by ``by`` from the open checkpoints ``inputs``: what it
    says itself (``doubted``, ``stated``: :func:`mark_doc`) joined with every input's mark,
    so that no output drops an input's doubt or statement. An input's ``names_doubted`` that
    ``--not-swapped`` decided (stated on that input) becomes that statement.

    Returns:
        `dict`, or ``None`` where there is nothing to say.
    """
    docs = [mark_doc(doubted, stated, by)]
    for c in inputs:
        doc = getattr(c, "tools_mark", None)
        if not doc:
            continue
        if names_doubted(doc) and getattr(c, "not_swapped", False):
            doc = {k: v for k, v in doc.items() if k != "names_doubted"}
            docs.append(mark_doc(None, {"not_swapped": True}, by))
        docs.append(_carried(doc, c.path, by))
    return merged(*docs)


def empty_mark() -> dict:
    """A mark that says nothing yet, for a writer to fill
    (:func:`~ckpt_tools.weights_mark.with_weights`)."""
    return {"kind": _KIND, "version": 1}


def _carried(doc: dict, path: str, by: str) -> dict:
    """The input ``path``'s mark ``doc`` as its output's writer ``by`` carries it: its
    statements said ``by`` that writer, each with its ``"origins"`` (``[command, output]``
    pairs: the command that made it and the output it wrote, ``path`` where the input's
    writer made it itself), so that no later read says the carrier read its input under a
    statement it never made (review-30-attack-r112 F1).

    Its ``names_doubted`` is said ``by`` that writer the same way, with the ``"origins"``
    of the doubt: the input's own (its writer over ``path``) and those it carried (s32f).

    Returns:
        `dict` (``doc`` itself where it states and doubts nothing)."""
    d = doc.get("names_doubted")
    if isinstance(d, dict):
        origins = _pairs(d.get("origins"))
        if not origins or d.get("own"):
            origins.append([str(d.get("by", "ckpt average")), path])
        rest = {k: v for k, v in d.items() if k not in ("by", "origins", "own")}
        doc = {**doc, "names_doubted": {**rest, "by": by, "origins": origins}}
    s = doc.get("stated")
    if not isinstance(s, dict):
        return doc
    had = s.get("origins") if isinstance(s.get("origins"), dict) else {}
    said = {k: v for k, v in s.items() if k not in ("by", "origins")}
    origins = {k: had.get(k) or [[str(s.get("by", "ckpt_tools")), path]] for k in said}
    return {**doc, "stated": {**said, "by": by, "origins": origins}}
