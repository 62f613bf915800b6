"""``open_checkpoint`` and :class:`Checkpoint`: the user-facing model of one checkpoint.

A checkpoint is found from whatever path the user typed by :func:`ckpt_tools.locate.locate`;
this module reads it: its entries, tensors (mapped and streamed, CRC-checked), variables
with their roles and EMA shadows, the ``.meta`` graph and the TF2 object graph.

Its parts live beside it: ``checkpoint_tensors`` (stored keys and tensors, the base class),
``checkpoint_paths`` (the keys' readable object paths, a base class),
``checkpoint_graph`` (the ``.meta`` graph and the doubts of other graphs of its prefix; its
views without a graph, a base class),
``checkpoint_variables`` (the variable list, a base class), ``checkpoint_statements``
(refusals of statements the file cannot bear, and those a run record makes) and
``checkpoint_files`` (the run history beside it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from . import tfk_stated as _tfk_stated
from .checkpoint_files import history_files
from .checkpoint_graph import Doubt, GraphViews, read_graph
from .checkpoint_paths import KeyPaths
from .checkpoint_statements import (
    refuse_tf_statements,
    refuse_unfit_statements,
    vouched_statements,
)
from .checkpoint_tensors import CHUNK_BYTES as CHUNK_BYTES  # re-exported: stats, diff
from .checkpoint_tensors import StoredTensors
from .checkpoint_variables import VariableViews
from .errors import CheckpointError, CorruptCheckpointError, OptionError, UnprovenPairingError
from .formats import open_reader
from .formats.dtypes import STRING
from .formats.meta import MetaGraph
from .formats.objgraph import (
    OBJECT_GRAPH_KEY,
    ObjectGraph,
    parse_object_graph,
)
from .formats.savedmodel import saved_model_extras
from .locate import Location, errors_in, locate
from .tools_mark import names_doubted, take_mark
from .variable import Variable

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from .formats import Reader


class Checkpoint(StoredTensors, KeyPaths, GraphViews, VariableViews):
    """An open checkpoint: metadata is read up front, tensor data only on request.

    Use :func:`open_checkpoint` to create one. Usable as a context manager.

    Attributes:
        path: the checkpoint prefix (V2) or file (V1).
        format: ``"v2"``, ``"v1"`` or ``"object"`` (a V2 bundle with a TF2 object graph).
        meta: the :class:`~ckpt_tools.formats.meta.MetaGraph` from the ``.meta`` beside it
            (or, for a TF1 SavedModel, from its ``saved_model.pb``), or ``None``.
        meta_source: the file ``meta`` was read from, or ``None``.
        meta_unread: the graph file beside it that ``meta=False`` (``--no-meta``) leaves
            unread, or ``None``: nothing reads it then (see :meth:`with_meta`).
        meta_doubt: where it was saved without its own ``.meta``, the same-prefix ``.meta``
            files of other checkpoints whose save op writes its keys otherwise than their
            names say, ``((path, key, sources), ...)`` (:mod:`~ckpt_tools.meta_sibling`): they
            only refuse the pairing by names, never stand for its graph; ``meta_stated``:
            the one of them read as its graph only because ``keys_are_raw`` is stated
            (:func:`~ckpt_tools.meta_sibling.stated_graph`), else ``None``.
        meta_unknown: opened with ``defer_unknown``, the refusal (exit 6, ``--no-meta``)
            that opening otherwise raises where whether other graphs of its prefix doubt its
            names cannot be known (``http(s)://`` has no listing): every pairing raises it
            (``ema_map``, ``decide_pairing``), its tensors are read; else ``None``.
        objects: the TF2 :class:`~ckpt_tools.formats.objgraph.ObjectGraph`, or ``None``.
    """

    def __init__(self, location: Location, *, verify: bool = True, meta: bool = True,
                 use_ema: bool | None = None, trainable: Sequence[str] | None = None,
                 not_swapped: bool = False, fit_order: bool = False,
                 averages_only: bool = False, optimizer: str | None = None,
                 keys_are_raw: bool = False, saver_def_wrote: bool = False,
                 defer_unknown: bool = False):
        self.location = location
        self.path = location.prefix
        if fit_order and trainable:
            raise OptionError(f"{location.prefix}: --fit-order (Python: fit_order=) states "
                              "fit()'s order, --trainable (trainable=) another: give one")
        # What it was opened with, so that reopened() keeps the caller's choices.
        self._options = {"verify": verify, "meta": meta, "use_ema": use_ema,
                         "trainable": trainable, "not_swapped": not_swapped,
                         "fit_order": fit_order, "averages_only": averages_only,
                         "optimizer": optimizer, "keys_are_raw": keys_are_raw,
                         "saver_def_wrote": saver_def_wrote, "defer_unknown": defer_unknown}
        from .formats.keras.stated_optimizer import parse as parse_optimizer

        stated_optimizer = parse_optimizer(optimizer)  # OptionError (exit 2) if not valid
        with errors_in(location.prefix):
            self._reader: Reader = open_reader(location.format, location.prefix, verify=verify)
            # our writers' record inside the bundle (tools_mark): hidden from the keys, kept
            try:
                self.tools_mark: dict | None = take_mark(self._reader, location.prefix)
            except CheckpointError:
                self._reader.close()
                raise
            if (use_ema is not None or trainable or stated_optimizer) and getattr(
                    self._reader, "keras", None) is not None:
                self._reader.restate_use_ema(use_ema, trainable=trainable,
                                             optimizer=stated_optimizer)
            try:
                refuse_tf_statements(location.prefix, getattr(self._reader, "keras", None),
                                     use_ema=use_ema, stated_optimizer=stated_optimizer)
            except CheckpointError:
                self._reader.close()
                raise
        # The caller's statements that a Keras file was not saved swapped by SwapEMAWeights
        # (ckpt_tools.keras_assumed: then "not_swapped" is stated, not assumed) and that fit()
        # built the optimizer (model.trainable_variables: then "fit_order" is stated, not
        # assumed, and values do not check it); or ckpt train's run record beside a Keras file
        # it wrote states them (its path, else None: checkpoint_statements)
        self.not_swapped_record, self.fit_order_record = vouched_statements(
            location.prefix, getattr(self._reader, "keras", None), not_swapped=not_swapped,
            fit_order=fit_order, trainable=trainable)
        self.not_swapped = bool(not_swapped) or self.not_swapped_record is not None
        self.fit_order = bool(fit_order) or self.fit_order_record is not None
        self.format = location.format
        # its graph, and the doubts of other graphs of its prefix (checkpoint_graph)
        graph = read_graph(location, self._reader, self.tools_mark, meta=meta,
                           not_swapped=not_swapped, keys_are_raw=keys_are_raw,
                           defer_unknown=defer_unknown)
        self.meta: MetaGraph | None = graph[0]
        self.meta_source: str | None = graph[1]  # the file the collections came from
        self.meta_doubt: Doubt = graph[2]
        self.meta_unknown: UnprovenPairingError | None = graph[3]
        self.meta_stated: str | None = graph[4]
        self.meta_unread = None if meta else location.meta_path or location.saved_model
        self._view_of: Checkpoint | None = None  # see with_meta
        self.objects: ObjectGraph | None = None
        self._qualified: dict[str, str] | None = None  # see KeyPaths
        self._clashing: set[str] | None = None  # see path_of
        if OBJECT_GRAPH_KEY in self._reader.entries:
            self.format = "object"
            graph = self._reader.entries[OBJECT_GRAPH_KEY]
            if graph.dtype != STRING or graph.num_elements != 1:  # bytes(int) would allocate
                raise CorruptCheckpointError(f"{OBJECT_GRAPH_KEY} is not a scalar string",
                                             path=self.path)
            with errors_in(self.path):
                raw = self._reader.read(OBJECT_GRAPH_KEY)
            self.objects = parse_object_graph(bytes(raw.reshape(-1)[0]), self.path)
        try:
            refuse_unfit_statements(location.prefix, self._reader, self.objects, self.meta_source,
                                    not_swapped=not_swapped, fit_order=fit_order,
                                    averages_only=averages_only,
                                    doubted=bool(self.meta_doubt) or bool(
                                        names_doubted(self.tools_mark)),
                                    keys_are_raw=keys_are_raw)
            if saver_def_wrote:  # the .meta's other Savers then go unread (saver_def_stated)
                from .restored_record import vouching_record
                from .saver_def_stated import refuse_unfit_saver_def

                # its files' layout against the SaverDef's Saver (r101 F1, F2): not where our
                # record vouches for it (restore-ema's output, written by our writer)
                ours = vouching_record(location.prefix)
                refuse_unfit_saver_def(location.prefix, None if self.meta_stated else
                                       self.meta_source, self.objects, self._reader.entries,
                                       not_swapped=not_swapped, reader=None if ours and
                                       ours[1].get("saver_def_wrote") else self._reader,
                                       saver_version=self.meta.saver_version
                                       if self.meta is not None else 0, fmt=self.format)
        except CheckpointError:
            self._reader.close()
            raise
        # The caller's statement that TF1 keys named as averages whose variable is not stored
        # hold averages (a Saver of ema.average(v)), where no .meta records it (raw_shadows).
        self.averages_only = bool(averages_only)
        # ... or that such keys a training Saver(ema.variables_to_restore()) wrote from the
        # model variables hold the raw weights, not averages an evaluation graph restored
        # and saved again: export --raw writes them only then (raw_exports)
        self.keys_are_raw = bool(keys_are_raw)
        # ... or that the Saver whose SaverDef its own .meta records wrote it: that Saver's
        # save op alone is read, not the graph's other Savers of its keys (saver_def_stated)
        self.saver_def_wrote = bool(saver_def_wrote)
        # ... or restore-ema's record beside its output states it, or --averages-only's
        # caveat (restored_record): read before anything reads the .meta's save ops
        self.restored_record: tuple[str, dict] | None = None
        from .restored_record import read_record

        read_record(self, bool(saver_def_wrote), bool(not_swapped))  # (its mark: s3:// too)
        # A custom loop's order, stated for a tf_keras model's TF-format save (tfk_stated).
        self.stated_order: list[str] | None = None
        self.stated_pairs: dict[str, str] = {}
        if trainable and self._reader.keras is None:
            try:
                self.stated_order = _tfk_stated.resolve(self.path, self.objects,
                                                        self._reader.entries, trainable,
                                                        self.path_of)
            except CheckpointError:
                self._reader.close()
                raise
        self._variables: list[Variable] | None = None
        self._fragment_alias: dict[str, str] | None = None  # see stored_key()
        self._ema_names: list[str] | None = None  # see ema_names()
        self._memo: dict = {}  # see memo()

    def memo(self, key, compute):
        """Returns ``compute()``, computed once per open checkpoint and ``key``: a fact
        derived from what the file stores (and the roles :meth:`variables` gives) that
        several steps of one command need, such as the pairs a stated order gives.

        Returns:
            what ``compute()`` returned the first time (callers must not change it).
        """
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def files(self) -> list[str]:
        """Returns the files this checkpoint consists of (index, data shards, meta)."""
        files = self._reader.files()
        for extra in (self.location.meta_path, self.location.saved_model):
            if extra:
                files.append(extra)
        return files

    def input_files(self) -> list[str]:
        """Returns every file a command using this checkpoint reads: :meth:`files` plus the
        ``checkpoint`` state file that led to it and a SavedModel's extras (its assets, which
        a SavedModel output copies): writers refuse to replace any of them, or to write into
        a directory holding one."""
        files = self.files()
        if self.location.saved_model:
            files += saved_model_extras(self.location.saved_model)
        if self.location.state_file:
            files.append(self.location.state_file)
        files += [path for path, _, _ in self.meta_doubt]
        return files + history_files(self._reader.files())

    @property
    def name(self) -> str:
        """The checkpoint's own name (``model.ckpt-1000``), the default name of outputs."""
        return self.location.name

    @property
    def reader(self):
        """The format reader (``BundleReader`` or ``V1Reader``), for low-level access."""
        return self._reader

    def reopened(self, **changes) -> Checkpoint:
        """The same checkpoint opened again with the options it was opened with, except
        ``changes`` (e.g. a ``trainable`` statement only known once the file is read).

        Returns:
            `Checkpoint`: a new open checkpoint; the caller closes it (this one stays open).

        Raises:
            CheckpointError: as :func:`open_checkpoint`.

        Example:
            >>> import ckpt_tools
            >>> with ckpt_tools.open_checkpoint("fixtures/custom_ema_name", meta=False) as c:
            ...     with c.reopened() as again:
            ...         again.meta is None
            True
        """
        return Checkpoint(self.location, **{**self._options, **changes})

    def close(self) -> None:
        if self._view_of is None:  # a with_meta() view shares the reader of its checkpoint
            self._reader.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Checkpoint({self.path!r}, format={self.format!r}, variables={len(self)})"


