"""Restore EMA weights into live TensorFlow variables (graph mode and TF2).

TensorFlow is imported lazily, only by these functions; values are read by ckpt_tools' own
reader, so what gets restored is exactly what :func:`ckpt_tools.ema_map` reports.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .checkpoint import Checkpoint
from .errors import EmaError, OptionError
from .keras_assumed import keras_assumptions, refuse_assumed, warn_assumed
from .keras_assumption_texts import LIVE_FIT_ORDER
from .live_order import keras_source, live_order, scoped_live_order
from .live_pairing import key_variables, optimizer_advice
from .locate import locate
from .restore_plan import (
    flatten_variables,
    graph_key,
    graph_named,
    plan_sources,
    recorded_keys,
    scope_check,
)
from .restore_problems import NO_VARIABLES, entry_mismatch, keras_pointer, restore_advice
from .restore_saver import ema_saver, opened, tensorflow
from .stated_python import stated_for
from .tfk_order import has_open_averages
from .user_ema_swap import unswapped_written
from .wording import counted

__all__ = ["RestoreResult", "apply_ema", "ema_saver", "restore_ema"]


@dataclass(frozen=True)
class RestoreResult:
    """What :func:`restore_ema` / :func:`apply_ema` restored.

    Attributes:
        checkpoint: the checkpoint read.
        averaged: variable name -> checkpoint key of the average it received.
        raw: variable name -> checkpoint key of the raw value it received (no average exists).
        assumed: what the pairing assumed and the file could not show (``"fit_order"``: a
            tf_keras optimizer's averages of same-named weights placed in the live model's
            ``trainable_variables`` order, the order ``fit()`` builds it in; an
            :class:`~ckpt_tools.errors.AssumptionWarning` says so). Empty where everything was
            proven or stated.
        stated: what the pairing rests on by statement, named as ``ckpt restore-ema
            --json`` names it (``"stated_averages_only"``, ``"averages_only_record"``,
            ``"written_under"``…: :func:`~ckpt_tools.stated_python.stated_fields_of`): the
            caller's ``averages_only``, or what a record or mark of the checkpoint states
            (also issued as a :class:`~ckpt_tools.errors.RecordedStatementWarning`). Empty
            where nothing was stated.
    """

    checkpoint: str
    averaged: dict[str, str] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)
    assumed: list[str] = field(default_factory=list)
    stated: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The result as plain data (``"stated"``'s fields merged, as ``--json`` has them)."""
        return {"checkpoint": self.checkpoint, "averaged": dict(self.averaged),
                "raw": dict(self.raw),
                **({"assumed": list(self.assumed)} if self.assumed else {}), **self.stated}


def _stated_checkpoint(ckpt: Checkpoint, pairs: list, trainable) -> Checkpoint:
    """``ckpt`` opened again, with the caller's options, and ``trainable`` (live variables,
    or names as ``ckpt list`` shows them) stated as a custom training loop's order
    (:mod:`ckpt_tools.tfk_stated`). Opened twice because only the open file pairs the live
    variables with its keys, which the statement needs.

    Raises:
        EmaError: a stated variable is not one of the object's saved in the checkpoint.
    """
    from .formats.keras.stated import LoopOrder

    key_of = {id(v): k for v, k in pairs}
    names = []
    for v in trainable:
        key = v if isinstance(v, str) else key_of.get(id(v))
        if key is None:
            raise EmaError(f"{ckpt.path}: trainable= lists {getattr(v, 'name', v)!r}, which is "
                           "not one of the object's variables saved in the checkpoint: list "
                           "the variables the optimizer was built with, as the loop did")
        names.append(key)
    return ckpt.reopened(trainable=LoopOrder(names))


