"""Output names Keras reads as another layout than the one the ``.h5`` writers write.

``ckpt export --out x.h5`` and ``restore-ema --format h5`` write the legacy by-layer HDF5
layout (``layer_names``/``weight_names``), which ``load_weights`` fills layer by layer. Keras 3
and tf_keras (2.13 and later) choose the loader by the name: one ending in ``.weights.h5`` is
read as ``model.save_weights()``'s own layout (``layers/<name>/vars/<i>``), and a legacy file so
named is refused ("Layer 'l0' expected 2 variables, but received 0"). Such a name is refused
before anything is read.
"""

from __future__ import annotations

import os

from .errors import OutputError

KERAS3_WEIGHTS_SUFFIX = ".weights.h5"


def tf_bundle_input(path: str | os.PathLike) -> bool:
    """Whether ``path`` (a command's input) is surely a TensorFlow checkpoint, never a Keras
    file: an ``.index`` file, a prefix beside one, or a directory holding one."""
    text = os.fspath(path).rstrip("/")
    if text.endswith(".index") or os.path.isfile(text + ".index"):
        return True
    try:
        return os.path.isdir(text) and any(n.endswith(".index") for n in os.listdir(text))
    except OSError:
        return False


def refuse_keras3_weights_name(out: str | os.PathLike, by: str, tf_input: bool = False) -> None:
    """Refuses an ``.h5`` output named ``*.weights.h5``, naming the ways that load.

    Args:
        out: the output path.
        by: what writes it (``export``, ``restore-ema --format h5``), for the message.
        tf_input: the input is a TensorFlow checkpoint (:func:`tf_bundle_input`), which
            ``restore-ema --format keras`` refuses: not suggested then (review-24-user-u26
            F12).

    Raises:
        OutputError: ``out`` ends in ``.weights.h5`` (any case); the message names the same
            file as ``.h5`` (which Keras' ``load_weights`` reads layer by layer) and
            ``restore-ema --format keras``, which writes Keras' own layout from a Keras input.
    """
    text = os.fspath(out).rstrip("/")
    if not text.lower().endswith(KERAS3_WEIGHTS_SUFFIX):
        return
    alt = text[: -len(KERAS3_WEIGHTS_SUFFIX)] + ".h5"
    raise OutputError(
        f"{text}: Keras' load_weights (Keras 3, tf_keras) reads a name ending in .weights.h5 "
        f"as model.save_weights()'s own layout, and would refuse the by-layer .h5 layout {by} "
        f"writes; name it {alt} (the same weights, which load_weights fills layer by layer)"
        + ("" if tf_input else
           ", or from a Keras input (.keras, .weights.h5) write Keras' own layout with "
           "ckpt restore-ema INPUT --format keras --out x.weights.h5"))
