"""TF2 (``--api tf2``) custom training loop under tf.distribute, EMA saved explicitly.

``MirroredStrategy`` (every visible GPU; one replica on CPU) or, when ``TF_CONFIG`` names a
cluster, ``MultiWorkerMirroredStrategy``. The model is a ``tf.Module`` (see :mod:`.model`); the
optimizer is ``tf.compat.v1.train.MomentumOptimizer``, which is trackable and distribution-aware
and stores its slots the object-based way. ``tf.train.ExponentialMovingAverage`` is *not*
trackable itself (tensorflow#38452), so its shadows are saved through ``ema``: ONE dict keyed by
the weights' slash paths (``{"conv1/weights": ema.average(v), ...}``). TensorFlow escapes the
slash inside the dict key, so the EMA copy of ``model/conv1/weights`` is ``ema/conv1.Sweights``,
all of them held by one object: ``ckpt`` reads one holder as one EMA object's averages. The
mirror of the model's paths written before (``ema/conv1/weights``, :func:`mirror_module`) is
refused there, as two EMA objects kept per network write the same keys (review-29-attack-r109
F2): ``--ema-name ExponentialMovingAverage`` reads such older checkpoints, and ``--resume``
continues them (:mod:`.tf2_resume`; its new saves use the dict). Restoring EMA weights is
``ckpt_tools.apply_ema(model, path)``.

Checkpoint keys (``tf.train.list_variables`` of ``ckpt-<step>``), ``A`` = ``.ATTRIBUTES/
VARIABLE_VALUE``::

    model/conv{1,2,3}/weights/A
    model/conv{1,2,3}/BatchNorm/{beta,gamma,moving_mean,moving_variance}/A
    model/logits/weights/A  model/logits/biases/A
    model/<trainable>/.OPTIMIZER_SLOT/optimizer/momentum/A
    ema/<path under model/, slashes as .S>/A   (ema/conv1.Sweights/A; BN statistics included)
    losses/cross_entropy/avg/A  losses/total_loss/avg/A
    step/A   (the global step)    save_counter/A    _CHECKPOINTABLE_OBJECT_GRAPH
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import tensorflow as tf

from . import data as data_lib
from . import model
from .common import (
    TrainConfig,
    TrainError,
    TrainResult,
    check_resume,
    median_rate,
    nan_error,
    save_due,
)
from .devices import is_chief, make_strategy
from .progress import TrainProgress
from .tf2_resume import restore_run

CHECKPOINT_NAME = "ckpt"
LOSS_AVERAGE_DECAY = 0.9  # as v1's ExponentialMovingAverage(0.9, name='avg')


class LossAverages(tf.Module):
    """Moving averages of the losses, saved as ``losses/<loss>/avg``."""

    def __init__(self) -> None:
        super().__init__(name="losses")
        zero = dict(trainable=False, dtype=tf.float32)
        self.cross_entropy = {"avg": tf.Variable(0.0, name="cross_entropy/avg", **zero)}
        self.total_loss = {"avg": tf.Variable(0.0, name="total_loss/avg", **zero)}

    def update(self, cross_entropy: tf.Tensor, total_loss: tf.Tensor) -> None:
        """Fold this step's (replica-summed) losses into the averages."""
        for holder, value in ((self.cross_entropy, cross_entropy), (self.total_loss, total_loss)):
            avg = holder["avg"]
            avg.assign(LOSS_AVERAGE_DECAY * avg + (1.0 - LOSS_AVERAGE_DECAY) * value)


def averages_dict(named: dict[str, tf.Variable]) -> dict[str, tf.Variable]:
    """The averages to save as ``ema``: one dict keyed by the weights' slash paths, so one
    object holds them all (``ema/conv1.Sweights``), which ``ckpt`` reads as one EMA object's
    averages (a mirror of the model's paths is read as one holder per sub-module:
    review-29-attack-r109 F2).

    Args:
        named: each weight's average by the weight's slash-separated path.

    Returns:
        A plain dict (``tf.train.Checkpoint`` tracks it as one object).
    """
    return dict(named)


