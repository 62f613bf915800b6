"""Graph-mode (``--api v1``) multi-tower trainer, the cifar10_multi_gpu_train / Inception pattern.

One tower per device (``/gpu:i``, or ``/cpu:0``), variables shared through variable_scope reuse
and kept on the CPU, gradients averaged on the CPU (:func:`average_gradients`), only the first
tower's batch-norm updates run, ``ExponentialMovingAverage(decay, global_step)`` over
``trainable_variables() + moving_average_variables()``, per-tower loss averages with
``ExponentialMovingAverage(0.9, name='avg')``, ``exponential_decay`` learning rate, Momentum,
and ``tf.compat.v1.train.Saver`` writing ``model.ckpt-<step>`` (+ ``.meta``).

Checkpoint keys (``tf.train.list_variables``)::

    global_step                                                    int64 []
    conv{1,2,3}/weights  conv{1,2,3}/BatchNorm/{beta,gamma,moving_mean,moving_variance}
    logits/weights  logits/biases
    <every variable above but global_step>/ExponentialMovingAverage   (BN statistics included)
    <every trainable variable>/Momentum
    tower_<i>/cross_entropy/avg  tower_<i>/total_loss/avg          (one pair per tower)

The loss averages have no ``/biased`` / ``/local_step`` companions: ExponentialMovingAverage
now defaults to ``zero_debias=False``; TF 0.12-era releases always debiased tensor averages and
wrote those keys (tensorflow#5827). Resume with the same ``--num-gpus``: each tower has its own
loss averages. In the
``.meta``, MOVING_AVERAGE_VARIABLES lists the BN statistics twice -- once from the slim-style
batch norm, once from ``ema.apply`` (which adds every variable it averages) -- as real slim +
EMA graphs did.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

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
    nan_error,
    save_due,
)
from .devices import tower_devices
from .progress import TrainProgress

CHECKPOINT_BASENAME = "model.ckpt"
TOWER_NAME = "tower"


def average_gradients(tower_grads: list[list[tuple[tf.Tensor, tf.Variable]]]) -> list:
    """Average each variable's gradient over the towers (the synchronisation point).

    Args:
        tower_grads: per tower, the ``(gradient, variable)`` list of ``compute_gradients``;
            the variables are the same (shared) in every tower, in the same order.

    Returns:
        One ``(mean gradient, variable)`` per variable; ``(None, variable)`` where no tower has
        a gradient.
    """
    averaged = []
    for grad_and_vars in zip(*tower_grads, strict=True):
        var = grad_and_vars[0][1]
        grads = [g for g, _ in grad_and_vars if g is not None]
        if not grads:
            averaged.append((None, var))
            continue
        averaged.append((tf.reduce_mean(tf.stack(grads, axis=0), axis=0), var))
    return averaged


def tower_loss(
    scope: str, images: tf.Tensor, labels: tf.Tensor, reuse: bool, weight_decay: float
) -> tf.Tensor:
    """Build one tower: inference, its losses, and their moving averages.

    Args:
        scope: the tower's name scope (``tower_0/``), used to pick this tower's losses.
        images: this tower's slice of the batch.
        labels: matching labels.
        reuse: True for every tower after the first (share the variables).
        weight_decay: L2 factor.

    Returns:
        The tower's total loss, which only evaluates after its loss averages updated.
    """
    # Reuse only around the model: the loss-average shadows below are new per tower.
    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=reuse):
        logits = model.v1_inference(images, is_training=True, weight_decay=weight_decay)
    xent = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits),
        name="cross_entropy",
    )
    tf.compat.v1.add_to_collection("losses", xent)
    losses = tf.compat.v1.get_collection("losses", scope)
    total_loss = tf.add_n(losses, name="total_loss")
    loss_averages = tf.compat.v1.train.ExponentialMovingAverage(0.9, name="avg")
    loss_averages_op = loss_averages.apply([xent, total_loss])
    with tf.control_dependencies([loss_averages_op]):
        return tf.identity(total_loss)


@dataclass
class TrainGraph:
    """Handles into a built training graph."""

    graph: tf.Graph
    images: tf.Tensor  # placeholder, [towers * batch, 32, 32, 3]
    labels: tf.Tensor  # placeholder, [towers * batch]
    train_op: tf.Operation
    loss: tf.Tensor  # mean of the tower losses
    global_step: tf.Variable
    saver: tf.compat.v1.train.Saver
    init: tf.Operation
    all_finite: tf.Tensor  # True when no float variable holds NaN/Inf
    num_towers: int


def build_train_graph(cfg: TrainConfig, devices: list[str]) -> TrainGraph:
    """Build the multi-tower training graph in a new ``tf.Graph``.

    Args:
        cfg: the run config.
        devices: one device per tower (see :func:`ckpt_tools.train.devices.tower_devices`).

    Returns:
        The graph and its handles.
    """
    graph = tf.Graph()
    with graph.as_default(), tf.device("/cpu:0"):
        tf.compat.v1.set_random_seed(cfg.seed)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        n = len(devices)
        images = tf.compat.v1.placeholder(tf.float32, [n * cfg.batch_size, 32, 32, 3], "images")
        labels = tf.compat.v1.placeholder(tf.int32, [n * cfg.batch_size], "labels")
        lr = tf.compat.v1.train.exponential_decay(
            cfg.learning_rate,
            global_step,
            cfg.lr_decay_steps,
            cfg.lr_decay_factor,
            staircase=True,
            name="learning_rate",
        )
        opt = tf.compat.v1.train.MomentumOptimizer(lr, cfg.momentum)
        image_splits = tf.split(images, n)
        label_splits = tf.split(labels, n)
        tower_grads, tower_losses, bn_updates = [], [], []
        for i, device in enumerate(devices):
            with tf.device(device), tf.name_scope(f"{TOWER_NAME}_{i}") as scope:
                loss = tower_loss(scope, image_splits[i], label_splits[i], i > 0, cfg.weight_decay)
                if i == 0:
                    # Like Inception: keep one tower's BN updates; the statistics of the
                    # others are near-identical and running them all would serialise towers.
                    bn_updates = tf.compat.v1.get_collection(
                        tf.compat.v1.GraphKeys.UPDATE_OPS, scope
                    )
                tower_grads.append(opt.compute_gradients(loss))
                tower_losses.append(loss)
        grads = average_gradients(tower_grads)
        apply_gradient_op = opt.apply_gradients(grads, global_step=global_step)
        ema = tf.compat.v1.train.ExponentialMovingAverage(cfg.ema_decay_for("v1"), global_step)
        to_average = tf.compat.v1.trainable_variables() + tf.compat.v1.moving_average_variables()
        # After the update, so the shadows average the new weights (cifar10.py does the same).
        with tf.control_dependencies([apply_gradient_op, *bn_updates]):
            variables_averages_op = ema.apply(to_average)
        train_op = tf.group(apply_gradient_op, variables_averages_op, *bn_updates, name="train")
        mean_loss = tf.reduce_mean(tf.stack(tower_losses), name="loss")
        all_vars = tf.compat.v1.global_variables()
        floats = [v for v in all_vars if v.dtype.base_dtype.is_floating]
        all_finite = tf.reduce_all(
            [tf.reduce_all(tf.math.is_finite(v)) for v in floats], name="all_finite"
        )
        # Relative paths in the `checkpoint` state file: a copied or moved train dir (a test
        # fixture, say) still resolves to its own files, as tf2's CheckpointManager does.
        saver = tf.compat.v1.train.Saver(
            all_vars, max_to_keep=cfg.max_to_keep, save_relative_paths=True
        )
        init = tf.compat.v1.global_variables_initializer()
    return TrainGraph(
        graph, images, labels, train_op, mean_loss, global_step, saver, init, all_finite, n
    )


def session_config() -> tf.compat.v1.ConfigProto:
    """Soft placement (ops without a GPU kernel fall back to CPU), grow GPU memory on demand."""
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    config.gpu_options.allow_growth = True
    return config


def train(cfg: TrainConfig) -> str:
    """Train and return the path (prefix) of the latest checkpoint.

    Args:
        cfg: the run config.

    Returns:
        The checkpoint prefix, e.g. ``<train_dir>/model.ckpt-1000``.

    Raises:
        TrainError: bad config, resume mismatch, or (:class:`NaNLossError`) a NaN loss.
        DataError: ``cfg.data_dir`` lacks the CIFAR-10 batches.
    """
    result = train_with_stats(cfg)
    assert result.checkpoint is not None  # train_with_stats raises when nothing was saved
    return result.checkpoint


def train_with_stats(cfg: TrainConfig) -> TrainResult:
    """Like :func:`train`, returning the step count, last loss and throughput as well.

    Args:
        cfg: the run config (``save_checkpoints=False`` for benchmarks: no files written).

    Returns:
        What the run did.

    Raises:
        See :func:`train`.
    """
    cfg.validate()
    dataset = data_lib.load(cfg.data_dir)
    latest = tf.train.latest_checkpoint(cfg.train_dir) if cfg.save_checkpoints else None
    if cfg.save_checkpoints:
        check_resume(cfg.train_dir, latest, cfg.resume)
        os.makedirs(cfg.train_dir, exist_ok=True)
    handles = build_train_graph(cfg, tower_devices(cfg.num_gpus))
    global_batch = handles.num_towers * cfg.batch_size
    prefix = os.path.join(cfg.train_dir, CHECKPOINT_BASENAME)
    with handles.graph.as_default(), tf.compat.v1.Session(config=session_config()) as sess:
        sess.run(handles.init)
        if latest is not None:
            _restore(handles.saver, sess, latest)
            # A fresh Saver knows only what it saves: without this the state file would list
            # the new checkpoints alone and --max-to-keep never prune the earlier ones (u16
            # F13). MonitoredTrainingSession's SessionManager makes the same call.
            state = tf.train.get_checkpoint_state(cfg.train_dir)
            handles.saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))
        step = int(sess.run(handles.global_step))
        start = step
        saved = latest
        durations: list[float] = []
        loss_value: float | None = None
        batches = data_lib.batches(dataset, global_batch, cfg.seed, step)
        with TrainProgress(cfg.max_steps, step, cfg.progress, "train v1") as bar:
            while step < cfg.max_steps:
                images, labels = next(batches)
                if cfg.debug_nan_at_step == step + 1:
                    images = np.full_like(images, np.nan)
                t0 = time.perf_counter()
                _, loss_value = sess.run(
                    [handles.train_op, handles.loss],
                    {handles.images: images, handles.labels: labels},
                )
                durations.append(time.perf_counter() - t0)
                step += 1
                if not np.isfinite(loss_value):
                    raise nan_error(f"loss is {loss_value}", step, saved, cfg.train_dir)
                bar.update(step, float(loss_value), global_batch / durations[-1], durations[-1])
                if save_due(cfg, step):
                    # A finite loss can still come with NaN weights (the update after it):
                    # never write those.
                    if not sess.run(handles.all_finite):
                        raise nan_error("variables hold NaN/Inf", step, saved, cfg.train_dir)
                    saved = handles.saver.save(sess, prefix, global_step=step)
    if cfg.save_checkpoints and saved is None:
        raise TrainError(f"no checkpoint was written to {cfg.train_dir}")
    return TrainResult(
        checkpoint=saved,
        global_step=step,
        steps_run=step - start,
        final_loss=None if loss_value is None else float(loss_value),
        examples_per_sec=median_rate(global_batch, durations),
        num_devices=handles.num_towers,
    )


def _restore(saver: tf.compat.v1.train.Saver, sess: tf.compat.v1.Session, path: str) -> None:
    try:
        saver.restore(sess, path)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, ValueError) as exc:
        raise TrainError(
            f"cannot resume from {path} (was it written by --api v1 with this model?): "
            f"{first_line(exc)}"
        ) from None