def restore_ema(sess, checkpoint, var_list=None, *, allow_missing: bool = False,
                **map_options) -> RestoreResult:
    """Restores EMA values into the variables of ``sess.graph`` (TF1 / graph mode).

    Works on a fresh graph from ``tf.compat.v1.train.import_meta_graph`` or one rebuilt by
    model code, partitioned variables included, without adding ops to the graph (the
    variables' initializers are fed), so finalized graphs work too. From an object-based (TF2)
    checkpoint, each variable restores from the one saved variable recorded under its name
    (:func:`~ckpt_tools.restore_plan.recorded_keys`), as TF's own ``Saver`` falls back to.

    Args:
        sess: a ``tf.compat.v1.Session``.
        checkpoint: checkpoint path (directory, prefix, ...) or open :class:`Checkpoint`.
        var_list: variables to restore; default: the graph's global variables.
        allow_missing: restore the raw value of variables that have no shadow, instead of
            raising.
        **map_options: ``ema_name``, ``strip_scope``, ``add_scope``, ``use_meta`` (see
            :func:`ckpt_tools.ema_map`).

    Returns:
        `RestoreResult`.

    Raises:
        EmaError: naming every variable that has no shadow, is not in the checkpoint (of a TF2
            checkpoint: whose name no saved variable, or several, recorded), or whose
            shape/dtype differs.
        TensorFlowRequiredError: if TensorFlow is not installed.

    Example:
        >>> with tf.compat.v1.Session() as sess:  # doctest: +SKIP
        ...     tf.compat.v1.train.import_meta_graph("train/model.ckpt-1000.meta")
        ...     ckpt_tools.restore_ema(sess, "train/")
    """
    tf = tensorflow()
    ckpt, owned = opened(checkpoint)
    try:
        graph = sess.graph
        if var_list is None:
            var_list = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
        variables = flatten_variables(var_list)
        if not variables:
            raise EmaError(f"{ckpt.path}: {NO_VARIABLES}")
        keyed = [(v, *graph_key(v)) for v in variables]
        named: list[str] = []
        options = {**map_options, "allow_missing": allow_missing}
        if ckpt.objects is not None:  # a TF2 checkpoint: by the names it records (r40 F7)
            to_key, named = recorded_keys(ckpt, [k for _, k, _ in keyed],
                                          options.pop("strip_scope", None),
                                          options.pop("add_scope", None))
            keyed = [(v, to_key[k], info) for v, k, info in keyed if k in to_key]
        averaged, raw, problems = plan_sources(ckpt, [k for _, k, _ in keyed], options)
        if ckpt.objects is not None:
            problems = named + graph_named(problems, to_key)
        feed, ops, result = {}, [], RestoreResult(ckpt.path)
        values: dict[str, object] = {}
        for var, key, info in keyed:
            src = averaged.get(key) or raw.get(key)
            if src is None:
                continue
            full_shape = info.full_shape if info else var.shape.as_list()
            # named as the graph names it: an object key is not what the user built (F7)
            bad = entry_mismatch(ckpt, var.op.name, src, full_shape, var.dtype.base_dtype.name)
            if bad:
                problems.append(bad)
                continue
            value = values.get(src)
            if value is None:
                value = values[src] = ckpt.tensor(src)
            if info is not None:
                index = tuple(slice(o, o + n) for o, n in zip(info.var_offset, info.var_shape,
                                                          strict=True))
                value = value[index]
            init = var.initializer
            # Copy: TensorFlow may adopt a fed buffer as the variable's storage (Assign
            # forwards its input), and ours is a view of a mapping that closes after this.
            feed[init.inputs[1]] = np.array(value, copy=True)
            ops.append(init)
            (result.averaged if key in averaged else result.raw)[var.op.name] = src
        if problems:
            raise EmaError(f"{ckpt.path}: {counted(len(problems), 'variable')} could not be "
                           "restored: "
                           + "; ".join(problems[:8]) + (" ..." if len(problems) > 8 else "")
                           + restore_advice(problems, ckpt, scope_check(
                               ckpt, [k for _, k, _ in keyed], options))
                           + keras_pointer(ckpt))
        # what the pairing rests on by statement (a record's, a mark's, averages_only=True):
        # said as the CLI says it, never only "averaged" (ema_map warned: r128 F5)
        result.stated.update(stated_for(ckpt, options, set(result.averaged.values())))
        if ops:
            sess.run(ops, feed_dict=feed)
        return result
    finally:
        if owned:
            ckpt.close()


