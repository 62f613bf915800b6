"""The mark ``ckpt restore-ema`` leaves in a Keras weights file it wrote: its weights are the
averages (review-16-attack-r32 F4).

A bare ``.weights.h5`` cannot tell whether its optimizer ran with ``use_ema=True``, so reading
its EMA copies takes a statement; but a file restore-ema wrote needs none to be evaluated: its
weights ARE the averages (and its EMA copies, kept, equal them). restore-ema records that as one
attribute on the HDF5 root of the weights it writes (``model.weights.h5`` inside a ``.keras``),
which Keras' loaders ignore and any Keras save replaces (``save_weights`` truncates the file):
a file trained further and saved again no longer carries it.
"""

from __future__ import annotations

import json
import zipfile

MARK_ATTR = "ckpt_tools"
_MARK = {"written_by": "ckpt restore-ema", "weights": "averages"}
_MEMBER = "model.weights.h5"


def mark_averages(h5file) -> None:
    """Records on an open, writable ``h5py.File`` that its weights are the averages."""
    h5file.attrs[MARK_ATTR] = json.dumps(_MARK, sort_keys=True)


def _marked(h5file) -> bool:
    raw = h5file.attrs.get(MARK_ATTR)
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    try:
        said = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return False
    return isinstance(said, dict) and said.get("weights") == "averages" and \
        said.get("written_by") == _MARK["written_by"]


def weights_are_averages(path: str) -> bool:
    """Whether the Keras file ``path`` (``.weights.h5``, ``.h5`` or ``.keras``) carries the
    mark :func:`mark_averages` leaves; ``False`` for anything unreadable."""
    import h5py

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z, z.open(_MEMBER) as member, \
                    h5py.File(member, "r") as f:
                return _marked(f)
        with h5py.File(path, "r") as f:
            return _marked(f)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return False
