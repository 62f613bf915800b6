"""Which file format ``ckpt export`` writes (:func:`output_format`, from ``--format`` and the
output's extension) and whether it can hold every tensor's dtype (:func:`check_dtypes`),
checked before anything is written (:mod:`ckpt_tools.export`)."""

from __future__ import annotations

from .checkpoint import Checkpoint
from .errors import OutputError, UnsupportedFormatError
from .export_writers import H5_NATIVE, H5_WIDEN, NPZ_WIDEN, SAFETENSORS_DTYPES
from .formats._write import checkpoint_file_kind
from .h5_out_name import refuse_keras3_weights_name

FORMATS = ("npz", "safetensors", "h5")


def _who_can_hold(dtype: str) -> str:
    can = [f for f, ok in (("safetensors", dtype in SAFETENSORS_DTYPES),
                           ("h5", dtype in H5_NATIVE or dtype in H5_WIDEN)) if ok]
    return " or ".join(f".{f}" for f in can) + (" or " if can else "") + (
        f".npz (widened to {NPZ_WIDEN[dtype]}, exact)" if dtype in NPZ_WIDEN else ".npz")


def check_dtypes(ckpt: Checkpoint, plan: dict[str, str], fmt: str) -> None:
    """Refuses (exit 5) a tensor whose dtype the output format cannot hold, naming one that can.

    Raises:
        UnsupportedFormatError: e.g. float8 into ``.h5``, int4 into ``.safetensors``.
    """
    for name, src in plan.items():
        dtype = ckpt.entry(src).dtype_name
        ok = {"npz": True, "safetensors": dtype in SAFETENSORS_DTYPES,
              "h5": dtype in H5_NATIVE or dtype in H5_WIDEN}[fmt]
        if not ok:
            raise UnsupportedFormatError(
                f"{name} ({src}) is {dtype}, which {fmt} cannot hold; export to "
                f"{_who_can_hold(dtype)} instead")


#: Output file extensions and the export format each one means.
EXTENSIONS = {".npz": "npz", ".safetensors": "safetensors", ".h5": "h5", ".hdf5": "h5"}


def output_format(out_path: str, fmt: str | None = None, tf_input: bool = False) -> str:
    """The export format for ``out_path``: ``fmt`` when given, else the one its extension
    names (:data:`EXTENSIONS`).

    An extension of another format is refused rather than written into: npz bytes in a file
    called ``x.h5`` would fail in whatever reads it later, far from the cause. A name with no
    known extension (``weights.bin``) takes ``fmt`` as given. ``tf_input``: the input is a
    TensorFlow checkpoint (the refusal of ``*.weights.h5`` then suggests no Keras-only way).

    Raises:
        OutputError: ``fmt`` is unknown; ``fmt`` is None and the extension names no format;
            ``fmt`` contradicts the extension (``--format npz`` with ``x.h5``), naming both; or
            the name is a Keras archive (``.keras``), which export does not write, or an
            ``.h5`` named ``*.weights.h5``, which Keras reads as its own layout
            (:func:`~ckpt_tools.h5_out_name.refuse_keras3_weights_name`).
    """
    lower = out_path.lower()
    named = next((f for e, f in EXTENSIONS.items() if lower.endswith(e)), None)
    if fmt is not None and fmt not in FORMATS:
        raise OutputError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    part = checkpoint_file_kind(out_path)
    if part is not None:  # npz bytes under a checkpoint's name would break the run's reader
        given = f"--format {fmt} contradicts the name of {out_path}" if fmt else out_path
        raise OutputError(f"{given}: it is named like {part}, which export does not write; "
                          f"name a .{fmt or 'npz'} file" + ("" if fmt else
                                                          " (or .safetensors, .h5)"))
    if fmt in (None, "h5"):  # Keras reads x.weights.h5 as another layout than export's
        refuse_keras3_weights_name(out_path, "export", tf_input)
    if lower.endswith(".keras"):
        raise OutputError(f"{out_path}: a .keras file is a Keras archive, which export does not "
                          "write; name a .npz, .safetensors or .h5 file (restore-ema writes a "
                          ".keras file of EMA weights from a .keras input)")
    if fmt is None:
        if named is None:
            raise OutputError(f"{out_path}: cannot tell the format from the extension; name a "
                              ".npz, .safetensors or .h5 file, or pass --format "
                              "npz|safetensors|h5")
        return named
    if named is not None and named != fmt:
        ext = next(e for e in EXTENSIONS if lower.endswith(e))
        raise OutputError(f"--format {fmt} contradicts the extension of {out_path} ({ext} is "
                          f"{named}); name a .{fmt} file or pass "
                          f"--format {named}")
    return fmt
