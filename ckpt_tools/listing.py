"""What ``ckpt list`` shows: the variables of a checkpoint, filtered, with EMA coverage.

:func:`list_variables` is the whole of ``ckpt list`` minus the printing; its :class:`Listing`
carries the ``--json`` document (:meth:`Listing.to_dict`) and the facts the table needs (which
roles are expected to have a shadow). Reads metadata only: no tensor data, no NumPy, no
TensorFlow. :class:`Listing` itself and its JSON encoding live in ``listing_record``; the EMA
links it shows (as ``ckpt map`` pairs them, raw keys marked) in ``listing_pairing``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from .checkpoint import Checkpoint, open_checkpoint
from .errors import OptionError, VariableNotFoundError
from .formats._io import gc_paused
from .formats._record import replace
from .formats.objgraph import has_swappable_averages
from .frozen_meta import listed_frozen, renamed_frozen
from .listing_pairing import decided_pairs, raw_marked, raw_offer, renamed_unwritten
from .listing_record import Listing
from .listing_shadows import shadow_marked
from .listing_shards import data_shards
from .listing_stated import statements_listed
from .meta_sibling import doubt_note
from .order_marks import marked_paths
from .raw_reasons import expected_raw
from .roles import ROLES

#: Short names ``--collection`` accepts for the standard graph collections.
COLLECTION_ABBREVIATIONS = {
    "trainable": "trainable_variables", "global": "variables",
    "moving_avg": "moving_average_variables", "model": "model_variables",
    "local": "local_variables", "metric": "metric_variables", "global_step": "global_step",
}
_SHORT = {full: short for short, full in COLLECTION_ABBREVIATIONS.items()}


def short_collection(name: str) -> str:
    """``trainable_variables`` -> ``trainable``; other names unchanged."""
    return _SHORT.get(name, name)


def list_variables(checkpoint: str | os.PathLike | Checkpoint, *,
                   roles: list[str] | None = None, collections: list[str] | None = None,
                   match: Callable[[str, str | None], bool] | None = None,
                   sort: str = "name", use_ema: bool | None = None,
                   trainable: list[str] | None = None, ema_name: str | None = None,
                   use_meta: bool = True, apply_order: str | None = None,
                   assumptions: bool = False, strict: bool = False,
                   not_swapped: bool = False, fit_order: bool = False,
                   averages_only: bool = False, optimizer: str | None = None,
                   saver_def_wrote: bool = False) -> Listing:
    """Lists a checkpoint's variables, as ``ckpt list`` shows them.

    Args:
        checkpoint: path or open checkpoint.
        roles: keep only these roles (:data:`ckpt_tools.roles.ROLES`).
        collections: keep only members of these graph collections (full names, or the short
            names of :data:`COLLECTION_ABBREVIATIONS`); needs a ``.meta`` graph.
        match: keep only variables for which ``match(key, object_path)`` is true.
        sort: ``"name"`` (checkpoint order; a bundle's keys with digit runs compared as
            numbers: :func:`natural_key`) or ``"size"`` (largest first).
        use_ema: Keras files: the optimizer's ``use_ema`` as stated by the caller
            (``--use-ema``); ``None`` infers it. Only used when ``checkpoint`` is a path.
        trainable: Keras 3 files: the weights the optimizer was built with, in order
            (``--trainable``, see :func:`~ckpt_tools.open_checkpoint`). Only used when
            ``checkpoint`` is a path.
        ema_name / use_meta / apply_order: decide the pairing as for
            :func:`ckpt_tools.ema_map`; each variable's ``ema`` is the average ``ckpt map``
            would use, and where the file does not prove one, ``ema`` is ``None`` and
            ``ema_candidates`` lists the averages (``Listing.unproven`` says why).
        assumptions: fill ``Listing.assumed`` and ``Listing.copies_equal`` (reads a Keras
            file's weights and EMA copies, a tf_keras TF checkpoint's weights and averages).
        strict: refuse a Keras pairing that rests on an assumption, as ``--strict``.
        not_swapped: state that a Keras file was not saved swapped by ``SwapEMAWeights``
            (``--not-swapped``; see :func:`~ckpt_tools.checkpoint.open_checkpoint`).
        fit_order: state that ``fit()`` built a Keras file's optimizer (``--fit-order``).
        averages_only: state that a TF1 checkpoint's keys named as averages whose variable
            is not stored hold averages (``--averages-only``; see
            :func:`~ckpt_tools.checkpoint.open_checkpoint`).
        optimizer: a bare Keras ``.weights.h5``'s optimizer class and options
            (``--optimizer``; see :func:`~ckpt_tools.checkpoint.open_checkpoint`).
        saver_def_wrote: state that the Saver whose ``SaverDef`` a TF1 checkpoint's own
            ``.meta`` records wrote it (``--saver-def-wrote``; see
            :func:`~ckpt_tools.checkpoint.open_checkpoint`).

    Returns:
        `Listing`.

    Raises:
        ValueError: an unknown role, sort order or collection, or ``collections`` without a
            ``.meta`` graph (the CLI reports these as usage errors, exit 2).
        VariableNotFoundError: a standard collection (``model``, ``local``…) this graph does
            not have (exit 3, like name filters that select nothing), naming those it has.
        CheckpointError: the checkpoint cannot be opened.
        EmaError: (``strict``) the pairing rests on an assumption
            (:func:`~ckpt_tools.keras_assumed.refuse_assumed`).
    """
    bad = [r for r in roles or () if r not in ROLES]
    if bad:
        raise ValueError(f"unknown role {bad[0]!r}; expected one of: {', '.join(ROLES)}")
    if sort not in ("name", "size"):
        raise ValueError(f"unknown sort order {sort!r}; expected 'name' or 'size'")
    owned = not isinstance(checkpoint, Checkpoint)
    with gc_paused():  # entries, Variables, roles: many small objects, none in a cycle
        ckpt = open_checkpoint(checkpoint, use_ema=use_ema, trainable=trainable,
                               not_swapped=not_swapped, fit_order=fit_order,
                               averages_only=averages_only, optimizer=optimizer,
                               saver_def_wrote=saver_def_wrote, meta=use_meta) if owned \
            else checkpoint
        try:
            listing = _listing(ckpt, roles, collections, match, sort,
                               dict(ema_name=ema_name, use_meta=use_meta,
                                    apply_order=apply_order))
            if (assumptions or strict) and (has_swappable_averages(ckpt.objects) or getattr(
                    ckpt.reader, "keras", None) is not None or _saver_unrecorded(ckpt)):
                # keras_assumed: no import else
                from .keras_assumed import (
                    copies_equal,
                    equal_groups,
                    keras_assumptions,
                    refuse_assumed,
                    swap_refusal,
                )

                assumed = keras_assumptions(ckpt)
                if strict:
                    refuse_assumed(ckpt, assumed)
                listing.assumed = [a.name for a in assumed]
                if "fit_order" in listing.assumed:  # the groups that assumption is about
                    listing.fit_order_pairs = sorted(
                        w for _shape, _dtype, ws in equal_groups(ckpt) for w in ws)
                listing.copies_equal = "not_swapped" not in listing.assumed and copies_equal(ckpt)
                if listing.unproven is None and "not_swapped" in listing.assumed:
                    # inspection shows the pairing; every command that hands values back
                    # refuses it until --not-swapped (or --raw) says how the file was saved
                    listing.unproven = {"option": "--not-swapped",
                                        "reason": swap_refusal(ckpt, assumed)}
            if assumptions and not listing.copies_equal and listing.with_shadow and \
                    ckpt.objects is not None:  # tf_keras' averages, copied in after fit (F5)
                from .tfk_order import averages_in_weights

                listing.copies_equal = averages_in_weights(ckpt, listing.by_key)
            # what export says the pairing rests on by statement, notes and fields (u33 F7)
            listing.said, listing.stated = statements_listed(ckpt.with_meta(use_meta), bool(
                not_swapped or fit_order or trainable or use_ema or optimizer or averages_only
                or saver_def_wrote or apply_order is not None), apply_order, ema_name)
            if listing.unproven is None and use_meta:  # crossed Savers, no pair (s26n)
                from .crossed_routes import crossed_listed

                listing.unproven = crossed_listed(ckpt)
            return listing
        finally:
            if owned:
                ckpt.close()


def _saver_unrecorded(ckpt: Checkpoint) -> bool:
    """A TF1 checkpoint whose graph file records no save op, its averages paired by the keys'
    names (:func:`~ckpt_tools.save_op.named_pairs_unproven`: ``saver_not_swapped``)."""
    from .save_op import named_pairs_unproven

    return bool(named_pairs_unproven(ckpt))


def _listing(ckpt: Checkpoint, roles, collections, match, sort: str,
             decide: dict | None = None) -> Listing:
    """:func:`list_variables` on an open checkpoint (``use_meta=False`` in ``decide``: as if
    no ``.meta`` were beside it, roles and collections too)."""
    ckpt = ckpt.with_meta((decide or {}).get("use_meta", True))
    everything = ckpt.variables_unwarned()
    everything, unproven, refused_raw = decided_pairs(ckpt, everything, decide or {})
    everything, raw_named = raw_marked(ckpt, everything, refused_raw)
    shadowed: set[str] = set()
    if (decide or {}).get("use_meta", True):
        everything = renamed_unwritten(ckpt, everything)
        if unproven is not None:  # a renamed Saver's keys written from shadows: averages of
            # variables, as export names them (review-27-attack-r96 F3)
            everything, shadowed = shadow_marked(ckpt, everything, raw_named)
    meta_frozen = (listed_frozen(ckpt, everything) | renamed_frozen(ckpt, everything)) \
        - raw_named.keys() - shadowed
    if meta_frozen:  # model weights, as export writes them (raw): no shadow expected
        everything = [replace(v, role="weight") if v.name in meta_frozen else v
                      for v in everything]
    wanted = _collections(ckpt, collections) if collections else None
    marked = marked_paths(ckpt)  # a name shown with '?' is selected without it too (u33 F6)
    shown = [v for v in everything
             if (not roles or v.role in roles)
             and (wanted is None or wanted.intersection(v.collections))
             and (match is None or match(v.name, v.path)
                  or v.name in marked and match(v.name, marked[v.name]))]
    if sort == "size":
        shown.sort(key=lambda v: v.nbytes, reverse=True)
    elif ckpt.format in ("v2", "object"):  # a bundle's byte order puts ema/10 before ema/2
        shown.sort(key=lambda v: natural_key(v.name))
    bn = any(v.role == "bn_stat" and v.ema for v in everything)
    averaged_roles = ("weight", "bn_stat") if bn else ("weight",)
    layout = getattr(ckpt.reader, "keras", None)
    frozen = frozenset(k for k, t in (layout.trainable.items() if layout else ()) if not t)
    frozen |= meta_frozen
    expected = [v for v in everything if v.role in averaged_roles and v.name not in frozen]
    evidence = _ema_evidence(layout, ckpt)
    listing = Listing(
        checkpoint=ckpt.path, format=ckpt.format, meta=ckpt.meta_source,
        saved_model=ckpt.location.saved_model,
        variables=shown, total=len(everything), averaged_roles=averaged_roles,
        any_ema=any(v.role == "ema" for v in everything),
        with_shadow=sum(1 for v in expected if v.ema), expected=len(expected),
        by_key={v.name: v for v in everything}, shards=data_shards(ckpt),
        ema_evidence=evidence, frozen=frozen,
        # restore-ema's output needs no statement: its weights are the averages (u25 F3)
        unproven=None if (evidence or {}).get("weights_are_averages") else unproven,
        raw_expected=expected_raw(ckpt, [v.name for v in everything if v.name in frozen]),
        raw_named=raw_named, meta_note=doubt_note(ckpt),
        raw_offer=raw_offer(ckpt, raw_named, decide or {}))
    listing.marked = marked
    listing.weights = _weights(ckpt)
    if ckpt.objects is not None and listing.any_ema:  # what export would warn (u32 F2)
        from .orphan_averages import orphan_warnings

        listing.orphans = orphan_warnings(ckpt, listing.by_key, "export and restore-ema have "
                                          "no weight to give them")
    return listing


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> list:
    """Sort key of ``name`` with its digit runs compared as numbers (``ema/2`` before
    ``ema/10``), text as it is: a bundle's keys in the order a reader counts them (text and
    numbers alternate, so keys compare position by position, ~3 µs a name)."""
    parts: list = _DIGITS.split(name)
    parts[1::2] = map(int, parts[1::2])
    return parts


def list_names(checkpoint: str | os.PathLike | Checkpoint, *,
               match: Callable[[str, str | None], bool] | None = None, sort: str = "name",
               use_ema: bool | None = None) -> list[str]:
    """What ``ckpt list -q`` prints when no role or collection filter is given: the shown
    name (object path, else key) of every variable, the same list as ``path or name`` over
    :func:`list_variables`' ``variables``.

    The keys-only path: no :class:`Variable` objects and no role classification, which cost
    ~20 µs a variable (2 s for 100,000) and decide nothing here.

    Args:
        checkpoint: path or open checkpoint.
        match: keep only names for which ``match(key, object_path)`` is true.
        sort: ``"name"`` (checkpoint order; a bundle's keys with digit runs compared as
            numbers: :func:`natural_key`) or ``"size"`` (largest first, ties in order).
        use_ema: as for :func:`list_variables`.

    Returns:
        `list[str]`: one name per variable shown, in display order.

    Raises:
        ValueError: an unknown sort order.
        CheckpointError: the checkpoint cannot be opened.
    """
    if sort not in ("name", "size"):
        raise ValueError(f"unknown sort order {sort!r}; expected 'name' or 'size'")
    owned = not isinstance(checkpoint, Checkpoint)
    with gc_paused():  # 100,000 entries and names, none in a cycle: see gc_paused
        ckpt = open_checkpoint(checkpoint, use_ema=use_ema) if owned else checkpoint
        try:
            path_of = ckpt.path_of
            aliases = ckpt.aliases()  # a second copy of a variable: shown once
            shown = [(key, path_of(key, entry), entry) for key, entry in ckpt.entries().items()
                     if key not in aliases]
            if match is not None:
                marked = marked_paths(ckpt)  # '?' left out too (u33 F6)
                shown = [s for s in shown if match(s[0], s[1]) or s[0] in marked and match(
                    s[0], marked[s[0]])]
            if sort == "size":  # stable, like list_variables: ties keep checkpoint order
                shown.sort(key=lambda s: s[2].nbytes, reverse=True)
            elif ckpt.format in ("v2", "object"):  # as list_variables: ema/2 before ema/10
                shown.sort(key=lambda s: natural_key(s[0]))
            return [path or key for key, path, _ in shown]
        finally:
            if owned:
                ckpt.close()


def _weights(ckpt: Checkpoint) -> dict | None:
    """What the mark inside a TF checkpoint says of its keys named as variables
    (:func:`~ckpt_tools.tools_mark.with_weights`): ``{"averages": True, "by": <writer>}``
    (``"raw"``: those left as stored), or ``None`` where it says nothing of them."""
    from .weights_mark import raw_weights, weights_averaged

    mark = getattr(ckpt, "tools_mark", None)
    by = weights_averaged(mark)
    if by is None:
        return None
    raw = raw_weights(mark)
    return {"averages": True, "by": by, **({"raw": raw} if raw else {})}


def _ema_evidence(layout, ckpt) -> dict | None:
    """``source`` is ``config`` (config.json), ``layout`` (the optimizer variables' shapes)
    or ``stated`` (``--use-ema``/``--no-use-ema``); ``notes`` say what could not be worked
    out; ``weights_are_averages``: ``True`` where ``ckpt restore-ema`` wrote the file
    (:mod:`~ckpt_tools.restored_mark`, review-17-user-u19 F10). Values never decide."""
    if layout is None:
        return None
    from .restored_mark import checkpoint_mark, refuse_marked_assumed

    mark = checkpoint_mark(ckpt)  # the file read once per open checkpoint
    assumed = refuse_marked_assumed(mark, ckpt.path, strict=False)
    return {"use_ema": layout.use_ema, "source": layout.ema_source or None,
            "detail": layout.ema_evidence, "notes": list(layout.notes) + (
                [assumed] if assumed else []),
            **({"weights_are_averages": True} if mark is not None else {})}


def _collections(ckpt: Checkpoint, names: list[str]) -> set[str]:
    if ckpt.meta is None:
        # an option that does not apply to the file named: one line naming it (exit 2), as
        # --use-ema on a TensorFlow checkpoint, not the parser's usage block (u24 F10)
        raise OptionError(f"{ckpt.path}: --collection needs a .meta graph (TF1), and this "
                          f"checkpoint has none{' read (--no-meta)' if ckpt.meta_unread else ''}"
                          ": select with --role, --grep or --regex instead")
    has = ", ".join(sorted(short_collection(c) for c in ckpt.meta.collections))
    wanted = set()
    for name in names:
        full = COLLECTION_ABBREVIATIONS.get(name, name)
        if full in ckpt.meta.collections:
            wanted.add(full)
        elif full in COLLECTION_ABBREVIATIONS.values():
            # A real collection this graph lacks: nothing selected, not a silent empty list.
            raise VariableNotFoundError(f"{ckpt.path}: the graph has no {name!r} collection; "
                                        f"it has: {has}")
        else:
            raise ValueError(f"unknown collection {name!r}; this graph has: {has}")
    return wanted

