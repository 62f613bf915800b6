"""Test accuracy of a checkpoint with its raw weights and with its EMA weights, side by side.

Works on what any of the three trainers wrote; the API is detected from the path
(:func:`~.eval_resolve.resolve_checkpoint`):

* ``*.weights.h5`` / ``*.keras`` / a Keras ``.h5``: Keras (raw = the layers, EMA = optimizer
  ``*_average``; ``use_ema=False`` stated: raw only, as for restore-ema's own outputs).
* a TF checkpoint prefix with ``_CHECKPOINTABLE_OBJECT_GRAPH``: tf2 (raw = ``model/``,
  EMA = ``ema/``, one dict keyed by the model's paths).
* any other TF checkpoint prefix: v1 (raw = plain Saver, EMA = a Saver over
  ``ExponentialMovingAverage.variables_to_restore()``).
* a directory: its latest TF checkpoint, else its newest ``ckpt-<step>.keras`` (or
  ``.weights.h5``).

Each API's restore step is one small function (:func:`restore_v1`, :func:`restore_tf2`,
:func:`restore_keras`), the seam where ``ckpt_tools.restore_ema`` will plug in.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import numpy as np
import tensorflow as tf

import ckpt_tools
from ckpt_tools.ema_holders import SplitHoldersError
from ckpt_tools.formats.keras.h5_files import ZIP_READ_ERRORS, check_archive_file
from ckpt_tools.restored_mark import read_mark, refuse_marked_assumed

from . import data as data_lib
from . import model
from .common import (
    NotCheckpointError,
    TrainError,
    TrainUsageError,
    first_line,
    not_reference,
    step_of,
)
from .eval_resolve import OBJECT_GRAPH_KEY as OBJECT_GRAPH_KEY  # re-exported
from .eval_resolve import resolve_checkpoint

Predict = Callable[[np.ndarray], np.ndarray]  # normalised images -> logits


@dataclass(frozen=True)
class EvalResult:
    """Accuracy of one checkpoint on the test split."""

    checkpoint: str  # the resolved checkpoint path / prefix
    api: str  # "v1", "tf2" or "keras"
    global_step: int | None
    num_examples: int
    raw_accuracy: float  # in [0, 1]
    ema_accuracy: float | None  # in [0, 1]; None: the optimizer was stated use_ema=False
    data: str  # "synthetic" or the data directory
    # A Keras file ckpt restore-ema wrote (restored_mark): its weights are the averages, so
    # with no statement its raw accuracy is also its EMA accuracy (review-16-attack-r32 F4).
    weights_are_averages: bool = False

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


def evaluate(
    path: str, data_dir: str | None = None, num_examples: int = 0, batch_size: int = 500,
    *, strict: bool = False, not_swapped: bool = False, fit_order: bool = False,
    use_ema: bool | None = None, trainable: list | None = None, loop_order: bool = False,
    optimizer: str | None = None, ema_name: str | None = None,
) -> EvalResult:
    """Accuracy of ``path`` with raw and with EMA weights.

    Args:
        path: checkpoint prefix, Keras file or train directory.
        data_dir: CIFAR-10 binary batches; None for the synthetic test set (the one the
            synthetic training data was drawn from).
        num_examples: evaluate on the first N test examples; 0 = all.
        batch_size: evaluation batch size.
        strict: refuse a Keras file whose EMA pairing rests on an assumption
            (``--strict``: :mod:`ckpt_tools.keras_assumed`).
        not_swapped: state that a Keras file was not saved swapped by ``SwapEMAWeights``
            (``--not-swapped``), so ``strict`` does not refuse that reading.
        fit_order: state that ``fit()`` built a Keras file's optimizer (``--fit-order``), so
            ``strict`` does not refuse that reading either.
        use_ema: state whether a Keras file's optimizer ran with ``use_ema=True``
            (``--use-ema/--no-use-ema``, ``apply_keras_ema(use_ema=)``): a bare ``.weights.h5``
            cannot tell. ``False``: raw accuracy only (``ema_accuracy`` is None).
        trainable: the weights a Keras file's optimizer was built with
            (``--trainable``, ``apply_keras_ema(trainable=)``).
        loop_order: ``trainable`` is a custom loop's order (``--loop-order``).
        optimizer: a bare ``.weights.h5``'s optimizer class and options (``--optimizer``,
            ``apply_keras_ema(optimizer=)``).
        ema_name: a v1 or tf2 checkpoint's EMA name (``--ema-name``, ``apply_ema(ema_name=)``):
            the statement a refused pairing names (an older ``ckpt train --api tf2``
            checkpoint's mirror of the model's paths: ``ExponentialMovingAverage``).

    Returns:
        The result.

    Raises:
        TrainError: no checkpoint, no EMA variables in it, or no test data.
        EmaError: (``strict``) a Keras file's pairing rests on an assumption.
        DataError: ``data_dir`` lacks the CIFAR-10 batches.
    """
    checkpoint, api = resolve_checkpoint(path)
    if api != "keras" and (use_ema is not None or trainable is not None or loop_order
                           or optimizer is not None):
        raise TrainUsageError(f"--use-ema/--no-use-ema and --trainable state a Keras file's "
                              f"optimizer; {checkpoint} is a {api} checkpoint")
    if api == "keras" and ema_name is not None:  # never ignored
        raise TrainUsageError(f"--ema-name names a v1 or tf2 checkpoint's EMA object; "
                              f"{checkpoint} is a Keras file, whose optimizer keeps its own")
    if api != "keras" and (not_swapped or fit_order):
        # Refused where they cannot apply (OptionError, exit 2), as export refuses them,
        # never ignored (u16 F6); a --not-swapped that applies is handed to the EMA restore.
        with ckpt_tools.open_checkpoint(checkpoint, not_swapped=not_swapped,
                                        fit_order=fit_order):
            pass
    dataset = data_lib.load(data_dir)
    images, labels = dataset.test_images, dataset.test_labels
    if num_examples:
        images, labels = images[:num_examples], labels[:num_examples]
    if not len(labels):
        raise TrainError(f"no test examples (is {data_lib.TEST_FILE} in {data_dir}?)")
    predictor = {"v1": functools.partial(_v1_predictor, not_swapped=not_swapped,
                                         ema_name=ema_name),
                 "tf2": functools.partial(_tf2_predictor, not_swapped=not_swapped,
                                          ema_name=ema_name),
                 "keras": functools.partial(_keras_predictor, strict=strict,
                                            not_swapped=not_swapped, fit_order=fit_order,
                                            stated_ema=use_ema, trainable=trainable,
                                            loop_order=loop_order, optimizer=optimizer)}[api]
    accuracy: dict[bool, float] = {}
    mark = read_mark(checkpoint) if api == "keras" else None  # the file read once
    averaged = mark is not None
    if strict:  # r40 F1: refused as export --strict refuses it
        refuse_marked_assumed(mark, checkpoint, strict=True)
    # restore-ema's output, nothing stated: its weights are the averages, evaluated as they are
    # (its optimizer's EMA copies, kept, equal them), never a refusal asking for --use-ema.
    said = use_ema is not None or trainable is not None or optimizer is not None
    # use_ema=False stated: the file holds no averages, so only its raw weights are evaluated.
    for ema_pass in (False,) if use_ema is False or (averaged and not said) else (False, True):
        with predictor(checkpoint, ema_pass) as (predict, step):
            accuracy[ema_pass] = _accuracy(predict, images, labels, batch_size)
    raw, ema = accuracy[False], accuracy.get(True)
    if averaged and not said:
        ema = raw
    return EvalResult(checkpoint, api, step, len(labels), raw, ema, dataset.source, averaged)


def _accuracy(predict: Predict, images: np.ndarray, labels: np.ndarray, batch_size: int) -> float:
    correct = 0
    for start in range(0, len(labels), batch_size):
        logits = predict(data_lib.normalize(images[start : start + batch_size]))
        correct += int((np.argmax(logits, axis=1) == labels[start : start + batch_size]).sum())
    return correct / len(labels)


# ---- v1 -------------------------------------------------------------------------------------


def _ema_restore(restore, path: str) -> None:
    """Runs a ckpt_tools restore; its errors keep their exit code (6 for shadows that do not
    match, 3 for missing ones) and say that the EMA restore failed."""
    try:
        restore()
    except ckpt_tools.CheckpointError as exc:
        if isinstance(exc, SplitHoldersError) and exc.for_eval:  # eval's options only (u32 F4)
            exc.args = (f"{path}: cannot restore EMA weights: {exc.for_eval}",)
        elif exc.args and isinstance(exc.args[0], str):
            said = first_line(exc)  # naming the file once (u15 F12), where it starts with it
            said = said[len(path) + 2:] if said.startswith(f"{path}: ") else said
            exc.args = (f"{path}: cannot restore EMA weights: {said}", *exc.args[1:])
        raise


def _stated(not_swapped: bool, ema_name: str | None = None) -> dict:
    """The map options ``--not-swapped`` and ``--ema-name`` give a TensorFlow checkpoint's EMA
    restore."""
    return {**({"not_swapped": True} if not_swapped else {}),
            **({"ema_name": ema_name} if ema_name is not None else {})}


def restore_v1(sess: tf.compat.v1.Session, path: str, use_ema: bool, *,
               not_swapped: bool = False, ema_name: str | None = None) -> None:
    """Restore the eval graph's variables from a v1 checkpoint.

    Args:
        sess: a session on a graph built with ``model.v1_inference(..., is_training=False)``.
        path: checkpoint prefix.
        use_ema: map every trainable and moving-average variable (BN statistics) to its
            ``<name>/ExponentialMovingAverage`` shadow instead of its own value.
        not_swapped: ``--not-swapped``, where it applies (``restore_ema(not_swapped=)``).
        ema_name: ``--ema-name`` (``restore_ema(ema_name=)``).

    Raises:
        TrainError: a needed key is missing.
    """
    if use_ema:
        # The toolkit's own restore: checkpoint-key map, so it is also right for partitioned
        # variables and graphs that already hold shadow ops (where TF's map is off by "_1").
        _ema_restore(lambda: ckpt_tools.restore_ema(sess, path,
                                                    **_stated(not_swapped, ema_name)), path)
        return
    try:
        tf.compat.v1.train.Saver(tf.compat.v1.global_variables()).restore(sess, path)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError):
        raise not_reference(path, "v1", _unmatched(path, tf.compat.v1.global_variables())) \
            from None


def _unmatched(path: str, variables) -> str:
    """The first of the graph's ``variables`` the checkpoint lacks or holds in another shape,
    in a few words, read with ckpt_tools (not TensorFlow's message); ``""`` where none is
    (the restore failed otherwise) or the file cannot be read here."""
    try:
        with ckpt_tools.open_checkpoint(path, meta=False) as ckpt:
            entries = ckpt.entries()
    except ckpt_tools.CheckpointError:
        return ""
    for v in variables:
        name, shape = v.op.name, list(v.shape.as_list())
        if name not in entries:
            return f"the file has no variable {name}"
        if list(entries[name].shape) != shape:
            return f"its {name} is {list(entries[name].shape)}, the model's {shape}"
    return ""


@contextlib.contextmanager
def _v1_predictor(path: str, use_ema: bool, *, not_swapped: bool = False,
                  ema_name: str | None = None) -> Iterator[tuple[Predict, int | None]]:
    # A fresh graph per restore, as a separate evaluation job would build it.
    with tf.Graph().as_default() as graph:
        inputs = tf.compat.v1.placeholder(tf.float32, [None, 32, 32, 3], "images")
        logits = model.v1_inference(inputs, is_training=False)
        with tf.compat.v1.Session(graph=graph) as sess:
            restore_v1(sess, path, use_ema, not_swapped=not_swapped, ema_name=ema_name)
            yield (lambda x: sess.run(logits, {inputs: x})), _load_step(path, "global_step")


# ---- tf2 ------------------------------------------------------------------------------------


def restore_tf2(net: model.Tf2Model, path: str, use_ema: bool, *,
                not_swapped: bool = False, ema_name: str | None = None) -> None:
    """Load a tf2 checkpoint's ``model/`` (raw) or ``ema/`` (EMA) values into ``net``.

    ``ema`` is one dict keyed by the model's paths (``ema/conv1.Sweights``; an older run's
    mirror ``ema/conv1/weights`` is refused unless ``ema_name``, ``--ema-name
    ExponentialMovingAverage``, states one object's averages), paired with the model's
    variables by ``ckpt_tools.apply_ema``.

    Raises:
        TrainError: some model variable has no value in the checkpoint.
    """
    if use_ema:
        # Pairs each model variable with its saved ema.average(v) through the object graph.
        _ema_restore(lambda: ckpt_tools.apply_ema(net, path, **_stated(not_swapped, ema_name)),
                     path)
        return
    root = "model"
    status = tf.train.Checkpoint(**{root: net}).read(path)
    try:
        status.assert_existing_objects_matched()
    except AssertionError:
        raise not_reference(path, "tf2", f"{root}/ does not hold every model variable") \
            from None


@contextlib.contextmanager
def _tf2_predictor(path: str, use_ema: bool, *, not_swapped: bool = False,
                   ema_name: str | None = None) -> Iterator[tuple[Predict, int | None]]:
    net = model.Tf2Model()
    restore_tf2(net, path, use_ema, not_swapped=not_swapped, ema_name=ema_name)
    forward = tf.function(lambda x: net(x, training=False))
    yield (lambda x: forward(x).numpy()), _load_step(path, "step/.ATTRIBUTES/VARIABLE_VALUE")


# ---- keras ----------------------------------------------------------------------------------


def restore_keras(net, path: str, use_ema: bool, *, strict: bool = False,
                  not_swapped: bool = False, fit_order: bool = False,
                  stated_ema: bool | None = None, trainable: list | None = None,
                  loop_order: bool = False, optimizer: str | None = None) -> None:
    """Load a Keras weights file; for EMA, copy the optimizer's ``*_average`` into the weights.

    Args:
        net: a model from ``keras_fit.compile_model`` (its optimizer must be built so the
            file's ``optimizer/vars`` load).
        path: ``.weights.h5`` or ``.keras``.
        use_ema: copy the averages over the trainable variables after loading.
        strict: refuse a pairing that rests on an assumption (``apply_keras_ema(strict=)``).
        not_swapped: the file was not saved swapped (``apply_keras_ema(not_swapped=)``).
        fit_order: ``fit()`` built the optimizer (``apply_keras_ema(fit_order=)``).
        stated_ema: ``apply_keras_ema(use_ema=)``: whether the optimizer ran with EMA.
        trainable: ``apply_keras_ema(trainable=)``: the weights it was built with.
        loop_order: ``apply_keras_ema(loop_order=)``: ``trainable`` is a custom loop's order.

    Raises:
        TrainError: the file does not match the model, or holds no optimizer averages
            (NotCheckpointError: a damaged ``.keras`` archive).
    """
    # a member Keras' zipfile would refuse (encrypted, flag bit 5/6, a local header naming
    # another file): our one line, exit 4, before Keras reads it (review-20-attack-r50 F5, F1)
    check_archive_file(path)
    try:
        # Keras warns for each layer it skips before it raises on one it cannot fill: held
        # back, so a file of another model is one error line, and said only if it loads.
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            net.load_weights(path)
        for w in said:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    except ValueError:
        # Keras names its own layer (the reference model's conv1) where the file holds
        # another model, which reads as if the file were broken: eval's words only (u22 F4)
        raise not_reference(path, "keras") from None
    except OSError as exc:
        raise TrainError(f"{path}: {first_line(exc)}") from None
    except ZIP_READ_ERRORS as exc:  # a member fails its CRC-32: exit 4
        said = first_line(exc).rstrip(".")  # zipfile ends some messages with a period
        raise NotCheckpointError(f"{path}: {said}: the archive is corrupt") from None
    if use_ema:
        # The file's optimizer averages, paired with the trainable variables by the toolkit.
        try:
            _ema_restore(lambda: ckpt_tools.apply_keras_ema(net, path, load_weights=False,
                                                            strict=strict,
                                                            not_swapped=not_swapped,
                                                            fit_order=fit_order,
                                                            use_ema=stated_ema,
                                                            trainable=trainable,
                                                            loop_order=loop_order,
                                                            optimizer=optimizer), path)
        except ckpt_tools.EmaError as exc:
            if stated_ema is None and exc.args and "holds no optimizer EMA copies" in str(
                    exc.args[0]):  # eval's own way out (restore-ema's --format h5 output)
                exc.args = (f"{exc.args[0]}; to evaluate its weights as they are (an EMA bake "
                            "such as restore-ema's output holds the averages as its weights): "
                            "ckpt eval --no-use-ema", *exc.args[1:])
            raise


@contextlib.contextmanager
def _keras_predictor(path: str, use_ema: bool, *, strict: bool = False,
                     not_swapped: bool = False, fit_order: bool = False,
                     stated_ema: bool | None = None, trainable: list | None = None,
                     loop_order: bool = False, optimizer: str | None = None
                     ) -> Iterator[tuple[Predict, int | None]]:
    from . import keras_fit  # imports keras: only for Keras files
    from .common import TrainConfig

    net = keras_fit.compile_model(TrainConfig())
    restore_keras(net, path, use_ema, strict=strict, not_swapped=not_swapped,
                  fit_order=fit_order, stated_ema=stated_ema, trainable=trainable,
                  loop_order=loop_order, optimizer=optimizer)
    # A plain call, not predict_on_batch: no per-batch tf.function retracing or numpy warnings.
    yield (lambda x: net(x, training=False).numpy()), int(net.optimizer.iterations.numpy())


def _load_step(path: str, key: str) -> int | None:
    try:
        return int(tf.train.load_variable(path, key))
    except (tf.errors.OpError, ValueError):
        return step_of(path)
