"""Keys of a Keras 3 ``model.export()`` SavedModel that store a variable a second time.

Keras' export archive tracks the model's variables twice: under ``_all_variables/N`` and under
``variables/N`` (``trainable_variables/N``, ``non_trainable_variables/N``: what
``ExportArchive.track`` lists, and what the serving functions read; Keras 3.15, TF 2.21).
TensorFlow saves each list entry as its own object, so the checkpoint holds every weight under two
keys, and a listing or an export showed each twice, one copy under a name that says nothing
(``variables/0``). Listings show each once; whatever WRITES a checkpoint (``ckpt average``) must
write both, as two variables (review-17-user-u19 F0).

A ``variables/N`` key is taken as a second copy of an ``_all_variables/M`` key only where the
file shows it: both entries record the same variable name (``full_name``, the Keras path), no
other ``_all_variables`` entry records that name, and dtype, shape, size and the stored bytes'
checksum are equal. Anything else stays a variable of its own, as before.
"""

from __future__ import annotations

_LISTS = ("variables", "trainable_variables", "non_trainable_variables")


def export_archive(objects) -> bool:
    """Whether a SavedModel's object graph is a Keras 3 ``model.export()`` archive (its root
    tracks ``_all_variables`` and ``variables``/``trainable_variables``...)."""
    if objects is None:
        return False
    root = dict(objects.children.get(0, ()))
    return "_all_variables" in root and any(name in root for name in _LISTS)


def saved_aliases(objects, entries) -> dict[str, str]:
    """Returns ``{second key: the _all_variables key it repeats}`` for a Keras 3 export
    archive's checkpoint (``{}`` for any other)."""
    if not export_archive(objects):
        return {}
    root = dict(objects.children.get(0, ()))
    by_name: dict[str, list[str]] = {}
    for _, node in objects.children.get(root["_all_variables"], ()):
        key = objects.node_keys.get(node)
        if key is not None and objects.full_names.get(key):
            by_name.setdefault(objects.full_names[key], []).append(key)
    out: dict[str, str] = {}
    for name in _LISTS:
        for _, node in objects.children.get(root.get(name, -1), ()):
            key = objects.node_keys.get(node)
            kept = by_name.get(objects.full_names.get(key or "", ""), ())
            if key is None or len(kept) != 1 or kept[0] == key:
                continue
            if _same_bytes(entries.get(key), entries.get(kept[0])):
                out[key] = kept[0]
    return out


def _same_bytes(a, b) -> bool:
    return (a is not None and b is not None and not a.slices and not b.slices
            and a.crc32c is not None and a.crc32c == b.crc32c and a.dtype == b.dtype
            and a.shape == b.shape and a.stored_bytes == b.stored_bytes)
