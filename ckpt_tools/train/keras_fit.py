"""Keras 3 ``fit`` (``--api keras``) with the optimizer's built-in EMA (``use_ema=True``).

Where the EMA copies end up (checked with Keras 3.15, TF backend):

* The averages are **optimizer variables** named ``<variable path with / replaced by _>
  _average`` (``conv1/kernel`` -> ``conv1_kernel_average``); only trainable variables get one,
  so the batch-norm moving statistics have no EMA copy.
* ``model.save_weights("x.weights.h5")`` of a compiled model whose optimizer is built **does**
  write the optimizer: the file has ``layers/<layer>/vars/<i>`` *and* ``optimizer/vars/<i>``.
  ``model.save("x.keras")`` writes the same HDF5 as ``model.weights.h5`` inside the zip, plus
  ``config.json`` and ``metadata.json``. So both files hold raw weights and EMA copies.
* HDF5 stores no variable names, only indices. With this trainer's optimizer (SGD, momentum,
  ``use_ema``, an ExponentialDecay schedule, hence no ``learning_rate`` variable), the order of
  ``optimizer/vars/<i>`` is: ``0`` = ``iteration`` (the global step), then one ``*_average``
  per ``model.trainable_variables`` entry, in that order, then one ``*_momentum`` per entry.
* ``fit()`` overwrites the model's weights with the averages when it ends
  (``finalize_variable_values``, before ``on_train_end``). Every file here is written from
  ``on_train_batch_end``, before that, so ``layers/...`` are always the raw weights.

Files: ``<train_dir>/ckpt-<step>.keras`` every ``--save-every`` steps and at the last step (the
newest ``--max-to-keep`` are kept), one numbered series and no other checkpoint, so ``ckpt``
resolves the directory to the latest by its step (an unnumbered ``model.keras`` beside them
would make the directory ambiguous: which one is newest is not recorded), and
``run_record.json``: after each save, each kept file's size and SHA-256 with the fact no file
can show, that none was saved swapped by ``SwapEMAWeights`` (:mod:`ckpt_tools.run_record`), so
``ckpt eval`` and the other commands take it as ``--not-swapped`` for those bytes. Each is a
whole ``model.save()`` archive, as ``ModelCheckpoint`` writes by default: its ``config.json``
records the optimizer's ``use_ema=True``, which a bare ``.weights.h5`` of this optimizer cannot
prove (averages then momentum look like gradient accumulators then momentum), so ``ckpt
export`` and ``ckpt restore-ema`` pair the averages from the file alone. Runs resume from
either kind.

h5 listing: ``layers/<group>/vars/<i>``; groups are keyed by class (``conv2d``, ``conv2d_1``,
``conv2d_2``, ``batch_normalization``, ``_1``, ``_2``, ``dense``), the Keras layer name is the
``vars`` group's ``name`` attribute. ``conv1..3``: ``0`` = kernel. ``conv1_bn..conv3_bn``:
``0..3`` = gamma, beta, moving_mean, moving_variance. ``logits``: ``0`` = kernel, ``1`` = bias.
``optimizer/vars`` (``name`` = ``sgd``): ``0`` = iteration, ``1..11`` = ``*_average``,
``12..22`` = ``*_momentum``, both in ``model.trainable_variables`` order: conv1 kernel,
conv1_bn gamma, beta, conv2 kernel, conv2_bn gamma, beta, conv3 kernel, conv3_bn gamma, beta,
logits kernel, bias.
"""

from __future__ import annotations

import glob
import os
import time
import warnings

import keras
import numpy as np
import tensorflow as tf

from .. import run_record
from ..formats.keras.h5_files import ZIP_READ_ERRORS, check_archive_file
from . import data as data_lib
from .common import (
    NaNLossError,
    NotCheckpointError,
    TrainConfig,
    TrainError,
    TrainResult,
    check_resume,
    first_line,
    median_rate,
    nan_error,
    save_due,
    step_of,
)
from .devices import make_strategy, tf_config_workers, visible_gpus
from .model import BN_DECAY, BN_EPSILON, CONV_LAYERS
from .progress import TrainProgress
from .tf2 import make_dataset


