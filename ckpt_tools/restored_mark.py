"""The mark ``ckpt restore-ema`` leaves in a Keras weights file it wrote: its weights are the
averages (review-16-attack-r32 F4).

A bare ``.weights.h5`` cannot tell whether its optimizer ran with ``use_ema=True``, so reading
its EMA copies takes a statement; but a file restore-ema wrote needs none to be evaluated: its
weights ARE the averages (and its EMA copies, kept, equal them). restore-ema records that as one
attribute on the HDF5 root of the weights it writes (``model.weights.h5`` inside a ``.keras``),
which Keras' loaders ignore and any Keras save replaces (``save_weights`` truncates the file):
a file trained further and saved again no longer carries it. ``restore-ema --format h5``
marks its legacy weights-only ``.h5`` the same way where every weight it wrote raw is one the
file expects raw (review-17-user-u19 F10). ``eval``, ``list`` and ``export`` read the mark
once per command (:func:`read_mark`, :func:`checkpoint_mark`).

Where restore-ema's pairing rested on an assumption nobody stated (``fit_order``: it printed a
note, ``--strict`` would have refused), the mark records it (``"assumed"``): the output's
readers repeat the note, and refuse under ``--strict`` as the input would, instead of taking
the file's weights as proven averages one command later (review-18-attack-r40 F1). Where it
rested on a statement (``--not-swapped``, ``--use-ema``, ``--optimizer``, ``--trainable``,
``--fit-order``, or ckpt train's run record of them), the mark records it too (``"stated"``:
:func:`keras_statements`), and every read repeats it as a note (and in Python a
:class:`~ckpt_tools.errors.RecordedStatementWarning`): a false ``--not-swapped`` made the raw
weights "the averages", which one command later read as proven (review-33-attack-r128 F3).
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass

from .wording import agreeing

MARK_ATTR = "ckpt_tools"
_MARK = {"written_by": "ckpt restore-ema", "weights": "averages"}
_MEMBER = "model.weights.h5"


def mark_averages(h5file, assumed=()) -> None:
    """Records on an open, writable ``h5py.File`` that its weights are the averages, and the
    names of what the pairing ``assumed`` unstated (``fit_order``), beside what the export's
    record there says (:mod:`~ckpt_tools.export_record`: its values, what was stated)."""
    had = _doc(h5file.attrs.get(MARK_ATTR))
    had.pop("assumed", None)  # this mark's own say
    said = {**had, **_MARK, **({"assumed": sorted(assumed)} if assumed else {})}
    h5file.attrs[MARK_ATTR] = json.dumps(said, sort_keys=True)


def mark_file(path: str, assumed=(), stated=()) -> None:
    """Marks the HDF5 file ``path`` (:func:`mark_averages`, :func:`mark_stated`)."""
    import h5py

    with h5py.File(path, "r+") as f:
        mark_averages(f, assumed)
        mark_stated(f, stated)


#: The statements a Keras pairing rests on, as the options that state them.
_OPTIONS = {"not_swapped": "--not-swapped", "use_ema": "--use-ema", "optimizer": "--optimizer",
            "trainable": "--trainable", "fit_order": "--fit-order"}


def keras_statements(ckpt) -> list[str]:
    """The statements the pairing of the Keras file ``ckpt``'s EMA copies rests on (the
    caller's, or ckpt train's run record's), and those the mark of ``ckpt`` itself records
    (restored again under a statement): what restore-ema's output records
    (:func:`mark_stated`) so that its reads repeat them (review-33-attack-r128 F3).

    Returns:
        `list[str]`: names of :data:`_OPTIONS` (``[]``: none).
    """
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None:
        return []
    said = {"not_swapped": ckpt.not_swapped or getattr(ckpt, "not_swapped_record", None),
            "use_ema": layout.ema_source == "stated",
            "optimizer": layout.stated_optimizer is not None,
            "trainable": layout.trainable_stated,
            "fit_order": ckpt.fit_order or getattr(ckpt, "fit_order_record", None)}
    mark = checkpoint_mark(ckpt)
    had = list(mark.stated) if mark is not None else []
    return list(dict.fromkeys([k for k, v in said.items() if v] + had))


def mark_stated(h5file, stated=()) -> None:
    """Adds to the mark on the open, writable ``h5file`` (:func:`mark_averages`) the
    statements ``stated`` its pairing rested on (:func:`keras_statements`), joined with any
    it records already; nothing where ``stated`` is empty."""
    if not stated:
        return
    raw = h5file.attrs.get(MARK_ATTR)
    said = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    had = said.get("stated") if isinstance(said.get("stated"), list) else []
    said["stated"] = sorted({*had, *stated})
    h5file.attrs[MARK_ATTR] = json.dumps(said, sort_keys=True)


def _doc(raw) -> dict:
    """The JSON object the attribute value ``raw`` holds (``{}``: none)."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    try:
        said = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):
        return {}
    return said if isinstance(said, dict) else {}