def make_dataset(
    dataset: data_lib.Cifar10,
    per_replica_batch: int,
    seed: int,
    start_step: int,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """Endless shuffled, normalised batches of ``per_replica_batch`` for one input pipeline.

    Args:
        dataset: the data.
        per_replica_batch: ``--batch-size``.
        seed: ``--seed``.
        start_step: global step at start (a resumed run reshuffles differently).
        input_context: set by ``distribute_datasets_from_function``: each worker reads its own
            shard, so workers see different examples.

    Returns:
        A dataset of ``(float32 [B, 32, 32, 3], int32 [B])``.
    """
    ds = tf.data.Dataset.from_tensor_slices((dataset.train_images, dataset.train_labels))
    if input_context is not None and input_context.num_input_pipelines > 1:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    mean = tf.constant(data_lib.CIFAR_MEAN)
    std = tf.constant(data_lib.CIFAR_STD)
    ds = ds.shuffle(min(len(dataset.train_labels), 10_000), seed=seed * 1_000_003 + start_step)
    ds = ds.repeat().batch(per_replica_batch, drop_remainder=True)
    ds = ds.map(lambda x, y: ((tf.cast(x, tf.float32) - mean) / std, y))
    return ds.prefetch(tf.data.AUTOTUNE)


def train(cfg: TrainConfig) -> str:
    """Train and return the path (prefix) of the latest checkpoint.

    Args:
        cfg: the run config.

    Returns:
        The checkpoint prefix, e.g. ``<train_dir>/ckpt-1000``.

    Raises:
        TrainError: bad config, resume mismatch, or (:class:`NaNLossError`) a NaN loss.
    """
    result = train_with_stats(cfg)
    assert result.checkpoint is not None
    return result.checkpoint


def train_with_stats(cfg: TrainConfig) -> TrainResult:
    """Like :func:`train`, also returning steps, last loss and throughput.

    Args:
        cfg: the run config (``save_checkpoints=False`` writes nothing: benchmarks).

    Returns:
        What the run did.

    Raises:
        See :func:`train`.
    """
    cfg.validate()
    dataset = data_lib.load(cfg.data_dir)
    strategy = make_strategy(cfg.strategy, cfg.num_gpus)
    chief = is_chief(strategy)
    latest = tf.train.latest_checkpoint(cfg.train_dir) if cfg.save_checkpoints else None
    if cfg.save_checkpoints:
        check_resume(cfg.train_dir, latest, cfg.resume)
    replicas = strategy.num_replicas_in_sync
    global_batch = cfg.batch_size * replicas

    with strategy.scope():
        net = model.Tf2Model(cfg.seed)
        step = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            name="global_step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )

        def learning_rate() -> tf.Tensor:  # staircase exponential_decay, read every step
            stage = tf.cast(step // cfg.lr_decay_steps, tf.float32)
            return cfg.learning_rate * tf.pow(cfg.lr_decay_factor, stage)

        optimizer = tf.compat.v1.train.MomentumOptimizer(learning_rate, cfg.momentum)
        ema = tf.train.ExponentialMovingAverage(cfg.ema_decay_for("tf2"), num_updates=step)
        averaged = net.averaged_variables()
        # Create the shadows now, in cross-replica context (a tf.function may not create
        # variables on later calls); the update it also runs is a no-op (shadow == value).
        ema.apply(averaged)
        shadows = averages_dict(
            {path: ema.average(var) for path, var in net.named_variables().items()}
        )
        losses = LossAverages()
    ckpt = tf.train.Checkpoint(
        model=net, optimizer=optimizer, ema=shadows, step=step, losses=losses
    )
    write_dir = cfg.train_dir if chief else _worker_dir(cfg.train_dir, strategy)
    manager = tf.train.CheckpointManager(
        ckpt,
        write_dir,
        max_to_keep=cfg.max_to_keep if chief else 1,
        checkpoint_name=CHECKPOINT_NAME,
    )
    if latest is not None:  # an older run's averages (ema/conv1/weights) are read too
        restore_run(ckpt, latest, shadows, model=net, optimizer=optimizer, step=step,
                    losses=losses)  # fmt: skip

    dist_ds = strategy.distribute_datasets_from_function(
        lambda ctx: make_dataset(dataset, cfg.batch_size, cfg.seed, int(step.numpy()), ctx)
    )

    @tf.function
    def train_step(batch: tuple[tf.Tensor, tf.Tensor], poison: tf.Tensor) -> tf.Tensor:
        def replica_step(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            images = images + poison  # 0.0, or NaN for --debug-nan-at-step
            with tf.GradientTape() as tape:
                logits = net(images, training=True)
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
                # Divide by the *global* batch: the optimizer sums replica gradients.
                xent = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
                l2 = cfg.weight_decay * tf.add_n([tf.nn.l2_loss(w) for w in net.decayed_weights()])
                total = xent + tf.nn.scale_regularization_loss(l2)
            variables = net.trainable_variables
            grads = tape.gradient(total, variables)
            optimizer.apply_gradients(zip(grads, variables, strict=True), global_step=step)
            ema.apply(averaged)  # after the update: auto control deps keep program order
            return xent, total

        xent, total = strategy.run(replica_step, args=batch)
        xent = strategy.reduce(tf.distribute.ReduceOp.SUM, xent, axis=None)
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, total, axis=None)
        losses.update(xent, total)
        return total

    current = int(step.numpy())
    start, saved = current, latest
    durations: list[float] = []
    loss_value: float | None = None
    iterator = iter(dist_ds)
    with TrainProgress(cfg.max_steps, current, cfg.progress and chief, "train tf2") as bar:
        while current < cfg.max_steps:
            poison = np.float32(np.nan if cfg.debug_nan_at_step == current + 1 else 0.0)
            t0 = time.perf_counter()
            loss_value = float(train_step(next(iterator), tf.constant(poison)))
            durations.append(time.perf_counter() - t0)
            current += 1
            if not np.isfinite(loss_value):
                raise nan_error(f"loss is {loss_value}", current, saved, cfg.train_dir)
            bar.update(current, loss_value, global_batch / durations[-1], durations[-1])
            if save_due(cfg, current):
                if not _all_finite(ckpt_variables(net, optimizer, losses)
                                   + list(shadows.values())):
                    raise nan_error("variables hold NaN/Inf", current, saved, cfg.train_dir)
                # Every worker must save (the save may run collectives); only the chief's
                # copy is kept in --train-dir.
                path = manager.save(checkpoint_number=current)
                # A worker reports the chief's copy of the same step.
                saved = (
                    path if chief else os.path.join(cfg.train_dir, f"{CHECKPOINT_NAME}-{current}")
                )
    if not chief:
        shutil.rmtree(write_dir, ignore_errors=True)
    if cfg.save_checkpoints and saved is None:
        raise TrainError(f"no checkpoint was written to {cfg.train_dir}")
    return TrainResult(
        saved, current, current - start, loss_value, median_rate(global_batch, durations), replicas
    )


def ckpt_variables(
    net: tf.Module, optimizer: tf.compat.v1.train.Optimizer, *modules: tf.Module
) -> list[tf.Variable]:
    """Every variable a checkpoint of this run holds (for the NaN check before saving)."""
    out = list(net.variables) + list(optimizer.variables())
    for module in modules:
        out.extend(module.variables)
    return out


def _all_finite(variables: list[tf.Variable]) -> bool:
    return all(np.isfinite(v.numpy()).all() for v in variables if v.dtype.is_floating)


def _worker_dir(train_dir: str, strategy: tf.distribute.Strategy) -> str:
    resolver = strategy.cluster_resolver
    return os.path.join(train_dir, f".{resolver.task_type}-{resolver.task_id}-tmp")
