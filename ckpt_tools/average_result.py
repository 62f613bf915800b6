"""What ``ckpt average`` wrote (:class:`AverageResult`): what
:func:`~ckpt_tools.average.average_checkpoints` returns and ``--json`` prints."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AverageResult:
    """What :func:`average_checkpoints` wrote.

    Attributes:
        prefix: the output checkpoint prefix (``<out>/variables/variables`` for a SavedModel).
        inputs: the input checkpoint prefixes, oldest first (the newest last).
        newest: the input non-averaged tensors were copied from.
        newest_by: why it is the newest (``global_step 1000``, ``save_counter 3``,
            ``the state file``, ``--newest``).
        saved_model: the output SavedModel directory, for a SavedModel newest input.
        averaged: keys whose values are averages over the inputs.
        baked: plain variable key -> the shadow key whose average it holds (``bake=True``).
        copied: keys copied from the newest input unchanged.
        nbytes: tensor bytes written.
        nonfinite: averaged keys whose values hold NaN or Inf (an input held them, or
            ``inf + -inf``: the average is NumPy's, so it is NaN too).
        assumed: what the ``bake`` pairing takes for granted that the newest input cannot
            prove (``"not_swapped"``: :mod:`~ckpt_tools.keras_assumed`); in ``to_dict()``
            only where not empty.
        doubt_carried: the other checkpoints' graphs doubting the inputs' names, copied beside
            the output so that it is doubted the same way (:mod:`~ckpt_tools.average_doubt`);
            in ``to_dict()`` only where not empty.
        doubt_removed: with ``overwrite``, the copies an earlier average of this output
            carried into ``--out`` (named in its record, ``<name>.carried.json``:
            :mod:`~ckpt_tools.average_carried`), removed with the publish
            (review-26-attack-r90 F4, review-27-attack-r95 F1); in ``to_dict()`` only where
            not empty.
        records: the records written beside the output, file names (``<name>.carried.json``,
            :mod:`~ckpt_tools.average_carried`; ``<name>.restored.json``,
            :mod:`~ckpt_tools.restored_record`): they travel with the checkpoint; in
            ``to_dict()`` (as paths beside ``output``) only where not empty.
        merged: each group of two or more paths given that were taken as one checkpoint
            (distinct files of it, as a shell glob gives them), as given
            (:mod:`~ckpt_tools.average_inputs`); not in ``to_dict()``.
        dropped: the averages ``drop_unproven_averages`` left out of the output (named after
            a name several variables share, nothing proving them alike across the inputs:
            :func:`~ckpt_tools.average_shared.droppable`); in ``to_dict()`` only where given.
        read_otherwise: with ``ema`` (no ``bake``), the keys the ``.meta``'s save op reads
            against their names (:func:`~ckpt_tools.average_shadows.ema_shadows`): ``True``
            for an average not named as an EMA shadow (averaged), ``False`` for a key named
            as one that holds no average (copied from the newest); not in ``to_dict()``
            (``averaged``/``copied`` list them).
        warnings: what the writer warns of (``--no-meta`` left a graph doubting the inputs'
            names unread: :func:`~ckpt_tools.no_meta_mark.written_warning`); not in
            ``to_dict()`` (the CLI's ``--json`` "warnings" has them).
    """

    prefix: str
    inputs: list[str]
    averaged: list[str]
    copied: list[str]
    nbytes: int
    baked: dict[str, str] = field(default_factory=dict)
    newest: str = ""
    newest_by: str = ""
    saved_model: str | None = None
    nonfinite: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    doubt_carried: list[str] = field(default_factory=list)
    doubt_removed: list[str] = field(default_factory=list)
    records: list[str] = field(default_factory=list)
    merged: list[list[str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dropped: list[str] | None = None
    read_otherwise: dict[str, bool] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"output": self.prefix, "inputs": self.inputs, "newest": self.newest,
                "newest_by": self.newest_by, "saved_model": self.saved_model,
                "averaged": self.averaged, "baked": self.baked, "copied": self.copied,
                "nonfinite": self.nonfinite, "bytes": self.nbytes,
                **({"assumed": self.assumed} if self.assumed else {}),
                **({"doubt_carried": self.doubt_carried} if self.doubt_carried else {}),
                **({"doubt_removed": self.doubt_removed} if self.doubt_removed else {}),
                **({"dropped": self.dropped} if self.dropped is not None else {}),
                **({"records": [self.prefix[:len(self.prefix) - len(os.path.basename(
                    self.prefix))] + r for r in self.records]} if self.records else {})}