def _mark(attrs) -> dict | None:
    said = _doc(attrs.get(MARK_ATTR))
    if said.get("weights") == "averages" and said.get("written_by") == _MARK["written_by"]:
        return said
    return None


@dataclass(frozen=True)
class Mark:
    """What restore-ema's mark in a Keras file says (:func:`read_mark`): its weights are the
    averages, and its pairing assumed ``assumed`` unstated.

    Attributes:
        assumed: the names of what the pairing assumed (``("fit_order",)``); empty where
            nothing was. An entry that is not a string reads ``unknown``: the claim is never
            taken as cleaner than written.
        stated: the names of the statements the pairing rested on (``("not_swapped",)``:
            :func:`keras_statements`), read as ``assumed`` is; empty where none was (a file
            main's restore-ema wrote records none).
    """

    assumed: tuple[str, ...] = ()
    stated: tuple[str, ...] = ()


def _names(x) -> tuple[str, ...]:
    x = x or []
    return tuple(a if isinstance(a, str) else "unknown" for a in
                 (x if isinstance(x, list) else [x]))


def _said(said: dict) -> Mark:
    return Mark(_names(said.get("assumed")), _names(said.get("stated")))


def read_mark(source) -> Mark | None:
    """Reads, once, the mark :func:`mark_averages` leaves in a Keras file.

    Args:
        source: the open reader of the file (``H5Reader``): the mark is read from the HDF5
            its values come from, so one reading decides both (review-21-attack-r54 F1); or
            the path of a ``.weights.h5``, ``.h5``, ``.keras`` or model directory, read as
            that reader reads it (a zip archive where the file starts with a zip header, else
            HDF5).

    Returns:
        `Mark`, or ``None`` where the file carries none or cannot be read.
    """
    import h5py

    from .errors import CheckpointError
    from .formats._io import open_binary
    from .formats.keras.h5_files import ZIP_READ_ERRORS, ZIP_SIGNATURE  # numpy: Keras only

    try:
        if not isinstance(source, (str, os.PathLike)):
            said = _mark(source.root_attrs)
        else:
            path = os.fspath(source)
            if os.path.isdir(path):  # a model directory (model.save(dir, zipped=False))
                path = os.path.join(path, _MEMBER)
            with open_binary(path) as f:
                zipped = f.read(4) == ZIP_SIGNATURE
            if zipped:
                with zipfile.ZipFile(path) as z, z.open(_MEMBER) as member, \
                        h5py.File(member, "r") as f:
                    said = _mark(f.attrs)
            else:
                with h5py.File(path, "r") as f:
                    said = _mark(f.attrs)
    except (OSError, KeyError, ValueError, CheckpointError, *ZIP_READ_ERRORS):
        return None  # another command says why
    return None if said is None else _said(said)