def build_model(weight_decay: float = 0.0) -> keras.Model:
    """The same network as :mod:`.model`, as a functional Keras model.

    Args:
        weight_decay: L2 factor on the kernels, as in the v1/tf2 trainers
            (``weight_decay * l2_loss(w)`` = ``weight_decay / 2 * sum(w**2)``).

    Returns:
        An uncompiled model; layer names ``conv1``, ``conv1_bn``, ``conv2``, ``conv2_bn``,
        ``logits``.
    """
    l2 = keras.regularizers.L2(weight_decay / 2) if weight_decay else None
    inputs = keras.Input(shape=data_lib.IMAGE_SHAPE, name="images")
    x = inputs
    for name, size, out in CONV_LAYERS:
        x = keras.layers.Conv2D(
            out, size, padding="same", use_bias=False, kernel_regularizer=l2, name=name
        )(x)
        x = keras.layers.BatchNormalization(
            momentum=BN_DECAY, epsilon=BN_EPSILON, name=f"{name}_bn"
        )(x)
        x = keras.layers.ReLU(name=f"{name}_relu")(x)
        x = keras.layers.MaxPooling2D(3, 2, padding="same", name=f"pool_{name}")(x)
    x = keras.layers.GlobalAveragePooling2D(name="global_pool")(x)
    logits = keras.layers.Dense(
        data_lib.NUM_CLASSES,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.01),
        kernel_regularizer=l2,
        name="logits",
    )(x)
    return keras.Model(inputs, logits, name="cifar_small")


def make_optimizer(cfg: TrainConfig) -> keras.optimizers.Optimizer:
    """SGD with momentum, staircase exponential decay and ``use_ema=True``.

    The variable layout (see the module docstring) depends only on momentum > 0, ``use_ema``
    and the schedule, so evaluation can rebuild a matching optimizer from any config.
    """
    schedule = keras.optimizers.schedules.ExponentialDecay(
        cfg.learning_rate, cfg.lr_decay_steps, cfg.lr_decay_factor, staircase=True
    )
    return keras.optimizers.SGD(
        schedule, momentum=cfg.momentum, use_ema=True, ema_momentum=cfg.ema_decay_for("keras")
    )


def compile_model(cfg: TrainConfig) -> keras.Model:
    """Build, compile and build the optimizer (so weights files include ``optimizer/vars``)."""
    net = build_model(cfg.weight_decay)
    net.compile(
        optimizer=make_optimizer(cfg),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        # Keras' default "auto" compiles with XLA; on CPU that measured 1.76x slower for this
        # model (862 vs 1,517 examples/sec, batch 128), so only GPUs get it.
        jit_compile="auto" if visible_gpus() else False,
    )
    net.optimizer.build(net.trainable_variables)
    return net


def latest_weights(train_dir: str) -> str | None:
    """The ``ckpt-<step>.keras`` (or, from older runs, ``.weights.h5``) with the highest step
    in ``train_dir``, or None."""
    found = [(step_of(p) or 0, p) for p in _checkpoints(train_dir)]
    return max(found)[1] if found else None


def _checkpoints(train_dir: str) -> list[str]:
    return [p for pattern in ("ckpt-*.keras", "ckpt-*.weights.h5")
            for p in glob.glob(os.path.join(train_dir, pattern))]


class _Checkpointer(keras.callbacks.Callback):
    """Saves, checks for NaN and drives the progress bar after every batch."""

    def __init__(
        self, cfg: TrainConfig, bar: TrainProgress, global_batch: int, saved: str | None
    ) -> None:
        super().__init__()
        self.cfg, self.bar, self.global_batch = cfg, bar, global_batch
        self.saved = saved
        self.failure: NaNLossError | None = None
        self.durations: list[float] = []
        self.loss: float | None = None
        self.step = 0
        self._t0 = 0.0

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.durations.append(time.perf_counter() - self._t0)
        self.step = int(self.model.optimizer.iterations.numpy())
        self.loss = float((logs or {}).get("loss", np.nan))  # running mean over this fit()
        if not np.isfinite(self.loss):
            self._stop(nan_error(f"loss is {self.loss}", self.step, self.saved,
                                 self.cfg.train_dir))
            return
        self.bar.update(
            self.step, self.loss, self.global_batch / self.durations[-1], self.durations[-1]
        )
        if not save_due(self.cfg, self.step):
            return
        if not all(np.isfinite(v.numpy()).all() for v in self._float_variables()):
            self._stop(nan_error("variables hold NaN/Inf", self.step, self.saved,
                                 self.cfg.train_dir))
            return
        path = os.path.join(self.cfg.train_dir, f"ckpt-{self.step}.keras")
        with warnings.catch_warnings():
            # Keras' own h5 writer calls np.array(variable), which numpy 2 flags; not ours.
            warnings.filterwarnings("ignore", "__array__ implementation", DeprecationWarning)
            self.model.save(path)
        self.saved = path
        self._prune()
        self._record(path)

    def _record(self, path: str) -> None:
        """Say in the run record (:mod:`ckpt_tools.run_record`) that ``path`` and the kept
        files were saved here unswapped, so ``ckpt eval`` needs no ``--not-swapped`` (u15 F12).
        Files of an earlier run (before records) are left out: this process did not see them
        saved."""
        kept = {os.path.basename(p) for p in _checkpoints(self.cfg.train_dir)}
        files = {k: v for k, v in run_record.recorded_files(self.cfg.train_dir).items()
                 if k in kept}
        files[os.path.basename(path)] = run_record.file_digest(path)
        run_record.write_record(self.cfg.train_dir, files)

    def _float_variables(self) -> list:
        variables = list(self.model.weights) + list(self.model.optimizer.variables)
        return [v for v in variables if "float" in str(v.dtype)]

    def _stop(self, error: NaNLossError) -> None:
        self.failure = error
        self.model.stop_training = True

    def _prune(self) -> None:
        found = sorted((step_of(p) or 0, p) for p in _checkpoints(self.cfg.train_dir))
        for _, path in found[: -self.cfg.max_to_keep]:
            os.remove(path)