def open_checkpoint(path: str | os.PathLike, *, verify: bool = True,
                    meta: bool = True, use_ema: bool | None = None,
                    trainable: Sequence[str] | None = None,
                    not_swapped: bool = False, fit_order: bool = False,
                    averages_only: bool = False, optimizer: str | None = None,
                    keys_are_raw: bool = False, saver_def_wrote: bool = False,
                    defer_unknown: bool = False) -> Checkpoint:
    """Opens a TensorFlow checkpoint without importing TensorFlow.

    Args:
        path (`str`): a training directory, checkpoint prefix, or ``.index``/``.data-*``/``.meta``
            file, a V1 checkpoint file or shard, a SavedModel (or TF Serving model) directory
            or its ``saved_model.pb``, or a Keras ``.keras``/``.h5`` file.
        verify (`bool`, *optional*, defaults to `True`): check CRC32C of index blocks and of each
            tensor read (a ``.keras`` archive: its weights member's zip CRC-32, before the
            first value is read).
        meta (`bool`, *optional*, defaults to `True`): read the ``.meta`` graph beside the
            checkpoint, when there is one, for collection membership.
        use_ema (`bool`, *optional*): Keras files only: state whether the optimizer ran with
            ``use_ema=True`` (a bare ``.weights.h5`` may not tell; ``ckpt --use-ema``); a
            statement that contradicts the file's config is refused. Other formats refuse it
            (``OptionError``).
        trainable (`list[str]`, *optional*): Keras 3 files only: the weights the optimizer was
            built with, in ``model.trainable_variables`` order, as ``ckpt list`` names them (a
            layer name stands for its weights): what a bare ``.weights.h5`` does not record
            (frozen layers, the order of a subclassed model's sublayers); ``ckpt --trainable``.
            Other formats refuse it (``OptionError``).
        not_swapped (`bool`, defaults to `False`): Keras files only: state that the file was
            not saved by ``ModelCheckpoint`` after ``SwapEMAWeights(swap_on_epoch=True)``, so
            its EMA copies are the averages (``ckpt --not-swapped``; what ``--strict``
            otherwise refuses as assumed: see :mod:`ckpt_tools.keras_assumed`); likewise a
            TF checkpoint of a Keras 3 optimizer's copies or of averages kept as optimizer
            slots (not saved after an EMA optimizer's ``swap_weights()``:
            :mod:`ckpt_tools.swap_assumed`); other TF checkpoints refuse it.
        fit_order (`bool`, defaults to `False`): Keras files only: state that ``fit()``
            built the optimizer (from ``model.trainable_variables``), so EMA copies of weights
            of equal shapes pair in the model's order by statement, not assumption
            (``ckpt --fit-order``); not with ``trainable``.
        averages_only (`bool`, defaults to `False`): TF1 checkpoints only: state that the
            keys named as averages whose variable is not stored hold averages (a Saver of
            ``ema.average(v)``), not the raw values a Saver of
            ``ema.variables_to_restore()`` writes under those names, where no ``.meta``
            records which Saver wrote them (``ckpt --averages-only``; a ``.meta`` that records
            it decides). Other formats refuse it (``OptionError``).
        keys_are_raw (`bool`, defaults to `False`): TF1 checkpoints only: state that the
            keys named as averages that a ``Saver(ema.variables_to_restore())`` wrote from
            the model variables themselves (no key holds those variables) hold the raw
            weights, as a TRAINING graph saves them, not the averages an evaluation graph
            restored and saved again, which the file cannot tell apart; ``export --raw``
            (``ema=False``) writes them only then (``ckpt export --raw --keys-are-raw``).
            Other formats refuse it, and so does ``averages_only`` (``OptionError``).
        saver_def_wrote (`bool`, defaults to `False`): TF1 checkpoints with their own
            ``.meta`` only: state that the Saver whose ``SaverDef`` the ``.meta`` records
            wrote the checkpoint (``ckpt --saver-def-wrote``), where other Savers of its graph
            write the same keys from other variables (a ``MonitoredTrainingSession``'s
            ``Scaffold`` Saver beside a swapping Saver), which nothing in the file tells
            apart: only that Saver's save op is read (:mod:`ckpt_tools.saver_def_stated`).
            Refused where it decides nothing or the file contradicts it (``OptionError``).

        optimizer (`str`, *optional*): a bare Keras 3 ``.weights.h5`` only: state the
            optimizer's Keras built-in class and the options on that add variables,
            ``"CLASS[:OPTION[,OPTION]]"`` (``"adam:amsgrad"``, ``"sgd:momentum"``,
            ``"adam:gradient_accumulation"``; ``ckpt --optimizer``), which the file records
            only by the optimizer's name; its layout is then that class' build order.
        defer_unknown (`bool`, defaults to `False`): for a caller that reads tensors, not
            pairs: a TF1 checkpoint without its own ``.meta`` whose other graphs of its
            prefix cannot be known (``http(s)://``: no listing) opens, the refusal that
            opening otherwise raises kept as ``meta_unknown``; no average is shown paired
            (``variables()``), and every pairing raises it (exit 6, ``--no-meta``).

    Returns:
        `Checkpoint`: metadata loaded, tensor data read lazily.

    Raises:
        CheckpointNotFoundError: nothing checkpoint-like at ``path``.
        CorruptCheckpointError: the files are malformed.
        VariableNotFoundError: a name in ``trainable`` matches no weight, or matches weights
            another name already matched.
        OptionError: ``use_ema``, ``trainable`` (but for a tf_keras model's TF-format save,
            :mod:`ckpt_tools.tfk_stated`), ``not_swapped`` or ``fit_order`` given for a
            TensorFlow checkpoint, or ``fit_order`` with ``trainable``, or
            ``averages_only`` or ``keys_are_raw`` for a TF2 or Keras one, or both of them,
            or ``saver_def_wrote`` where it cannot apply (exit 2).
        EmaError: ``use_ema`` contradicts the Keras file's config (exit 6).

    Example:
        >>> import ckpt_tools
        >>> with ckpt_tools.open_checkpoint("fixtures/linear_v2") as ckpt:
        ...     [v.name for v in ckpt.variables() if v.role == "ema"]
        ['W/ExponentialMovingAverage', 'b/ExponentialMovingAverage']
    """
    return Checkpoint(locate(path), verify=verify, meta=meta, use_ema=use_ema,
                      trainable=trainable, not_swapped=not_swapped, fit_order=fit_order,
                      averages_only=averages_only, optimizer=optimizer,
                      keys_are_raw=keys_are_raw, saver_def_wrote=saver_def_wrote,
                      defer_unknown=defer_unknown)