def assumed_note(path: str, assumed: tuple[str, ...]) -> str:
    """What ``list``/``export``/``eval`` say of a marked file whose pairing assumed
    ``assumed``."""
    return (f"ckpt restore-ema paired the averages in {path} on what its input could not prove "
            f"({', '.join(assumed)}: the order fit() builds the optimizer in), as its note "
            "said; --strict refuses the file as it refused the input: state the order there "
            "(--fit-order, --trainable) and write it again")


def stated_note(path: str, stated: tuple[str, ...]) -> str:
    """What every read of a marked file says of the statements ``stated`` its pairing rested
    on (review-33-attack-r128 F3)."""
    said = " and ".join(_OPTIONS.get(s, s) for s in stated)
    return (f"ckpt restore-ema wrote {path} from an input read under {said}, as its mark "
            f"records: {agreeing(len(stated), 'that statement', 'those statements')}, not the "
            "file, made its weights the averages; if one was false (a file saved swapped, "
            "read under --not-swapped), they are the raw weights")


def refuse_marked_assumed(mark: Mark | None, path: str, strict: bool) -> str | None:
    """Refuses (``strict``) the file ``path`` whose ``mark`` says its pairing assumed what its
    input could not prove; else returns the note to print: that, and the statements it
    rested on (:func:`stated_note`; ``None`` where nothing was assumed or stated, or the file
    is not marked).

    Raises:
        UnprovenPairingError: (exit 6) under ``strict``, naming the assumption.
    """
    if mark is None or not mark.assumed and not mark.stated:
        return None
    if not mark.assumed:
        return stated_note(path, mark.stated)
    if strict:
        from .errors import UnprovenPairingError

        raise UnprovenPairingError(f"{path}: --strict: {assumed_note(path, mark.assumed)}",
                                   option="--fit-order")
    return assumed_note(path, mark.assumed) + (
        f"; {stated_note(path, mark.stated)}" if mark.stated else "")


def checkpoint_mark(ckpt) -> Mark | None:
    """The mark of the open checkpoint ``ckpt``, where it is a local Keras file carrying one
    (:func:`read_mark` of its reader: the HDF5 its values come from); ``None`` for any other.
    The file is read once per open checkpoint:
    ``list``, ``export`` and their records all ask.

    Returns:
        `Mark` or ``None``.
    """
    from .formats._io import is_url

    if getattr(ckpt.reader, "keras", None) is None or is_url(str(ckpt.path)):
        return None
    return ckpt.memo("restored_mark", lambda: read_mark(ckpt.reader))  # what its values are


def read_as_marked(ckpt) -> bool:
    """Whether ``ckpt`` is read as its mark says, its weights the averages: it carries the mark
    (:func:`checkpoint_mark`) and no statement (``use_ema``, ``optimizer``, ``trainable``,
    ``not_swapped``, ``fit_order``) asks for its optimizer's EMA copies, which are taken as
    said (``ckpt eval`` reads it the same way)."""
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None or layout.ema_source == "stated" or layout.stated_optimizer is not None \
            or layout.trainable_stated or ckpt.not_swapped or ckpt.fit_order:
        return False
    return checkpoint_mark(ckpt) is not None


def marked_raw_warnings(ckpt, warnings: list[str]) -> list[str]:
    """``warnings`` of an export of the weights as stored without the one that says when they
    would be the averages (``right if ModelCheckpoint saved it after SwapEMAWeights``), where
    the mark says they are; ``export`` then writes them as the averages, never as a
    ``--use-ema`` question (review-17-user-u19 F10)."""
    if checkpoint_mark(ckpt) is None:
        return warnings
    from .keras_assumed import raw_warning

    return [w for w in warnings if w != raw_warning(ckpt)]


#: What ``list`` and ``export`` say of a marked file.
MARKED = "ckpt restore-ema wrote this file: its weights are the averages"

#: The statements that read a marked file's EMA copies instead (:func:`read_as_marked`).
_COPIES = "stating --not-swapped (a .weights.h5: --use-ema too)"


