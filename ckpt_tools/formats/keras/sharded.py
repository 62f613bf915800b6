"""Keras 3 sharded weights: ``model.save_weights("model.weights.json", max_shard_size=...)``.

Keras then writes a JSON map, ``model.weights.json`` (``{"metadata": {...}, "weight_map":
{"/layers/dense/vars": ["model_00000.weights.h5"], "/optimizer/vars": [...]}}``), and numbered
shards ``model_00000.weights.h5``, ``model_00001.weights.h5``... Each shard looks like an ordinary
``.weights.h5`` but holds only some layers and some optimizer variables, numbered as in the whole
model: read alone, a shard's ``optimizer/vars/2`` is the EMA copy of a layer stored in another
shard, and pairing it with the shard's own layers hands back another variable's average. Shards
are therefore refused (exit 5), naming the map, until they can be read together.
No h5py import here: :func:`refuse_sharded` runs for every HDF5 path a user types.
"""

from __future__ import annotations

import json
import os

from ...errors import UnsupportedFormatError

__all__ = ["MAP_SUFFIX", "lone_shard_tell", "shard_map_of", "refuse_sharded"]

MAP_SUFFIX = ".weights.json"
_MAX_MAP_BYTES = 64 << 20  # a map lists each layer once: megabytes even for huge models
_MAX_MAPS = 64  # maps looked at beside one file


def _weight_map(path: str) -> dict | None:
    """Returns the ``weight_map`` of a Keras sharded-weights map, or None if ``path`` is not
    one (not a regular file, too large, not JSON, no ``weight_map`` object)."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > _MAX_MAP_BYTES:
            return None
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return None
    mapping = doc.get("weight_map") if isinstance(doc, dict) else None
    return mapping if isinstance(mapping, dict) else None


def shard_map_of(path: str) -> str | None:
    """Returns the ``*.weights.json`` beside ``path`` whose weight map lists ``path`` as one of
    its shards, or None.

    Example:
        >>> shard_map_of("fixtures/keras_ema/model.weights.h5") is None
        True
    """
    directory, name = os.path.split(os.path.abspath(path))
    try:
        maps = sorted(f for f in os.listdir(directory) if f.endswith(MAP_SUFFIX))
    except OSError:
        return None
    for candidate in maps[:_MAX_MAPS]:
        mapping = _weight_map(os.path.join(directory, candidate))
        if mapping and any(name in (files if isinstance(files, list) else [files])
                           for files in mapping.values()):
            return os.path.join(os.path.dirname(path), candidate)
    return None


def _advice(map_path: str) -> str:
    return (f"ckpt reads whole weight files only: in Keras, compile the model with its "
            f"optimizer, model.optimizer.build(model.trainable_variables), model.load_weights("
            f"{map_path!r}), then model.save_weights('model.weights.h5') (no max_shard_size) "
            "writes one file ckpt reads, EMA copies included")


def refuse_sharded(path: str) -> None:
    """Refuses a Keras sharded-weights map, or one shard of it read alone.

    Raises:
        UnsupportedFormatError: ``path`` is a ``*.weights.json`` weight map, or a ``.h5``
            file such a map beside it lists as a shard (exit 5, naming the map).
    """
    if path.endswith(MAP_SUFFIX) and _weight_map(path) is not None:
        raise UnsupportedFormatError(
            f"{path}: Keras sharded weights (save_weights(..., max_shard_size=...)): "
            + _advice(path))
    if path.endswith((".h5", ".hdf5")):
        found = shard_map_of(path)
        if found is not None:
            raise UnsupportedFormatError(
                f"{path}: one shard of the Keras sharded weights {found} "
                "(save_weights(..., max_shard_size=...)); read alone, its optimizer variables "
                "are numbered as in the whole model and would pair with the wrong layers; "
                + _advice(found))


def lone_shard_tell(owners: list[str], named: set[str]) -> str | None:
    """Returns why a Keras 3 weight file is one shard of a sharded save copied away from its
    map (a shard numbered from ``vars/0`` passes the numbering check), or None.

    What only shards hold (saving_lib's ``ShardedH5IOStore``): a whole-model file always has
    the model's own ``vars`` group at its root (``owners`` holds ``""``), and where Keras
    names the ``vars`` groups it makes (a ``name`` attribute: ``named``) it names all of
    them; a later shard lacks the root group, and a layer continued from the previous shard
    gets an unnamed one there.

    Example:
        >>> lone_shard_tell(["layers/dense_2", "optimizer"], {"optimizer"})
        "it has no root vars group (the model's own, in every whole weight file)"
    """
    if owners and "" not in owners:
        return "it has no root vars group (the model's own, in every whole weight file)"
    unnamed = [o for o in owners if o not in named]
    if named and unnamed:
        return (f"its {unnamed[0]}/vars has no name attribute, as a layer continued from the "
                "previous shard has (Keras names every group it makes)")
    return None
