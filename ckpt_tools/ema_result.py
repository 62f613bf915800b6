"""The restore map :func:`~ckpt_tools.emamap.ema_map` returns (:class:`EmaMap`): which
checkpoint key feeds which variable, what was (not) averaged, and the refusal of averages
missing (:meth:`EmaMap.require_complete`)."""

from __future__ import annotations

from .ema_missing import missing_message
from .errors import EmaError
from .formats._record import Frozen
from .wording import agreeing, counted


class EmaMap(Frozen):
    """A restore map in checkpoint keys, with what was (not) averaged.

    Attributes:
        mapping: source key in the checkpoint -> target variable key (like the dict
            ``variables_to_restore()`` returns, with names instead of variables).
        ema_name: the EMA suffix used (``ExponentialMovingAverage``, ``avg``…).
        averaged: targets that receive an average.
        raw: targets restored from their own (raw) value.
        missing: targets that should receive an average whose shadow is not stored.
        unaveraged: weights with no shadow while others have one (keys-only inference).
        not_saved: raw targets the graph has but the checkpoint does not store.
        dropped: checkpoint keys deliberately left out (optimizer slots, filters).
        debias: zero-debias helpers (``…/biased``, ``…/local_step``) found.
        loss_averages: averages of loss tensors found (``total_loss/avg``).
        source: ``"meta"`` (from the graph's collections) or ``"keys"`` (inferred).
        assumed: what the pairing takes for granted that the file cannot prove
            (``"fit_order"``, ``"not_swapped"``: :mod:`~ckpt_tools.keras_assumed`); empty
            where the file proves it or you stated it.
        filtered_averages: targets the ``include``/``exclude`` filters left out whose
            average is stored (so a refusal of the others' missing averages never says that
            none is stored at all); neither compared nor in repr.
        excluded: targets ``exclude`` selects, by their name or the key their average is
            read from here (``--exclude W/slow``: ``W``), so that several names' maps joined
            leave them out under every name (:func:`~ckpt_tools.ema_several.join_maps`);
            neither compared nor in repr.
        filtered_sources: the stored averages of the pairs the ``include``/``exclude``
            filters left out (``--exclude model/disc/c``: its average ``ema/disc/c``): the
            left-out weights' averages, which an export must not write as tensors of their
            own (review s32c); neither compared nor in repr.
    """

    checkpoint: str
    ema_name: str
    mapping: dict[str, str]
    averaged: tuple[str, ...]
    raw: tuple[str, ...]
    missing: tuple[str, ...]
    unaveraged: tuple[str, ...]
    not_saved: tuple[str, ...]
    dropped: tuple[str, ...]
    debias: tuple[str, ...]
    loss_averages: tuple[str, ...]
    source: str
    file_style: str  # "tf1" (name-based), "tf2" (object graph) or "keras": for messages
    assumed: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]  # (source, input target); not in repr
    hints: tuple[str, ...]  # not in repr
    # key -> the name `ckpt list` shows (TF2 object path), so messages name variables alike;
    # neither compared nor in repr.
    names: dict[str, str]
    # unaveraged key -> why the file expects it raw (raw_reasons.FROZEN...); not compared
    expected_raw: dict[str, str]
    # in_graph: key -> the variable the save op wrote under it, where the keys are not their
    # variables' names and are paired through it (graph_saved); not compared
    held: dict[str, str]
    filtered_averages: tuple[str, ...]
    excluded: tuple[str, ...]
    filtered_sources: tuple[str, ...]
    _fields = ("checkpoint", "ema_name", "mapping", "averaged", "raw", "missing", "unaveraged",
               "not_saved", "dropped", "debias", "loss_averages", "source", "file_style",
               "assumed", "pairs", "hints", "names", "expected_raw", "held",
               "filtered_averages", "excluded", "filtered_sources")
    _compare = _fields[:-6]
    _repr = _fields[:-8]

    def __init__(self, checkpoint: str, ema_name: str, mapping: dict[str, str],
                 averaged: tuple[str, ...] = (), raw: tuple[str, ...] = (),
                 missing: tuple[str, ...] = (), unaveraged: tuple[str, ...] = (),
                 not_saved: tuple[str, ...] = (), dropped: tuple[str, ...] = (),
                 debias: tuple[str, ...] = (), loss_averages: tuple[str, ...] = (),
                 source: str = "keys", file_style: str = "tf1", assumed: tuple[str, ...] = (),
                 pairs: tuple[tuple[str, str], ...] = (), hints: tuple[str, ...] = (),
                 names: dict[str, str] | None = None,
                 expected_raw: dict[str, str] | None = None,
                 held: dict[str, str] | None = None,
                 filtered_averages: tuple[str, ...] = (),
                 excluded: tuple[str, ...] = (),
                 filtered_sources: tuple[str, ...] = ()) -> None:
        self.__dict__.update(
            checkpoint=checkpoint, ema_name=ema_name, mapping=mapping, averaged=averaged,
            raw=raw, missing=missing, unaveraged=unaveraged, not_saved=not_saved,
            dropped=dropped, debias=debias, loss_averages=loss_averages, source=source,
            file_style=file_style, assumed=assumed, pairs=pairs, hints=hints,
            names={} if names is None else names,
            expected_raw={} if expected_raw is None else expected_raw,
            held={} if held is None else held, filtered_averages=filtered_averages,
            excluded=excluded, filtered_sources=filtered_sources)

    def shown(self, key: str) -> str:
        """Returns the name ``ckpt list`` shows for ``key`` (its object path, or the key)."""
        return self.names.get(key) or key

    def to_json(self) -> dict[str, str]:
        """Returns ``{"ema_key": "target_key", …}``, the ``ckpt map --json`` document."""
        return dict(self.mapping)

    def sources(self) -> dict[str, str]:
        """Returns target key -> source key (the inverse of :attr:`mapping`)."""
        return {t: s for s, t in self.mapping.items()}

    def unaveraged_warning(self, keys=None) -> str | None:
        """Returns the warning for weights with no average that keep their raw values (those
        of ``keys`` where given), in the file's style, or None where every weight has one or
        the file explains why it has none (:meth:`unaveraged_note`).

        Example:
            >>> from ckpt_tools import ema_map
            >>> ema_map("fixtures/linear_v1").unaveraged_warning() is None
            True
        """
        keys = [k for k in self.unaveraged if (keys is None or k in keys)
                and k not in self.expected_raw]
        if not keys:
            return None
        # Speak the file's style: a Keras optimizer keeps EMA copies, TF2 ema.average(v)s.
        what = {"keras": "EMA copy in the optimizer (use_ema=True: it was not built with "
                         "them, or keeps none of them, as of a float8 layer's scales and "
                         "amax histories)",
                "tf2": "average (ema.average(v)) in the checkpoint"}.get(
            self.file_style, f"'{self.ema_name}' shadow")
        return (f"{counted(len(keys), 'weight')} {agreeing(len(keys), 'has', 'have')} no {what} "
                "and keep their raw values: "
                f"{', '.join(self.shown(k) for k in keys[:5])}"
                + (" ..." if len(keys) > 5 else ""))

    def unaveraged_note(self, keys=None) -> str | None:
        """Returns the note for weights with no average whose raw value the file explains
        (a ``.keras`` whose config.json records them frozen or non-trainable), those of
        ``keys`` where given, or None."""
        from .raw_reasons import expected_raw_note

        return expected_raw_note({k: r for k, r in self.expected_raw.items()
                                  if keys is None or k in keys}, self.shown)

    def require_complete(self, left_out=()) -> EmaMap:
        """Returns self, or raises :class:`EmaError` explaining which shadows are missing.

        ``left_out``: target keys the caller's filters leave out (never exported nor
        restored), whose missing average cannot matter; the refusal names only the others.
        """
        skip = set(left_out) & set(self.missing)
        if len(skip) < len(self.missing):
            kept = self if not skip else EmaMap(**{
                **{f: getattr(self, f) for f in self._fields},
                "missing": tuple(t for t in self.missing if t not in skip),
                "averaged": tuple(t for t in self.averaged if t not in skip)})
            raise EmaError(missing_message(kept))
        return self