def apply_ema(model_or_variables, checkpoint, *, allow_missing: bool = False,
              **map_options) -> RestoreResult:
    """Assigns EMA values from a checkpoint to TF2 variables (eager), e.g. a model's weights.

    Given an object (``tf.Module``, Keras model, ``tf.train.Checkpoint``), its variables are
    paired with keys of an object-based checkpoint by object path, exactly as
    ``tf.train.Checkpoint`` names them; the object may be the checkpoint's root or one of its
    children (``tf.train.Checkpoint(model=model)``). Given a list of variables, they are paired
    by name (the ``full_name`` TF2 records, or the key of a name-based TF1 checkpoint). Keras
    ``.keras``/``.weights.h5`` files saved with ``use_ema=True`` (or a path that resolves to one:
    a run directory, an unzipped model directory) are delegated to
    :func:`ckpt_tools.keras_apply.apply_keras_ema`.

    Args:
        model_or_variables: an object holding variables, or a list of variables.
        checkpoint: checkpoint path or open :class:`Checkpoint`.
        allow_missing: assign raw values where no average exists instead of raising.
        map_options: as for :func:`ckpt_tools.ema_map`, and ``trainable`` (a tf_keras
            model's TF-format save whose optimizer a custom training loop built: the variables
            its first ``apply_gradients()`` listed, in that order; see
            :mod:`ckpt_tools.tfk_stated`); with ``apply_order="trainable"`` and
            an object, its own ``trainable_variables`` give the order (or, for a wrapper such
            as ``tf.train.Checkpoint(model=m)``, those of ``m``); with ``"tracked"``, Keras'
            ``trainable_variables`` of the Keras models it is or holds (their dicts, lists,
            sub-modules and sublayers re-assigned in ``build()`` are known here, where the
            file records no types): see :func:`ckpt_tools.live_order.live_order`. Without
            it, a tf_keras optimizer's averages of same-named weights are paired by the
            Keras model's own order, the model given bare or in ``tf.train.Checkpoint(
            model=model)`` (:func:`ckpt_tools.live_order.keras_source`).
            With ``apply_order="trainable:PATH"``, those of the live object at ``PATH``
            (:func:`ckpt_tools.live_order.scoped_live_order`).

    Returns:
        `RestoreResult` (variable key -> source key).

    Raises:
        EmaError: variables not found, without an average, or with a different shape/dtype
            (a Keras model's trainable variables its object paths do not reach included:
            layers kept in a Python list, stored only through an optimizer not built);
            a list of variables whose names match one saved object's weights while another
            saved object holds weights of their shapes (names are generated per process:
            pass the object, ``tf.train.Checkpoint(g=model)``).
        OptionError: a Keras file with ``map_options`` other than ``use_ema``/``trainable``
            (``apply_order``, ``ema_name``...) or ``allow_missing``: they cannot apply there.

    Example:
        >>> ckpt_tools.apply_ema(model, "train_tf2/")  # doctest: +SKIP
    """
    path = os.fspath(checkpoint) if not isinstance(checkpoint, Checkpoint) else None
    if path and locate(path).format in ("keras", "h5"):  # a run directory of one too
        from .keras_apply import apply_keras_ema

        keras = {k: map_options.pop(k) for k in ("use_ema", "trainable", "loop_order", "strict",
                                                 "not_swapped", "fit_order") if k in map_options}
        unused = sorted(map_options) + (["allow_missing"] if allow_missing else [])
        if unused:  # never ignored: they decide TensorFlow checkpoints' pairings only
            raise OptionError(
                f"{path}: {', '.join(u + '=' for u in unused)} (--"
                f"{unused[0].replace('_', '-')} ...) do not apply to Keras files, whose "
                "optimizer averages the model's weights in the model's order (use_ema= and "
                "trainable= state what the file leaves open): omit them")
        names = apply_keras_ema(model_or_variables, path, **keras)
        return RestoreResult(path, averaged={n: n for n in names})
    tensorflow()
    if map_options.pop("fit_order", False):  # never ignored
        raise OptionError(f"{path or checkpoint.path}: fit_order= states a Keras file's build "
                          "order; for a TensorFlow checkpoint state fit()'s with "
                          "trainable=model.trainable_variables (or apply_order='tracked')")
    trainable = map_options.pop("trainable", None)
    map_options.pop("loop_order", None)  # a variable list is the loop's order itself
    ckpt, owned = opened(checkpoint)
    try:
        pairs, problems = key_variables(model_or_variables, ckpt)
        if trainable is not None:  # a custom loop's order (tfk_stated): re-read under it
            stated = _stated_checkpoint(ckpt, pairs, trainable)
            if owned:
                ckpt.close()
            ckpt, owned = stated, True
        order = map_options.get("apply_order")
        fit_order = order is None and has_open_averages(ckpt) \
            and keras_source(model_or_variables) is not None
        if fit_order and map_options.get("strict"):
            refuse_assumed(ckpt, [LIVE_FIT_ORDER])
        if fit_order:
            # fit() built the tf_keras optimizer from model.trainable_variables: the live
            # model's own order (also wrapped: tf.train.Checkpoint(model=m)) places averages
            # of same-named weights (a custom loop's list may not have: trainable= states it)
            order = "tracked"
        live = scoped_live_order(model_or_variables, pairs, order)
        if live is not None:  # trainable:model/generator: that live object's own order (r33 F11)
            map_options = {**map_options, "apply_order": live}
        elif order in ("trainable", "tracked"):
            # the live objects' own trainable_variables (a Keras model's are the tracked
            # order, dicts and sublayers re-assigned in build() included), also inside a
            # tf.train.Checkpoint(model=m) or a tf.Module: the file records no types
            map_options = {**map_options,
                           "apply_order": live_order(model_or_variables, pairs, order)}
        frozen = frozenset(k for v, k in pairs if getattr(v, "trainable", True) is False)
        averaged, raw, more = plan_sources(ckpt, [k for _, k in pairs],
                                    {**map_options, "allow_missing": allow_missing}, frozen)
        problems += more
        result = RestoreResult(ckpt.path)
        assignments = []
        for v, key in pairs:
            src = averaged.get(key) or raw.get(key)
            if src is None:
                continue
            bad = entry_mismatch(ckpt, key, src, v.shape.as_list(), v.dtype.base_dtype.name
                         if hasattr(v.dtype, "base_dtype") else str(v.dtype))
            if bad:
                problems.append(bad)
                continue
            assignments.append((v, src))
            (result.averaged if key in averaged else result.raw)[key] = src
        if problems:
            raise EmaError(f"{ckpt.path}: {counted(len(problems), 'variable')} could not be "
                           "restored: "
                           + "; ".join(problems[:8]) + (" ..." if len(problems) > 8 else "")
                           + restore_advice(problems) + optimizer_advice(ckpt, problems))
        if not assignments:  # never return normally having restored nothing
            raise EmaError(f"{ckpt.path}: none of the object's variables was found in the "
                           "checkpoint, so nothing was restored; pass the object the checkpoint "
                           "was saved from (or one of its children), or a list of variables")
        # what the pairing assumed: tf_keras averages placed in the live model's (fit()'s)
        # order; a Keras 3 optimizer's copies read as not swapped is refused (before any
        # assignment), never taken by default, but only where what is assigned reads those
        # copies or the weights they cover: a tf.train.ExponentialMovingAverage's averages
        # (ema_name="fast") are its own whether or not the Keras copies were swapped, as the
        # CLI's --ema-name decides (unswapped_written; review-32-attack-r123 M2)
        assumed = ([LIVE_FIT_ORDER] if fit_order else []) + unswapped_written(
            ckpt, keras_assumptions(ckpt), [src for _, src in assignments])
        refuse_assumed(ckpt, assumed, strict=False)
        for v, src in assignments:
            v.assign(np.array(ckpt.tensor(src), copy=True))  # see restore_ema: never alias
        result.assumed.extend(a.name for a in assumed)
        warn_assumed(ckpt, assumed)
        result.stated.update(stated_for(ckpt, map_options,  # (the map warned: r128 F5)
                                        set(result.averaged.values())))
        return result
    finally:
        if owned:
            ckpt.close()