def refuse_restored(ckpt) -> None:
    """Refuses ``restore-ema`` of a file restore-ema wrote, read as its mark says
    (:func:`read_as_marked`): its weights already ARE the averages, so writing them again
    proves nothing, and the pairing of the EMA copies it kept (a ``.weights.h5``'s layout
    question, a swap) would be asked of a file that needs none (review-18-attack-r40 F5). A
    statement that asks for the copies (``--not-swapped``, ``--use-ema``, ``--fit-order``…)
    reads them as ``export`` does.

    Raises:
        EmaError: (exit 6) one line naming the file, what the mark says and what to do.
    """
    if not read_as_marked(ckpt):
        return
    from .errors import EmaError

    mark = checkpoint_mark(ckpt)
    assumed = f"; {assumed_note(ckpt.path, mark.assumed)}" if mark and mark.assumed else ""
    raise EmaError(f"{ckpt.path}: {MARKED} already, so restore-ema has nothing to restore: "
                   "use it as it is (model.load_weights; ckpt export writes its weights as "
                   f"stored); where it kept EMA copies, {_COPIES} restores them again"
                   f"{assumed}")


def marked_map_note(ckpt) -> str | None:
    """What ``ckpt map`` says of a file restore-ema wrote (:func:`checkpoint_mark`): its
    weights are the averages already, whatever the map of its EMA copies shows, and what its
    pairing assumed (review-18-attack-r40 F5); ``None`` for any other file."""
    mark = checkpoint_mark(ckpt)
    if mark is None:
        return None
    assumed = f"; {assumed_note(ckpt.path, mark.assumed)}" if mark.assumed else ""
    assumed += f"; {stated_note(ckpt.path, mark.stated)}" if mark.stated else ""
    return (f"{ckpt.path}: {MARKED} already (restoring it again is not needed: use it as it "
            f"is; export and eval do){assumed}")


def warn_marked_stated(ckpt, stacklevel: int = 3) -> dict:
    """The Python counterpart of :func:`stated_note`: one
    :class:`~ckpt_tools.errors.RecordedStatementWarning` per open checkpoint where the mark of
    ``ckpt`` (:func:`checkpoint_mark`) records the statements its pairing rested on
    (review-33-attack-r128 F3).

    Returns:
        `dict`: the ``--json`` fields (``{"written_under": {"not_swapped": true},
        "written_under_record": "<path>'s ckpt_tools attribute"}``); ``{}`` where none is
        recorded.
    """
    mark = checkpoint_mark(ckpt)
    if mark is None or not mark.stated:
        return {}
    where = f"{ckpt.path}'s {MARK_ATTR} attribute"
    first: list[bool] = []
    ckpt.memo(("marked_stated_warned",), lambda: first.append(True))
    if first:
        import warnings

        from .errors import RecordedStatementWarning

        note = stated_note(ckpt.path, mark.stated)
        warning = RecordedStatementWarning(f"{ckpt.path}: {note}")
        warning.stated, warning.record, warning.notes = list(mark.stated), where, [note]
        warnings.warn(warning, stacklevel=stacklevel)
    return {"written_under": {s: True for s in mark.stated}, "written_under_record": where}


def marked_stated_said(path: str) -> tuple[str | None, dict]:
    """What ``ckpt eval`` says of the file ``path`` restore-ema's mark says it wrote under
    statements (:func:`stated_note`, once per command: the file read once more).

    Returns:
        `tuple`: the note (``None``: no such mark) and the ``--json`` fields
        (``"written_under"``, ``"written_under_record"``).
    """
    mark = read_mark(path)
    if mark is None or not mark.stated:
        return None, {}
    return stated_note(path, mark.stated), {
        "written_under": {s: True for s in mark.stated},
        "written_under_record": f"{path}'s {MARK_ATTR} attribute"}
