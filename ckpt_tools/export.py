"""Export weights under clean names for converters: NumPy ``.npz``, safetensors, Keras HDF5.

Converters to PyTorch/ONNX read one flat file of weights; handing them the *averaged* weights
is what keeps the accuracy the EMA bought (EfficientNet lost ~3 points top-1 this way). Only
model weights are written (trainable variables and batch-norm statistics): no optimizer slots,
step counters, loss averages or shadow keys (averages of non-scalar tensors, a hand-made batch
norm's statistics, only with ``tensor_averages=True``). Files are written tensor by tensor to a
temporary name, then renamed into place, under the writer discipline of ``formats/_write.py``
(inputs are never replaced, only regular files are, tensor names are checked before becoming
member names, OS errors name the output).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from .checkpoint import Checkpoint
from .errors import NoSelectionError, OutputError, UnsupportedFormatError
from .export_format import check_dtypes, output_format
from .export_plan import plan_export
from .export_record import checkpoint_record, swapped_in, weights_proven
from .export_said import NO_META_STORED, no_meta_raw_warning, no_weights
from .export_writers import H5_WIDEN, NPZ_WIDEN, WRITERS, read_order, written_bytes
from .formats._io import canonical_location, is_url
from .formats._write import (
    Inputs,
    atomic_file,
    check_file_output,
    check_member_name,
    member_name_ok,
)
from .formats.slices import check_partition
from .keras_assumed import RAW_EMA_WARNING
from .no_meta_mark import read_warning
from .object_paths import positional_names_note
from .raw_baked import raw_baked, raw_baked_warning
from .raw_reasons import expected_raw_note
from .restored_mark import (
    checkpoint_mark,
    keras_statements,
    mark_file,
    marked_raw_warnings,
    read_as_marked,
    refuse_marked_assumed,
    warn_marked_stated,
)
from .stated_open import opened_stated, take_statements
from .tensor_averages import OPTION
from .unmoved_averages import (
    raw_unmoved,
    raw_unmoved_warning,
    unmoved_averages,
    unmoved_warning,
)
from .unstored_heads import refuse_nothing_but_unstored
from .wording import agreeing, counted


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_weights` wrote.

    Attributes:
        path: the output file.
        format: ``npz``, ``safetensors`` or ``h5``.
        tensors: output name -> checkpoint key its value came from.
        averaged: output names that hold EMA values.
        nbytes: tensor bytes written.
        warnings: things the user should know (raw weights exported although EMAs exist…).
        raw_expected: output name -> why the file expects it raw beside averaged ones
            (``frozen``, ``non_trainable``: :mod:`ckpt_tools.raw_reasons`), said in ``notes``
            rather than in ``warnings``.
        notes: what is as expected but worth saying.
        assumed: what a Keras file's pairing of the exported averages assumed and the file
            cannot prove (``fit_order``, ``not_swapped``: :mod:`ckpt_tools.keras_assumed`),
            also issued as an :class:`~ckpt_tools.errors.AssumptionWarning`; ``--json``
            carries it as ``"assumed"``.
        stored: for ``--raw`` (``ema=False``) where the file cannot show that its own weights
            are not the averages, how they would be
            (:func:`~ckpt_tools.export_record.swapped_in`); ``--json`` carries it as
            ``"stored"`` and the file's record says ``"values": "stored"``.
        stated_raw: for ``--raw --keys-are-raw``, checkpoint key -> weight of each key
            written as the raw weights only because ``keys_are_raw`` states it (a
            ``Saver(ema.variables_to_restore())``'s); ``--json`` carries it as
            ``"stated_keys_are_raw": {"pairs": ...}``.
        unmoved: output name -> average key of each average exported that holds one value
            in every element while its weight does not: most likely never updated
            (:mod:`ckpt_tools.unmoved_averages`), also in ``warnings``; ``--json`` carries it
            as ``"unmoved_averages"``.
        stated: what the pairing of the exported averages rests on by statement, named as
            ``--json`` names it (``"stated_averages_only"``, ``"averages_only_record"``,
            ``"written_under"``…: :func:`~ckpt_tools.stated_python.stated_fields_of`): the
            caller's ``averages_only``, or what a record or mark of the checkpoint states
            (also issued as a :class:`~ckpt_tools.errors.RecordedStatementWarning`);
            ``to_dict()`` carries its fields.
    """

    path: str
    format: str
    tensors: dict[str, str]
    averaged: tuple[str, ...]
    nbytes: int
    warnings: list[str] = field(default_factory=list)
    raw_expected: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    stored: str | None = None
    stated_raw: dict[str, str] = field(default_factory=dict)
    unmoved: dict[str, str] = field(default_factory=dict)
    stated: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The ``ckpt export --json`` document."""
        done = set(self.averaged)
        return {"output": self.path, "format": self.format, "tensors": dict(self.tensors),
                "averaged": list(self.averaged),
                "raw": [n for n in self.tensors if n not in done],  # never silently raw
                "raw_expected": dict(self.raw_expected),
                "bytes": self.nbytes, "warnings": list(self.warnings), "notes": list(self.notes),
                **({"assumed": list(self.assumed)} if self.assumed else {}),
                **({"stored": self.stored} if self.stored else {}),
                **({"stated_keys_are_raw": {"pairs": dict(self.stated_raw)}}
                   if self.stated_raw else {}),
                **({"unmoved_averages": dict(self.unmoved)} if self.unmoved else {}),
                **self.stated}


def _assumed(ckpt: Checkpoint, plan: dict) -> list:
    """What a Keras file's EMA pairing assumed (:mod:`ckpt_tools.keras_assumed`) for the keys
    ``plan`` (output name -> key) reads, issued as an
    :class:`~ckpt_tools.errors.AssumptionWarning`; nothing for other checkpoints (no swap
    question where it reads only a user EMA's averages: review-28-attack-r104 F5)."""
    from .keras_assumed import keras_assumptions, warn_assumed
    from .user_ema_swap import unswapped_written

    assumed = unswapped_written(ckpt, keras_assumptions(ckpt), plan.values())
    warn_assumed(ckpt, assumed, stacklevel=4)
    return assumed


def _stated(ckpt: Checkpoint, plan: dict) -> dict:
    """What the pairing of the keys ``plan`` reads rests on by statement (a record's or
    mark's, the caller's ``averages_only``), issued as a Python warning
    (:func:`~ckpt_tools.stated_python.warn_stated`: review-33-attack-r128 F5)."""
    from .stated_python import warn_stated

    return warn_stated(ckpt, read=set(plan.values()), stacklevel=4)


# the CLI's words a caller may pass: named as this function's own parameters, not refused
# by ema_map() (which **map_options reach) under its name
_CLI_WORDS = {"force": "overwrite=True", "raw": "ema=False"}


def export_weights(checkpoint, out_path: str | os.PathLike, *, fmt: str | None = None,
                   ema: bool | None = None, include: list[str] | None = None,
                   exclude: list[str] | None = None, rename: list[str] | str | None = None,
                   tensor_averages: bool = False, overwrite: bool = False,
                   progress: Callable[[int], None] | None = None,
                   progress_total: Callable[[int], None] | None = None,
                   member_hint: str | None = None, mark_averages: bool = False,
                   **map_options) -> ExportResult:
    """Writes model weights (EMA values by default) to one ``.npz``/safetensors/HDF5 file.

    Args:
        checkpoint: path or open :class:`Checkpoint`.
        out_path: output file; its extension picks the format unless ``fmt`` is given.
        fmt: ``"npz"``, ``"safetensors"`` or ``"h5"`` (Keras legacy weights layout).
        ema: ``None``/``True`` = averages (a checkpoint without any is refused unless
            ``allow_missing=True``), ``False`` = raw weights.
        include / exclude: globs on output names or checkpoint keys; ``include`` also keeps
            a weight whose exported average's key matches.
        rename: prefix rules ``"old/=new/"`` applied to output names (first match wins).
        tensor_averages: also write the averages of non-scalar tensors that are not variables
            (``tensor_average``: a hand-made batch norm's running statistics) under their keys;
            otherwise they are left out with a warning naming ``--tensor-averages``.
        overwrite: replace an existing output file.
        progress: called with bytes written.
        progress_total: called once, before ``progress`` is, with the bytes ``progress`` will
            count in all (the tensors written, not the whole checkpoint's).
        member_hint: the advice given when tensor names cannot be member names (what the
            caller's options allow); by default export's ``--rename``/``--exclude``.
        mark_averages: ``restore-ema --format h5``: record in the ``.h5`` that its weights
            are the averages (:mod:`~ckpt_tools.restored_mark`), where some are and none
            is left raw by ``allow_missing``.
        **map_options: passed to :func:`ckpt_tools.ema_map` (``ema_name``, ``use_meta``…,
            and the file statements ``use_ema``, ``optimizer``, ``trainable``…).

    Returns:
        `ExportResult`.

    Raises:
        EmaError: averages are missing (and neither ``ema=False`` nor ``allow_missing``), or
            cannot be paired with their variables.
        OutputError: output exists (and not ``overwrite``), is an input or not a regular
            file, cannot be written, or a tensor name cannot be a member name.
        WriteError: an OS error while writing (disk full…); nothing is left behind.
        NoSelectionError: ``include``/``exclude`` leave no weight to export (exit 3).

    Example:
        >>> export_weights("train/", "model_ema.safetensors")  # doctest: +SKIP
    """
    for word, said in _CLI_WORDS.items():  # not ema_map's TypeError (review-24-user-u26 F12)
        if word in map_options:
            raise TypeError(f"export_weights() got an unexpected keyword argument {word!r} "
                            f"(the CLI's --{word} is {said} here)")
    # one glob given as a string is one glob, never its characters ('*' would match all)
    include = [include] if isinstance(include, str) else include
    exclude = [exclude] if isinstance(exclude, str) else exclude
    out_path = canonical_location(out_path)  # checked and written in one spelling
    fmt = output_format(out_path, fmt)
    if is_url(out_path):
        return _export_to_url(checkpoint, out_path, fmt=fmt, ema=ema, include=include,
                              exclude=exclude, rename=rename, overwrite=overwrite,
                              progress=progress, progress_total=progress_total,
                              mark_averages=mark_averages,
                              **map_options)
    opened = opened_stated(checkpoint, take_statements(map_options))  # use_ema=... (CLI's)
    ckpt = opened.__enter__()
    try:
        marked_note, marked_stated = None, {}
        if ema is None and read_as_marked(ckpt):  # restore-ema's output (u19 F10): as stored
            ema = False
            marked_note = refuse_marked_assumed(checkpoint_mark(ckpt), ckpt.path,
                                                bool(map_options.get("strict")))
            marked_stated = warn_marked_stated(ckpt, stacklevel=3)  # what it rested on (F3)
        inputs = Inputs(ckpt.input_files())
        weights: dict[str, str] = {}
        expected: dict[str, str] = {}
        notes: list[str] = []
        stated_raw: dict[str, str] = {}
        try:
            plan, averaged, warnings = plan_export(
                ckpt, ema=ema, include=include, exclude=exclude, rename=rename,
                weights_out=weights, tensor_averages=tensor_averages, expected_out=expected,
                notes_out=notes, stated_out=stated_raw, **map_options)
        except OutputError as exc:  # a --rename collision: name the files (review-22 u24 F5)
            raise OutputError(f"{ckpt.path} -> {os.fspath(out_path)}: {exc}") from None
        warnings = marked_raw_warnings(ckpt, warnings) if ema is False else warnings
        if ema is not False and averaged and (map_options.get("use_meta") is False
                                              or getattr(ckpt, "graph_declined", False)):
            # paired by names under --no-meta past a graph of its prefix doubting them (s33c)
            said = read_warning(ckpt.with_meta(False))
            warnings += [said] if said else []
        if ema is False and weights_proven(ckpt):  # a TF output of ours: its plain names
            # hold the averages, as the summary says (ExportResult.stored), not "although
            # the checkpoint has EMA shadows" (r128 F1); where a statement or a filter
            # decided what they hold, the warnings say which
            warnings = [w for w in warnings if w != RAW_EMA_WARNING]
        # averages that still hold their initial values (a re-save that restored only the
        # weights): said loudly, never proven (review-25-user-u27 F5); not over a URL, where
        # reading them ahead of the writer's windows costs a request each
        unmoved = (unmoved_averages(ckpt, plan, averaged, weights)
                   if averaged and not is_url(ckpt.path) else {})
        if unmoved:
            warnings.append(unmoved_warning(unmoved, ckpt, weights, len(averaged)))
        if ema is False and RAW_EMA_WARNING in warnings and not is_url(ckpt.path) and (
                moved := raw_unmoved(ckpt, plan)):  # not "drop --raw" then (r89 F4)
            warnings = [raw_unmoved_warning(moved, ckpt) if w == RAW_EMA_WARNING else w
                        for w in warnings]
        unread = None  # --raw --no-meta of keys named as shadows: which hold what is unread
        if ema is False and map_options.get("use_meta") is False:  # nor with the graphs set
            said = no_meta_raw_warning(ckpt.with_meta(False))  # aside (u30 F5; r112 F3)
            unread = NO_META_STORED if RAW_EMA_WARNING in warnings else None
            warnings = [said if w == RAW_EMA_WARNING else w for w in warnings]
        if ema is False and RAW_EMA_WARNING in warnings and not is_url(ckpt.path):
            # the plain names hold what keys read as averages hold (a restore-ema output):
            # not "drop --raw to export the averages" (note/s32j)
            baked, total = raw_baked(ckpt, plan)
            if baked:
                warnings = [raw_baked_warning(baked, total) if w == RAW_EMA_WARNING else w
                            for w in warnings]
        notes += [marked_note] if marked_note else []
        positional = positional_names_note(ckpt.objects, plan, weights)
        if positional:  # two towers' proj/kernel: named by position, no layer name recorded
            notes.append(positional)
        if not plan and (include is not None or exclude):
            hint = (f"; they select averages of tensors, which {OPTION} exports" if any(
                OPTION in w for w in warnings) else "")
            raise NoSelectionError(f"{ckpt.path}: the name filters select no weight to "
                                   f"export{hint}")
        if fmt == "h5" and set(averaged) - set(weights):
            # the format cannot hold them (exit 5, as for a dtype it cannot hold), not an
            # output refused (review-16-attack-r32 F8)
            raise UnsupportedFormatError(
                f"{ckpt.path}: Keras' HDF5 weights layout has no layer to hold "
                f"averages of tensors ({OPTION}): write .npz or .safetensors")
        if not plan:  # only counters, hyperparameters, slots or strings: nothing to export
            # or only keys named as averages of unstored variables, no .meta (r72 F8)
            refuse_nothing_but_unstored(ckpt, map_options.get("use_meta", True))
            raise OutputError(f"{ckpt.path}: no weights to export: {no_weights(ckpt, ema)}")
        # after the pairing: its refusal (exit 6) says more than "--out exists" (u16 F3)
        check_file_output(out_path, inputs, overwrite, create_parents=True)
        bad = [(name, src) for name, src in plan.items() if not member_name_ok(name, fmt)]
        if bad:  # every bad name at once: the user fixes them in one run, not one per run
            try:
                check_member_name(*bad[0], fmt=fmt, hint=member_hint,
                                  others=[name for name, _ in bad[1:]])
            except OutputError as exc:  # name the files: which input, which output
                raise OutputError(f"{ckpt.path} -> {os.fspath(out_path)}: {exc}") from None
        for src in plan.values():
            entry = ckpt.entry(src)
            if entry.slices:
                check_partition(src, tuple(int(d) for d in entry.shape), entry.slices)
        check_dtypes(ckpt, plan, fmt)
        widened = {n: ckpt.entry(s).dtype_name for n, s in plan.items()
                   if ckpt.entry(s).dtype_name in (NPZ_WIDEN if fmt == "npz" else
                                                   H5_WIDEN if fmt == "h5" else {})}
        if widened:
            kinds = ", ".join(sorted(set(widened.values())))
            wide = ", ".join(sorted({NPZ_WIDEN[d] for d in widened.values()}))
            where = ("the archive comment (zipfile.ZipFile(path).comment) lists them" if
                     fmt == "npz" else "each dataset's 'dtype' attribute names the original")
            warnings.append(f"{fmt} has no {kinds}: {counted(len(widened), 'tensor')} "
                            f"{agreeing(len(widened), 'is', 'are')} stored as {wide} "
                            f"(exact, no value changes); {where}")
        # Over a URL the tensors to export are fetched ahead in the order the writer reads
        # them (the weights or their averages only: not back to back in the shards).
        # refuses an .h5 whose layers, or a layer's weights, Keras would fill otherwise
        order = read_order(plan, fmt, ckpt, weights)
        ckpt.plan_reads(order)
        record = checkpoint_record(  # said in the file, with what its pairing rests on
            ckpt, plan, averaged, raw=ema is False, apply_order=map_options.get("apply_order"),
            no_meta=map_options.get("use_meta") is False)
        if unread and not averaged and record.get("values") == "raw":
            # the keys as stored, the way out the swap refusals offer: the averages where a
            # swapping Saver wrote them, as its own graph or mark may say (r128 F4)
            record = {"values": "stored"}
        if progress_total:  # the bytes written, not the file's (review-29-user-u31 F1)
            progress_total(written_bytes(ckpt, plan, fmt, weights))
        with atomic_file(out_path, inputs, overwrite=overwrite, create_parents=True) as tmp:
            nbytes = (WRITERS[fmt](ckpt, plan, tmp, progress, weights, record)
                      if fmt == "h5" else WRITERS[fmt](ckpt, plan, tmp, progress, record))
            if fmt == "h5" and mark_averages and averaged and not map_options.get(
                    "allow_missing"):
                from .keras_assumed import keras_assumptions  # values compared once: memo
                from .user_ema_swap import unswapped_written

                mark_file(tmp, [a.name for a in unswapped_written(  # r40 F1
                    ckpt, keras_assumptions(ckpt), plan.values())],
                    keras_statements(ckpt))  # what it rested on (r128 F3)
        note = expected_raw_note(expected, str)
        if getattr(ckpt.reader, "keras", None) is not None:  # aa/0 beside zz/kernel (r26 F6)
            from .keras_index_names import index_named_layers, index_named_note

            layers = index_named_layers(plan)
            notes = notes + ([index_named_note(layers)] if layers else [])
        assumed = _assumed(ckpt, plan) if averaged else []
        stored = (swapped_in(ckpt) or (unread if record.get("values") == "stored" else None)
                  if ema is False and not averaged else None)
        return ExportResult(out_path, fmt, plan, tuple(averaged), nbytes, warnings, expected,
                            [note] * bool(note) + notes, [a.name for a in assumed], stored,
                            stated_raw, unmoved,
                            _stated(ckpt, plan) if averaged else marked_stated)
    finally:
        opened.__exit__()


def _export_to_url(checkpoint, url: str, *, overwrite: bool, **options) -> ExportResult:
    """Exports into a local temporary directory, then uploads the one file (an object store
    shows an object whole or not at all); the temporary copy is removed either way."""
    import dataclasses
    import posixpath

    from .formats import remote
    from .formats.write_locks import local_stage

    # not the last command's session (its listings, the objects it read): a path is opened
    # below (a URL in a session of its own); an open checkpoint keeps the one it was read in
    remote.begin_unless_read(getattr(checkpoint, "path", None))
    # Bucket, writer lock and the output's name are checked before any tensor is read.
    with remote.reserved(remote.url_parent(url), overwrite=overwrite), \
            local_stage("export") as tmp:
        remote.check_new(remote.url_parent(url), [posixpath.basename(url)],
                         overwrite=overwrite, whole_directory=False)
        local = os.path.join(tmp, posixpath.basename(url))
        result = export_weights(checkpoint, local, **options)
        remote.upload([local], remote.url_parent(url), overwrite=overwrite,
                      whole_directory=False)
    return dataclasses.replace(result, path=url)
