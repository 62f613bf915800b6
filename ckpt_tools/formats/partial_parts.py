"""Partitioned TF1 averages stored for only some parts of their variable.

``ema.apply()`` over a var list that leaves out one part of a partitioned variable (a filter over
``tf.trainable_variables()`` dropping ``emb/part_2``) makes shadows of the other parts only, and
TF's Saver writes them under one key, ``emb/ExponentialMovingAverage``, whose slices cover part
of the tensor: a valid checkpoint, which restores in TF, whose whole tensor cannot be read
(review-15-attack-r29 F3). Such a key is set apart from the tensors read as whole ones
(:attr:`~.bundle.BundleReader.partial`), so that the file opens and its variables without an
average under a name are missing theirs; a gap anywhere else is still corrupt.
"""

from __future__ import annotations

import math

from ..errors import CorruptCheckpointError


def averaged_parts(entries: dict, gapped: dict, path: str) -> dict[str, str]:
    """The entries of ``gapped`` (name -> (entry, the error naming its gap)) that are a stored
    variable's partial average: their head (``emb`` of ``emb/ExponentialMovingAverage``) is
    stored partitioned, of the same dtype and shape, and each of their slices is one of its.

    Returns:
        name -> what is stored of it (``2 of the 3 parts of emb (24 of 36 elements)``).

    Raises:
        CorruptCheckpointError: the first other gapped entry, as a gap is corrupt there.
    """
    out: dict[str, str] = {}
    for name, (entry, exc) in gapped.items():
        head = entries.get(name.rpartition("/")[0])
        if head is None or not head.slices or head.dtype != entry.dtype \
                or head.shape != entry.shape or not set(entry.slices) < set(head.slices):
            raise CorruptCheckpointError(str(exc), path=path)
        covered = sum(math.prod(n for _, n in s.resolve(entry.shape)) for s in entry.slices)
        out[name] = (f"{len(entry.slices)} of the {len(head.slices)} parts of {head.name} "
                     f"({covered} of {math.prod(entry.shape)} elements)")
    return out
