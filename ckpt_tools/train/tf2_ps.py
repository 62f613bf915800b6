"""``--api tf2 --strategy parameter-server``: ``tf.distribute.ParameterServerStrategy``.

The cluster comes from ``TF_CONFIG`` (``--local-cluster`` writes one per task): ``ps`` and
``worker`` tasks run a ``tf.distribute.Server`` and serve until they are stopped; the ``chief``
is the coordinator: it creates the variables (on the ps tasks, through a
``MinSizePartitioner``: a variable of at least :data:`PARTITION_MIN_BYTES` per shard is split
over up to one shard per ps), schedules one training step at a time on whichever worker is
free (``ClusterCoordinator.schedule``: asynchronous training), and saves with a
``tf.train.Checkpoint`` + ``CheckpointManager``.

The updates are written out per shard (``ShardedVariable.variables``): momentum SGD, then the
exponential moving average with ``tf.train.ExponentialMovingAverage``'s warmed-up decay
``min(decay, (1 + step) / (10 + step))``. Shadows and momentum buffers are created with their
variable's shape under the same partitioner, so each shard has a shadow shard of its own.

Checkpoint keys (``A`` = ``.ATTRIBUTES/VARIABLE_VALUE``), the same layout as ``--api tf2``::

    model/<v1-style path>/A        (a partitioned entry when the variable is sharded)
    ema/<path, slashes as .S>/A    momentum/<trainable path>/A   (ema/conv1.Sweights/A,
    one dict: one holder; momentum/conv1/weights/A, a mirror: not an EMA; --resume also
    reads the averages of a run saved before 016f6d0, ema/conv1/weights: tf2_resume)
    losses/{cross_entropy,total_loss}/avg/A   step/A   save_counter/A
"""

from __future__ import annotations

import os
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
    first_line,
    median_rate,
    save_due,
)
from .progress import TrainProgress
from .tf2 import CHECKPOINT_NAME, LossAverages, averages_dict, make_dataset
from .tf2_resume import mirror_module, restore_run

PARTITION_MIN_BYTES = 16 << 10  # 16 KiB: conv3/weights (72 KiB) is split, small ones are not


def _resolver() -> tf.distribute.cluster_resolver.TFConfigClusterResolver:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = resolver.cluster_spec().as_dict()
    if not spec.get("ps") or not spec.get("worker") or not spec.get("chief"):
        raise TrainError(
            "--strategy parameter-server needs a TF_CONFIG cluster with chief, worker and ps "
            "jobs (or use --local-cluster ps=N,workers=M)"
        )
    return resolver


def serve(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> None:
    """Run this worker / ps task's server until the process is stopped (never returns)."""
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    server.join()


def _named_shards(next_creator, **kwargs):  # noqa: ANN001, ANN202 (a variable creator)
    """Give a ShardedVariable its variable's name (``conv3/weights``, from its first shard's).

    ParameterServerStrategy names every ShardedVariable "ShardedVariable", and that is the
    ``full_name`` a checkpoint records for it: the variable's own name -- what pairs
    ``conv3/weights/ExponentialMovingAverage`` with ``conv3/weights`` -- would be lost.
    """
    var = next_creator(**kwargs)
    sharded = tf.__internal__.distribute.ShardedVariable
    if isinstance(var, sharded):
        first = var.variables[0].name.rsplit(":", 1)[0]
        return sharded(var.variables, name=first.rsplit("/part_", 1)[0])
    return var


def _shards(var) -> list[tf.Variable]:  # var: tf.Variable or ShardedVariable
    return list(getattr(var, "variables", [var]))


def _like(var, name: str, zeros: bool) -> object:
    """A non-trainable variable shaped (and so partitioned) like ``var``."""
    value = tf.convert_to_tensor(var)
    return tf.Variable(tf.zeros_like(value) if zeros else value, trainable=False, name=name)


def train_with_stats(cfg: TrainConfig, timeout_s: float) -> TrainResult | None:
    """Run this task: serve (worker, ps: never returns) or coordinate (chief: returns).

    Raises:
        TrainError: no usable TF_CONFIG, resume mismatch, a NaN loss, or a runtime error.
    """
    cfg.validate()
    resolver = _resolver()
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    if resolver.task_type in ("worker", "ps"):
        serve(resolver)
        return None
    if resolver.task_type != "chief":
        raise TrainError(
            f"TF_CONFIG task type must be chief, worker or ps; got {resolver.task_type}"
        )
    try:
        return _coordinate(cfg, resolver, timeout_s)
    except tf.errors.OpError as exc:
        raise TrainError(f"TensorFlow: {_op_error_line(exc)}") from None


def _op_error_line(exc: tf.errors.OpError) -> str:
    # "Graph execution error:" heads most messages; the cause is the last plain line.
    lines = [ln.strip() for ln in str(exc.message).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("[[", "Detected at", "File ", "Node:"))]
    return lines[-1] if lines else first_line(exc)