def train(cfg: TrainConfig) -> str:
    """Train and return the latest ``ckpt-<step>.keras``.

    Args:
        cfg: the run config.

    Returns:
        The path of the newest ``ckpt-<step>.keras``.

    Raises:
        TrainError: bad config, resume mismatch, or (:class:`NaNLossError`) a NaN loss.
    """
    result = train_with_stats(cfg)
    assert result.checkpoint is not None
    return result.checkpoint


def train_with_stats(cfg: TrainConfig) -> TrainResult:
    """Like :func:`train`, also returning steps, last loss and throughput.

    Raises:
        See :func:`train`.
    """
    cfg.validate()
    dataset = data_lib.load(cfg.data_dir)
    latest = latest_weights(cfg.train_dir) if cfg.save_checkpoints else None
    if cfg.save_checkpoints:
        check_resume(cfg.train_dir, latest, cfg.resume)
        os.makedirs(cfg.train_dir, exist_ok=True)
    keras.utils.set_random_seed(cfg.seed)
    if cfg.strategy == "multiworker" or (cfg.strategy == "auto" and tf_config_workers()):
        # Tried with Keras 3.15: fit() under MultiWorkerMirroredStrategy fails converting the
        # per-replica batch to a tensor. Refuse before any worker server starts.
        raise TrainError(
            "--api keras supports one machine (--strategy mirrored/default); "
            "use --api tf2 for multi-worker training"
        )
    strategy = make_strategy(cfg.strategy, cfg.num_gpus)
    replicas = strategy.num_replicas_in_sync
    global_batch = cfg.batch_size * replicas
    with strategy.scope():
        net = compile_model(cfg)
    if latest is not None:
        check_archive_file(latest)  # a member zipfile refuses: exit 4 (review-20-attack-r50 F5)
        try:
            net.load_weights(latest)
        except (ValueError, OSError) as exc:
            raise TrainError(f"cannot resume from {latest}: {first_line(exc)}") from None
        except ZIP_READ_ERRORS as exc:  # a damaged .keras: exit 4
            said = first_line(exc).rstrip(".")  # zipfile ends some messages with a period
            raise NotCheckpointError(f"cannot resume from {latest}: {said}: the archive is "
                                     "corrupt") from None
    start = int(net.optimizer.iterations.numpy())
    if start >= cfg.max_steps:
        return TrainResult(latest, start, 0, None, 0.0, replicas)

    ds = make_dataset(dataset, global_batch, cfg.seed, start)
    if cfg.debug_nan_at_step is not None:
        # The batch of step N (1-based global step) is element N - 1 - start of this run.
        poison_index = cfg.debug_nan_at_step - 1 - start
        ds = ds.enumerate().map(
            lambda i, xy: (tf.where(i == poison_index, np.float32(np.nan), xy[0]), xy[1])
        )
    with TrainProgress(cfg.max_steps, start, cfg.progress, "train keras") as bar:
        checkpointer = _Checkpointer(cfg, bar, global_batch, latest)
        net.fit(
            ds,
            epochs=1,
            steps_per_epoch=cfg.max_steps - start,
            verbose=0,
            shuffle=False,
            callbacks=[checkpointer],
        )
    if checkpointer.failure is not None:
        raise checkpointer.failure
    if cfg.save_checkpoints and checkpointer.saved is None:
        raise TrainError(f"no checkpoint was written to {cfg.train_dir}")
    return TrainResult(
        checkpointer.saved,
        checkpointer.step,
        checkpointer.step - start,
        checkpointer.loss,
        median_rate(global_batch, checkpointer.durations),
        replicas,
    )
