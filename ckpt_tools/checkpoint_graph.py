"""The graph a :class:`~ckpt_tools.checkpoint.Checkpoint` is read with, and its views.

:func:`read_graph` reads the ``.meta`` beside a checkpoint (or a TF1 SavedModel's
``saved_model.pb``) and what other graphs of its prefix say of it: the same-prefix ``.meta``
files that doubt its names (:mod:`~ckpt_tools.meta_sibling`), a marked output read through a
graph of other bytes (:mod:`~ckpt_tools.own_graph_mark`), a mark whose doubt no graph beside
it carries now (:mod:`~ckpt_tools.tools_mark`). :func:`refuse_or_defer` is the one rule for
those doubts: refused when opening, or kept as ``meta_unknown`` under ``defer_unknown``.

:class:`GraphViews` is the part of :class:`~ckpt_tools.checkpoint.Checkpoint` that answers
which graph file it is read with and makes its view without one (``--no-meta``).
"""

from __future__ import annotations

from .doubt_refusal import names_doubted_refusal, strict_doubt
from .errors import CheckpointError, CorruptCheckpointError, UnprovenPairingError
from .formats.meta import MetaGraph, meta_decode_error, read_meta_graph
from .formats.objgraph import OBJECT_GRAPH_KEY
from .formats.savedmodel import read_saved_model
from .locate import Location
from .tools_mark import names_doubted

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .formats import Reader


Doubt = tuple[tuple[str, str, tuple[str, ...]], ...]  # Checkpoint.meta_doubt
Graph = tuple["MetaGraph | None", "str | None", Doubt, "UnprovenPairingError | None", "str | None"]


def refuse_or_defer(exc: UnprovenPairingError, reader: Reader,
                    defer_unknown: bool) -> UnprovenPairingError:
    """A doubt of the pairing by names that opening refuses, unless the caller reads
    tensors, not pairs (``defer_unknown``: stats, show, diff).

    Returns:
        ``exc``, to be kept as ``meta_unknown``, where ``defer_unknown``.

    Raises:
        UnprovenPairingError: ``exc``, after closing ``reader``, where not ``defer_unknown``.
    """
    if not defer_unknown:
        reader.close()
        raise exc
    return exc


def read_graph(location: Location, reader: Reader, tools_mark: dict | None, *, meta: bool,
               not_swapped: bool, keys_are_raw: bool, defer_unknown: bool) -> Graph:
    """Reads the graph of the checkpoint at ``location`` (opened as ``reader``, its mark
    ``tools_mark``) and the doubts of other graphs of its prefix.

    Returns:
        ``(meta, meta_source, meta_doubt, meta_unknown, meta_stated)``, the
        :class:`~ckpt_tools.checkpoint.Checkpoint` attributes of those names: the graph
        (``None`` where ``meta`` is false or there is none), the file it came from, the
        sibling ``.meta`` files that doubt its names, the refusal kept under
        ``defer_unknown``, and the graph read only because ``keys_are_raw`` is stated.

    Raises:
        CorruptCheckpointError: its ``.meta`` cannot be decoded (naming ``--no-meta``).
        UnprovenPairingError: a graph doubts its names, or whether one does cannot be
            known, and not ``defer_unknown`` (``reader`` is closed).
        CheckpointError: a graph of its prefix cannot be read (``reader`` is closed).
    """
    graph: MetaGraph | None = None
    source: str | None = None  # the file the collections came from
    if meta and location.meta_path:
        try:
            graph = read_meta_graph(location.meta_path)
        except CorruptCheckpointError as e:  # name the way past it (review-20-user-u22 F8)
            raise meta_decode_error(location.meta_path, e)  # noqa: B904 (the same error)
    elif meta and location.saved_model:
        graph = read_saved_model(location.saved_model).collections_graph()
    if graph is not None:
        source = location.meta_path or location.saved_model
    # a marked output (names doubted) read through a graph of other bytes than the one it
    # was written with (an eval graph placed beside it): that graph proves nothing of its
    # keys (review-29-attack-r107 F2)
    unknown: UnprovenPairingError | None = None
    # a bake's mark whose copied graph no longer says what its keys hold: no statement
    # about its inputs' Saver (--not-swapped) reads its names alone (review-32-attack-r117
    # F8; --no-meta: no_meta_own.refuse_strict_mark)
    strict = strict_doubt(tools_mark)  # or averages crossed (review-32-attack-r119)
    if graph is not None and names_doubted(tools_mark) and (not not_swapped or strict):
        from .own_graph_mark import refuse_foreign_graph

        foreign = refuse_foreign_graph(location.prefix, str(source), tools_mark)
        if foreign is not None:
            unknown = refuse_or_defer(foreign, reader, defer_unknown)
    # Saved without its own .meta (write_meta_graph=False after the first save): the
    # same-prefix .meta files whose save op writes exactly its keys from other variables
    # than their names (meta_sibling). Nothing tells which run wrote them, so they never
    # stand for its graph; they refuse its pairing by names (review-24-attack-r78).
    doubt: Doubt = ()
    tf1 = getattr(reader, "keras", None) is None and not location.saved_model
    if meta and graph is None and tf1 and OBJECT_GRAPH_KEY not in reader.entries:
        from .meta_sibling import doubting

        try:  # (a graph of its prefix too large to read is refused, not passed over)
            doubt = doubting(location.prefix, reader.entries)
        except UnprovenPairingError as exc:  # whether a graph doubts it cannot be known
            unknown = refuse_or_defer(exc, reader, defer_unknown)
        except CheckpointError:
            reader.close()
            raise
        # ckpt average wrote it from inputs a swapping Saver's graph doubts (its mark says
        # so) and no graph beside it doubts it now: renamed, copied without the graph,
        # s3:// (review-28-attack-r105 F1-F3): refused as meta_unknown is
        if names_doubted(tools_mark) and not doubt and unknown is None \
                and (not not_swapped or strict):
            unknown = refuse_or_defer(names_doubted_refusal(location.prefix, tools_mark),
                                      reader, defer_unknown)
    # ... where the caller states keys_are_raw, the one graph of them showing a
    # Saver(ema.variables_to_restore()) of exactly its keys is read, so that export --raw
    # knows which keys the statement speaks of: the statement decides, never the graph
    # alone (review-25-attack-r81 F9)
    stated_source: str | None = None
    if doubt and keys_are_raw:
        from .meta_sibling import stated_graph

        stated = stated_graph(location.prefix, reader.entries)
        if stated is not None:
            graph, stated_source = stated
            source = stated_source
    return graph, source, doubt, unknown, stated_source