def _coordinate(cfg: TrainConfig, resolver, timeout_s: float) -> TrainResult:
    dataset = data_lib.load(cfg.data_dir)
    latest = tf.train.latest_checkpoint(cfg.train_dir)
    check_resume(cfg.train_dir, latest, cfg.resume)
    num_ps = resolver.cluster_spec().num_tasks("ps")
    num_workers = resolver.cluster_spec().num_tasks("worker")
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=PARTITION_MIN_BYTES, max_shards=num_ps
    )
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    decay = cfg.ema_decay_for("tf2")
    with strategy.scope(), tf.variable_creator_scope(_named_shards):
        net = model.Tf2Model(cfg.seed)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        named = net.named_variables()
        trainable = {k: v for k, v in named.items() if "moving_" not in k}
        shadow_vars = {
            k: _like(v, f"{k}/ExponentialMovingAverage", False) for k, v in named.items()
        }
        momentum_vars = {k: _like(v, f"{k}/Momentum", True) for k, v in trainable.items()}
        losses = LossAverages()
    for path, var in named.items():
        if len(_shards(shadow_vars[path])) != len(_shards(var)):
            raise TrainError(f"{path}: its shadow is sharded differently from the variable")
    shadows, momentum = averages_dict(shadow_vars), mirror_module(momentum_vars, "momentum")
    ckpt = tf.train.Checkpoint(model=net, ema=shadows, momentum=momentum, step=step, losses=losses)
    manager = tf.train.CheckpointManager(
        ckpt, cfg.train_dir, max_to_keep=cfg.max_to_keep, checkpoint_name=CHECKPOINT_NAME
    )
    if latest is not None:  # an older run's averages (ema/conv1/weights) are read too
        restore_run(ckpt, latest, shadows, model=net, momentum=momentum, step=step,
                    losses=losses)  # fmt: skip

    start = int(step.numpy())
    per_worker = coordinator.create_per_worker_dataset(
        lambda: strategy.distribute_datasets_from_function(
            lambda ctx: make_dataset(dataset, cfg.batch_size, cfg.seed, start, ctx)
        )
    )
    iterator = iter(per_worker)
    pairs = {
        path: (_shards(var), _shards(shadow_vars[path]), _shards(momentum_vars.get(path, var)))
        for path, var in named.items()
    }
    train_shards = [s for path in trainable for s in pairs[path][0]]

    @tf.function
    def worker_step(it) -> tf.Tensor:
        def replica_step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                logits = net(images, training=True)
                xent = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
                )
                l2 = cfg.weight_decay * tf.add_n(
                    [tf.nn.l2_loss(tf.convert_to_tensor(named[k])) for k in named
                     if k.endswith("/weights")]
                )  # fmt: skip
                total = xent + l2
            grads = dict(zip([id(s) for s in train_shards], tape.gradient(total, train_shards),
                             strict=True))  # fmt: skip
            stage = tf.cast(step // cfg.lr_decay_steps, tf.float32)
            lr = cfg.learning_rate * tf.pow(cfg.lr_decay_factor, stage)
            updates = []
            for path in trainable:
                for var, buf in zip(pairs[path][0], pairs[path][2], strict=True):
                    new_buf = buf.assign(cfg.momentum * buf + grads[id(var)])
                    updates.append(var.assign_sub(lr * new_buf))
            with tf.control_dependencies(updates):
                new_step = step.assign_add(1)
            ema_decay = tf.minimum(decay, (1.0 + tf.cast(new_step, tf.float32)) /
                                   (10.0 + tf.cast(new_step, tf.float32)))  # fmt: skip
            with tf.control_dependencies(updates):
                for path in named:
                    for var, shadow in zip(pairs[path][0], pairs[path][1], strict=True):
                        shadow.assign_sub((shadow - var) * (1.0 - ema_decay))
                losses.update(xent, total)
            return total

        return strategy.run(replica_step, args=next(it))

    current, saved, loss_value = start, latest, None
    durations: list[float] = []
    deadline = time.monotonic() + timeout_s
    global_batch = cfg.batch_size
    with TrainProgress(cfg.max_steps, current, cfg.progress, "train tf2 ps") as bar:
        while current < cfg.max_steps:
            # Schedule up to the next checkpoint, then wait for it: asynchronous in between.
            chunk_end = min(cfg.max_steps, (current // cfg.save_every + 1) * cfg.save_every)
            t0 = time.perf_counter()
            results = [coordinator.schedule(worker_step, args=(iterator,))
                       for _ in range(chunk_end - current)]  # fmt: skip
            coordinator.join()
            elapsed = time.perf_counter() - t0
            durations.extend([elapsed / len(results)] * len(results))
            loss_value = float(results[-1].fetch())
            current = int(step.numpy())
            if not np.isfinite(loss_value):
                raise TrainError(f"loss is {loss_value} at step {current}: training stopped")
            bar.update(current, loss_value, global_batch / durations[-1], durations[-1])
            if save_due(cfg, current) or current >= cfg.max_steps:
                saved = manager.save(checkpoint_number=current)
            if time.monotonic() > deadline:
                raise TrainError(f"did not reach --max-steps within {timeout_s:.0f} s")
    if saved is None:
        raise TrainError(f"no checkpoint was written to {cfg.train_dir}")
    return TrainResult(
        saved, current, current - start, loss_value, median_rate(global_batch, durations),
        num_workers,
    )
