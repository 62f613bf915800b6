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


def refuse_keras3_weights_name(out: str | os.PathLike, by: str) -> None:
    """Refuses an ``.h5`` output named ``*.weights.h5``, naming the ways that load.

    Args:
        out: the output path.
        by: what writes it (``export``, ``restore-ema --format h5``), for the message.

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
        f"writes; name it {alt} (the same weights, which load_weights fills layer by layer), "
        "or from a Keras input (.keras, .weights.h5) write Keras' own layout with "
        "ckpt restore-ema INPUT --format keras --out x.weights.h5")