class GraphViews:
    """Which graph file a :class:`~ckpt_tools.checkpoint.Checkpoint` is read with, and its
    view without one; a base of it, which sets the attributes named here (see its
    docstring) and ``_options`` (what it was opened with), ``_memo``, ``_view_of``."""

    location: Location
    meta: MetaGraph | None
    meta_source: str | None
    meta_stated: str | None
    meta_doubt: Doubt
    meta_unknown: UnprovenPairingError | None
    meta_unread: str | None
    _options: dict
    _memo: dict
    _view_of: Checkpoint | None

    @property
    def meta_file(self) -> str | None:
        """The ``.meta`` file graph questions (save op, update ops) are asked of: the one
        :attr:`meta` was read from, ``None`` where there is none or it is left unread."""
        return self.location.meta_path or self.meta_stated if self.meta is not None else None

    @property
    def graph_declined(self) -> bool:
        """Whether it is read with no graph by the caller's choice: opened with ``meta=False``
        (``--no-meta``) or a :meth:`with_meta` ``(False)`` view of it."""
        return not self._options["meta"]

    def with_meta(self, use_meta: bool, *, unread: bool = True) -> Checkpoint:
        """This checkpoint as ``use_meta`` sees it: itself, or (``use_meta=False``, the
        Python side of ``--no-meta``) a view of it without its graph, exactly as if the
        ``.meta`` were absent (roles, pairing and refusals alike) while the data are read
        through this one. The view is made once; closing it closes nothing.
        ``unread=False`` makes a view whose messages say no graph file is beside it rather
        than that ``--no-meta`` left it unread (a graph that proves nothing of the keys).

        Returns:
            `Checkpoint`: ``self`` or its meta-less view (``meta``/``meta_file`` ``None``).
        """
        if use_meta or self.meta is None and not self.meta_doubt and self.meta_unknown is None:
            return self
        view = self._memo.get("without_meta" if unread else "without_graph")
        if view is None:
            import copy

            view = copy.copy(self)
            view.meta = view.meta_source = view.meta_stated = None
            view.meta_doubt, view.meta_unknown = (), None
            view.meta_unread = self.meta_source if unread else None
            view._options = {**self._options, "meta": False}
            view._variables, view._memo, view.stated_pairs = None, {}, {}
            view._view_of = self
            self._memo["without_meta" if unread else "without_graph"] = view
        return view

    def own_graph(self) -> Checkpoint | None:
        """This checkpoint read with the ``.meta`` beside it that ``--no-meta`` (``meta=False``
        or a :meth:`with_meta` ``(False)`` view) left unread: its own graph, the one read
        without ``--no-meta``, for asking what that graph's save op shows
        (:mod:`~ckpt_tools.no_meta_own`). Read once (the collections as ``formats.meta``
        reads them, within its bounds); the view closes nothing.

        Returns:
            `Checkpoint` with ``meta`` read, or ``None``: not read with ``--no-meta``, no
            ``.meta`` beside it nor ``saved_model.pb`` above it, or one that
            cannot be read as a graph (too large, not a ``MetaGraphDef``: what ``--no-meta``
            exists for).
        """
        # a TF1 SavedModel's saved_model.pb too: its Saver crossing averages was read past by
        # --no-meta, exit 0, where the same Saver's .meta refuses (review-32-attack-r124 F2)
        path = self.location.meta_path or self.location.saved_model
        if self.meta is not None or not path or getattr(self, "meta_unread", None) != path:
            return None
        if "own_graph" in self._memo:
            return self._memo["own_graph"]
        base = self._view_of
        view = None
        if base is not None and base.meta is not None and base.meta_source == path:
            view = base  # a with_meta(False) view of the checkpoint read with it
        else:
            try:
                graph = (read_meta_graph(path) if path == self.location.meta_path
                         else read_saved_model(path).collections_graph())
            except CheckpointError:
                graph = None
            if graph is not None:
                import copy

                view = copy.copy(self)
                view.meta, view.meta_source, view.meta_stated = graph, path, None
                view.meta_doubt, view.meta_unknown, view.meta_unread = (), None, None
                view._options = {**self._options, "meta": True}
                view._variables, view._memo, view.stated_pairs = None, {}, {}
                view._view_of = self  # shares the reader: closing it closes nothing
        self._memo["own_graph"] = view
        return view
