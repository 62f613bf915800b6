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
(:func:`checkpoint_marked`).

Where restore-ema's pairing rested on an assumption nobody stated (``fit_order``: it printed a
note, ``--strict`` would have refused), the mark records it (``"assumed"``): the output's
readers repeat the note, and refuse under ``--strict`` as the input would, instead of taking
the file's weights as proven averages one command later (review-18-attack-r40 F1).
"""

from __future__ import annotations

import json
import os
import zipfile

MARK_ATTR = "ckpt_tools"
_MARK = {"written_by": "ckpt restore-ema", "weights": "averages"}
_MEMBER = "model.weights.h5"


def mark_averages(h5file, assumed=()) -> None:
    """Records on an open, writable ``h5py.File`` that its weights are the averages, and the
    names of what the pairing ``assumed`` unstated (``fit_order``)."""
    said = {**_MARK, **({"assumed": sorted(assumed)} if assumed else {})}
    h5file.attrs[MARK_ATTR] = json.dumps(said, sort_keys=True)


def mark_file(path: str, assumed=()) -> None:
    """Marks the HDF5 file ``path`` (:func:`mark_averages`)."""
    import h5py

    with h5py.File(path, "r+") as f:
        mark_averages(f, assumed)


def _mark(h5file) -> dict | None:
    raw = h5file.attrs.get(MARK_ATTR)
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    try:
        said = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if isinstance(said, dict) and said.get("weights") == "averages" and \
            said.get("written_by") == _MARK["written_by"]:
        return said
    return None


def _read_mark(path: str) -> dict | None:
    import h5py

    try:
        if os.path.isdir(path):  # a model directory (model.save(dir, zipped=False))
            path = os.path.join(path, _MEMBER)
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z, z.open(_MEMBER) as member, \
                    h5py.File(member, "r") as f:
                return _mark(f)
        with h5py.File(path, "r") as f:
            return _mark(f)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None


def weights_are_averages(path: str) -> bool:
    """Whether the Keras file ``path`` (``.weights.h5``, ``.h5`` or ``.keras``) carries the
    mark :func:`mark_averages` leaves; ``False`` for anything unreadable."""
    return _read_mark(path) is not None


def marked_assumptions(path: str) -> list[str]:
    """What restore-ema's pairing assumed unstated when it wrote the marked file ``path``
    (``["fit_order"]``); empty where nothing was, or the file is not marked. An entry that is
    not a string is shown as ``unknown``: the claim is never taken as cleaner than written."""
    said = _read_mark(path) or {}
    assumed = said.get("assumed") or []
    return [a if isinstance(a, str) else "unknown" for a in
            (assumed if isinstance(assumed, list) else [assumed])]


def assumed_note(path: str, assumed: list[str]) -> str:
    """What ``list``/``export``/``eval`` say of a marked file whose pairing assumed
    ``assumed``."""
    return (f"ckpt restore-ema paired the averages in {path} on what its input could not prove "
            f"({', '.join(assumed)}: the order fit() builds the optimizer in), as its note "
            "said; --strict refuses the file as it refused the input: state the order there "
            "(--fit-order, --trainable) and write it again")


def refuse_marked_assumed(ckpt, strict: bool) -> str | None:
    """Refuses (``strict``) a marked file whose pairing assumed what its input could not
    prove; else returns the note to print (``None`` where nothing was assumed).

    Raises:
        UnprovenPairingError: (exit 6) under ``strict``, naming the assumption.
    """
    if not checkpoint_marked(ckpt):
        return None
    path = str(getattr(ckpt.reader, "model_dir", None) or ckpt.path)
    assumed = marked_assumptions(path)
    if not assumed:
        return None
    if strict:
        from .errors import UnprovenPairingError

        raise UnprovenPairingError(f"{ckpt.path}: --strict: {assumed_note(ckpt.path, assumed)}",
                                   option="--fit-order")
    return assumed_note(ckpt.path, assumed)


def checkpoint_marked(ckpt) -> bool:
    """Whether the open checkpoint ``ckpt`` is a local Keras file carrying the mark: its
    weights are the averages, as :func:`weights_are_averages`; ``False`` for any other."""
    from .formats._io import is_url

    if getattr(ckpt.reader, "keras", None) is None or is_url(str(ckpt.path)):
        return False
    return weights_are_averages(str(getattr(ckpt.reader, "model_dir", None) or ckpt.path))


def read_as_marked(ckpt) -> bool:
    """Whether ``ckpt`` is read as its mark says, its weights the averages: it carries the mark
    (:func:`checkpoint_marked`) and no statement (``use_ema``, ``optimizer``, ``trainable``,
    ``not_swapped``, ``fit_order``) asks for its optimizer's EMA copies, which are taken as
    said (``ckpt eval`` reads it the same way)."""
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None or layout.ema_source == "stated" or layout.stated_optimizer is not None \
            or layout.trainable_stated or ckpt.not_swapped or ckpt.fit_order:
        return False
    return checkpoint_marked(ckpt)


def marked_raw_warnings(ckpt, warnings: list[str]) -> list[str]:
    """``warnings`` of an export of the weights as stored without the one that says when they
    would be the averages (``right if ModelCheckpoint saved it after SwapEMAWeights``), where
    the mark says they are; ``export`` then writes them as the averages, never as a
    ``--use-ema`` question (review-17-user-u19 F10)."""
    if not checkpoint_marked(ckpt):
        return warnings
    from .keras_assumed import raw_warning

    return [w for w in warnings if w != raw_warning(ckpt)]


#: What ``list`` and ``export`` say of a marked file.
MARKED = "ckpt restore-ema wrote this file: its weights are the averages"
