"""What each tensor of a Keras weight file is: model weight, optimizer state or EMA copy.

This module holds the answer, :class:`KerasLayout`, and :func:`analyze`, which builds it: a
Keras 3 ``.weights.h5`` or ``.keras`` (values stored by position) in
:mod:`~ckpt_tools.formats.keras.keras3_layout`, a legacy ``.h5`` (every variable named, so
paired by name) in :mod:`~ckpt_tools.formats.keras.legacy_layout`. It also re-exports the
names the layers above take from here (``fitting_use_ema``, ``infer_use_ema``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..entry import TensorEntry
from .model_tree import Node, to_snake_case
from .optimizer import fitting_use_ema, infer_use_ema
from .optimizer_slots import Spec
from .stated import check_stated, stated_keys

__all__ = ["KerasLayout", "Spec", "analyze", "check_stated", "fitting_use_ema",
           "infer_use_ema", "stated_keys", "to_snake_case"]

@dataclass
class KerasLayout:
    """The meaning of every key of a Keras weight file (built by :func:`analyze`).

    Attributes:
        kind: ``"keras3"`` or ``"legacy"``.
        order: every key, model weights first (in Keras save order), then optimizer variables.
        model: model weight keys; ``trainable``: key -> trainable (as far as the file tells).
        paths: key -> readable Keras path (``dense/kernel``, ``sgd/dense_kernel_average``).
        order_marked: the keys whose path ends in the ``?`` mark: an optimizer variable named
            after the weight only fit()'s build order pairs it with (the name Keras gives it
            follows that order, which the file cannot prove); the path without the mark is
            the name (:func:`ckpt_tools.order_marks.marked_paths`).
        optimizer_vars: optimizer variable keys in ``optimizer.variables`` order.
        optimizer: snake_case optimizer class, when known; ``optimizer_config``: its config.
        use_ema: whether the optimizer kept EMA copies (``None``: the file cannot tell).
        ema_evidence: where ``use_ema`` (and the pairing) came from, in words.
        ema_source: ``"config"`` (``config.json``), ``"layout"`` (the optimizer variables'
            count, shapes and dtypes), ``"names"`` (a legacy ``.h5``'s optimizer weight names)
            or ``"stated"`` (the caller's ``use_ema``, where the file records none).
        averages: EMA copy key -> model weight key (``None`` where it cannot be paired).
        frozen: weights of layers the config marks ``trainable=False`` (the state when the file
            was saved): the optimizer still holds copies of those frozen after it was built.
        frozen_left_out: with a stated ``trainable``: the weights config.json records in
            frozen layers that the statement leaves out (``frozen`` is then empty, the
            statement replacing the file's flags): raw, as Keras evaluates them, by the file's
            own record (:mod:`~ckpt_tools.raw_reasons`).
        untrainable: float weights config.json's layer classes create ``trainable=False``
            (Normalization's ``mean``/``variance``): no optimizer copy is expected.
        float8_state: a float8 layer's scales and amax histories (config.json's dtype
            policy): trainable, but no optimizer slot or copy (``overwrite_with_gradient``).
        slots: optimizer slot key -> model weight key (``None`` where unknown).
        notes: why something could not be worked out.
        ordered: ``model`` is in ``model.weights`` order throughout (no sublayers whose order
            the file does not record), so position ``i`` of a live model's weights is
            ``model[i]``.
        configured: a ``config.json`` (or legacy model config) says which layers were
            trainable when the file was saved.
        flags: the config lists the model's layers with their ``trainable`` flags (a
            Sequential/Functional model; a subclassed model's config records none).
        frozen_unproven: the flags config.json records (those at save) fit the averages, but
            so does another set of layers of the same shapes: the flags may have changed
            since the optimizer was built, so the pairings they disagree on are left open.
        unordered: key -> (bag, sublayer) for weights of sublayers whose order the file does
            not record (attributes, visited alphabetically): two weights of the same bag but
            different sublayers have no proven relative order.
        tf_keras: a tf_keras (Keras 2) ``.keras`` archive.
        optimizer_module: the optimizer's module and class as config.json records them
            (``keras.optimizers.legacy.Adam`` for a tf_keras legacy optimizer), or ``""``.
        attached: optimizers the model keeps as attributes (the keras.io GAN's
            ``d_optimizer``/``g_optimizer``): attribute path -> optimizer name. Their
            variables are in ``other``, never model weights.
        candidates: EMA copy key -> the weights it may average, where the file narrows them
            (a legacy ``.h5`` copy names its weight, which several layers share); elsewhere an
            unpaired copy's candidates are the weights of its shape and dtype.
        custom_optimizer: the class config.json records for an optimizer that is not a
            Keras built-in (``my>LookaheadSGD``), or ``""``: where its EMA copies sit among
            its variables is not known (a subclass may create variables of its own first).
        stated_pairs: EMA copy key -> model weight key for the pairings that rest only on
            the caller's ``trainable`` (the file alone leaves them open or pairs otherwise).
        loop_order: ``trainable`` was stated as a custom loop's order
            (:class:`~.stated.LoopOrder`), which may differ from the model's.
        stated_reordered: the first two stated weights (keys) in another order than the
            model's, where ``trainable`` states a custom loop's order; else ``None``.
        tree: a Keras 3 file's model as a tree of layers (``model_tree.Node``; ``None`` for
            legacy and tf_keras files), for :func:`~.load_order.legacy_h5_groups`.
        named: ``tree`` also for a tf_keras ``.keras`` (layer names, for
            :func:`~.stated_names.check_numbering`); shapes: model weight key -> (shape,
            dtype name), where ``named`` is set.
        copy_counts: the numbers of EMA copies the layouts that fit give, where they differ
            (a bare ``.weights.h5`` of ``Adam(amsgrad=True)`` with a frozen weight: 3 copies
            and three slots each, or 4 and two), so ``averages`` holds one of them, unproven.
        loose: weight key -> the class, in words, of a layer not known as Keras' own that
            holds two or more variables of one shape and dtype: their stored order is not
            proven (:mod:`~.custom_order`), so they are read as unordered (``unordered``).
    """

    kind: str
    order: list[str] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    trainable: dict[str, bool] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    order_marked: set[str] = field(default_factory=set)
    optimizer_vars: list[str] = field(default_factory=list)
    optimizer: str | None = None
    optimizer_config: dict | None = None
    iteration: str | None = None
    learning_rate: str | None = None
    ema_offset: int = 0
    use_ema: bool | None = None
    ema_evidence: str = ""
    ema_source: str = ""  # "config", "layout", "names" (a legacy .h5) or "stated"
    averages: dict[str, str | None] = field(default_factory=dict)
    frozen: list[str] = field(default_factory=list)
    frozen_left_out: list[str] = field(default_factory=list)
    untrainable: list[str] = field(default_factory=list)
    float8_state: list[str] = field(default_factory=list)  # quantized.FLOAT8_STATE
    slots: dict[str, str | None] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)
    var_names: dict[str, str] = field(default_factory=dict)  # optimizer key -> Keras var name
    notes: list[str] = field(default_factory=list)
    ordered: bool = True
    configured: bool = False
    flags: bool = False
    frozen_unproven: bool = False
    unordered: dict[str, tuple] = field(default_factory=dict)
    tf_keras: bool = False
    optimizer_module: str = ""
    attached: dict[str, str] = field(default_factory=dict)
    stated_pairs: dict[str, str] = field(default_factory=dict)
    loop_order: bool = False
    trainable_stated: bool = False  # ``trainable`` given: the build order is the caller's
    stated_flags: tuple[str, str] | None = None  # stated_flags.contradicted, for a note
    stated_reordered: tuple[str, str] | None = None
    custom_optimizer: str = ""
    # no config.json: the layout read gradient accumulators off the count (keras_layout_values)
    ga_inferred: bool = False
    variant_inferred: bool = False  # likewise a hyperparameter's slots (amsgrad, momentum)
    # no config.json: a use_ema=True setting with the class' default slots fits the count
    default_fit: bool = False
    readings: tuple[str, ...] = ()  # --optimizer statements of the use_ema settings that fit
    # --optimizer (stated_optimizer.parse): (class, options); the name the file records
    stated_optimizer: tuple | None = None
    named_optimizer: str | None = None
    candidates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tree: Node | None = None
    loss_scaled: bool = False  # a LossScaleOptimizer wraps the optimizer (mixed_float16)
    # the LossScaleOptimizer's own vars/ (optimizer state: loss_scale.py); ``repeats``:
    # those of them repeating the wrapped optimizer's -> the wrapped key
    loss_scale_state: list[str] = field(default_factory=list)
    # keras_twins.find_twins of this layout, once computed (it reads values): None until then
    twins: list[tuple[str, str]] | None = None
    repeats: dict[str, str] = field(default_factory=dict)
    named: Node | None = None
    shapes: dict[str, tuple] = field(default_factory=dict)
    copy_counts: tuple[int, ...] = ()
    loose: dict[str, str] = field(default_factory=dict)
    nested: list[str] = field(default_factory=list)  # nested_optimizers.refuse_nested

    @property
    def copies_unpaired(self) -> bool:
        """The optimizer ran with ``use_ema=True`` and holds variables past
        iteration/learning_rate, none placed as an EMA copy (no layout fits the weights)."""
        return bool(self.use_ema and not self.averages and not self.attached
                    and not self.nested
                    and self.optimizer_vars[self.ema_offset:])


def analyze(entries: dict[str, TensorEntry], kind: str, config: dict | None = None,
            owner_names: dict[str, str] | None = None, *, read=None,
            use_ema: bool | None = None, tf_keras: bool = False,
            trainable: Sequence[str] | None = None, optimizer=None) -> KerasLayout:
    """Works out what each key of a Keras weight file is (metadata only, no tensor data).

    Args:
        entries: key -> entry, as :class:`~ckpt_tools.formats.keras.h5.H5Reader` scans them
            (``extra`` holds
            ``owner``, ``index``, ``section`` and, for legacy files, ``weight_name``).
        kind: ``"keras3"`` or ``"legacy"``.
        config: ``config.json`` of a ``.keras`` archive (or a legacy file's model/training
            config), if any.
        owner_names: Keras 3 only: group path -> ``name`` attribute of its ``vars`` group.
        read: key -> array; gives the stored iteration count (a trained optimizer without
            per-variable state). Values never decide a pairing or ``use_ema``.
        use_ema: the caller's statement of the optimizer's ``use_ema`` (``None``: infer).
        tf_keras: a ``.keras`` archive tf_keras wrote: the optimizer variables are left to
            :func:`~ckpt_tools.formats.keras.tf_keras.adjust` (another layout).
        trainable: the caller's statement of the weights the optimizer was built with
            (a legacy ``.h5``: full weight keys, with or without ``model_weights/``), in
            ``model.trainable_variables`` order (object paths as ``paths`` gives them, or a
            prefix/segment naming a layer for all its weights). Replaces what the file
            records or leaves open (frozen layers, sublayer order).
        optimizer: the caller's statement of the optimizer's class and slot-making options
            (:func:`~.stated_optimizer.parse`), for a bare ``.weights.h5``.

    Raises:
        VariableNotFoundError: a ``trainable`` name matches no weight, or one already matched.

    Returns:
        `KerasLayout`.
    """
    if kind == "legacy":
        from .legacy_layout import analyze_legacy

        lay = analyze_legacy(entries, config, trainable, optimizer, tf_keras)
        if use_ema is not None and use_ema != lay.use_ema:
            said = "training_config says" if lay.ema_source == "config" else \
                "the optimizer variable names say"
            lay.notes.append(f"use_ema={use_ema} was stated, but {said} use_ema={lay.use_ema}")
        return lay
    from .keras3_layout import analyze_keras3

    return analyze_keras3(entries, config, owner_names or {}, read, use_ema, tf_keras,
                          trainable, optimizer)
