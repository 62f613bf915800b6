"""``--api v1`` on parameter servers: the Inception / CIFAR-10 distributed trainers' pattern.

Between-graph replication on TensorFlow's own gRPC runtime (``tf.compat.v1.train.Server``):

* a **ps** task serves the variables; TF1 ps tasks ``join()`` forever, so instead each ps waits
  on a *done queue* (a ``FIFOQueue`` with a ``shared_name`` on its own device) until every
  worker has enqueued one token, then exits 0;
* every **worker** builds the model under ``replica_device_setter`` (variables round-robin over
  the ps tasks, ops on the worker), trains with
  ``SyncReplicasOptimizer(variable_averages=ema, variables_to_average=trainable_variables() +
  moving_average_variables())`` (or plain asynchronous updates, ``sync=False``, with the EMA
  applied after each update as in the single-machine path), runs the BN update ops before the
  loss; worker 0, the chief, keeps the loss averages (``name='avg'``) and saves with
  ``Saver(sharded=True)``: one ``.data`` shard per ps device.

Checkpoint keys of a 2-ps sync run (``model.ckpt-<step>.data-0000{0,1}-of-00002``)::

    global_step   conv{1,2,3}/weights
    conv{1,2,3}/BatchNorm/{beta,gamma,moving_mean,moving_variance}
    logits/{weights,biases}  <each of those but global_step>/ExponentialMovingAverage
    <trainable>/Momentum     cross_entropy/avg  total_loss/avg
    sync_rep_local_step is a local variable (not saved); the token queue and the gradient
    accumulators are not variables.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from . import data as data_lib
from . import model
from .common import (
    ClusterConfig,
    TrainConfig,
    TrainError,
    TrainResult,
    check_resume,
    first_line,
    median_rate,
    nan_error,
)
from .progress import TrainProgress

CHECKPOINT_BASENAME = "model.ckpt"
DONE_QUEUE = "ckpt_train_done_queue_{}"  # shared_name of ps task i's done queue
RESTORE_MAP_FILE = "variables_to_restore.json"  # the chief's ema.variables_to_restore()
STOP_GRACE_S = 5  # how long closing a session waits for its queue-runner threads
READY_POLL_S = 0.5  # how often a worker checks whether the chief has initialised the model


def cluster_spec(cluster: ClusterConfig) -> tf.train.ClusterSpec:
    """The ``ps`` / ``worker`` ClusterSpec of ``--ps-hosts`` / ``--worker-hosts``."""
    return tf.train.ClusterSpec(
        {"ps": list(cluster.ps_hosts), "worker": list(cluster.worker_hosts)}
    )


def _server(cluster: ClusterConfig) -> tf.compat.v1.train.Server:
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    try:
        return tf.compat.v1.train.Server(
            cluster_spec(cluster),
            job_name=cluster.job_name,
            task_index=cluster.task_index,
            config=config,
        )
    except (tf.errors.OpError, ValueError) as exc:
        raise TrainError(
            f"cannot start the {cluster.job_name} {cluster.task_index} server: {first_line(exc)}"
        ) from None


def _done_queues(cluster: ClusterConfig, ps_tasks: list[int]) -> list[tf.queue.FIFOQueue]:
    # One queue per ps, on that ps: the ps reads its own; each worker writes one token to every
    # ps when it is done, so every ps knows when all workers are.
    queues = []
    for i in ps_tasks:
        with tf.device(f"/job:ps/task:{i}"):
            queues.append(
                tf.queue.FIFOQueue(
                    len(cluster.worker_hosts),
                    tf.int32,
                    shapes=[[]],
                    shared_name=DONE_QUEUE.format(i),
                )
            )
    return queues


def run_ps(cluster: ClusterConfig, timeout_s: float) -> None:
    """Serve variables until every worker has reported done, then return.

    Args:
        cluster: this task's cluster flags (``job_name == "ps"``).
        timeout_s: give up after this many seconds.

    Raises:
        TrainError: the server cannot start, or the workers did not finish within ``timeout_s``.
    """
    server = _server(cluster)
    graph = tf.Graph()
    with graph.as_default():
        queue = _done_queues(cluster, [cluster.task_index])[0]
        dequeue = queue.dequeue_many(len(cluster.worker_hosts))
    options = tf.compat.v1.RunOptions(timeout_in_ms=int(timeout_s * 1000))
    # device_filters: talk to this ps only, rather than wait for every task of the cluster.
    config = tf.compat.v1.ConfigProto(device_filters=[f"/job:ps/task:{cluster.task_index}"])
    with tf.compat.v1.Session(server.target, graph=graph, config=config) as sess:
        try:
            sess.run(dequeue, options=options)
        except tf.errors.DeadlineExceededError:
            raise TrainError(
                f"ps {cluster.task_index}: the workers did not finish within {timeout_s:.0f} s"
            ) from None


def worker_session_config(cluster: ClusterConfig) -> tf.compat.v1.ConfigProto:
    """Soft placement; see the ps tasks and this worker only (workers never wait for peers)."""
    return tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        device_filters=["/job:ps", f"/job:worker/task:{cluster.task_index}"],
    )


@dataclass
class WorkerGraph:
    """Handles into one worker's training graph."""

    graph: tf.Graph
    images: tf.Tensor
    labels: tf.Tensor
    train_op: tf.Tensor  # the loss, after this worker's update (or token)
    global_step: tf.Variable
    hooks: list
    saver: tf.compat.v1.train.Saver
    done: tf.Operation  # enqueue one token to every ps' done queue
    restore_map: dict[str, str]  # ema.variables_to_restore() of this graph, by name


def build_worker_graph(cfg: TrainConfig, cluster: ClusterConfig) -> WorkerGraph:
    """Build a worker's graph under ``replica_device_setter``.

    Args:
        cfg: the run config.
        cluster: this task's cluster flags (``job_name == "worker"``).

    Returns:
        The graph and its handles.
    """
    is_chief = cluster.task_index == 0
    num_workers = len(cluster.worker_hosts)
    graph = tf.Graph()
    setter = tf.compat.v1.train.replica_device_setter(
        worker_device=f"/job:worker/task:{cluster.task_index}", cluster=cluster_spec(cluster)
    )
    with graph.as_default(), tf.compat.v1.device(setter):
        tf.compat.v1.set_random_seed(cfg.seed)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        images = tf.compat.v1.placeholder(tf.float32, [cfg.batch_size, 32, 32, 3], "images")
        labels = tf.compat.v1.placeholder(tf.int32, [cfg.batch_size], "labels")
        logits = model.v1_inference(images, is_training=True, weight_decay=cfg.weight_decay)
        xent = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits),
            name="cross_entropy",
        )
        tf.compat.v1.add_to_collection("losses", xent)
        losses = tf.compat.v1.get_collection("losses")
        total_loss = tf.add_n(losses, name="total_loss")
        if is_chief:
            # As the distributed Inception trainer: only the chief keeps the loss averages.
            loss_averages = tf.compat.v1.train.ExponentialMovingAverage(0.9, name="avg")
            with tf.control_dependencies([loss_averages.apply([xent, total_loss])]):
                total_loss = tf.identity(total_loss)
        bn_updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(bn_updates):
            total_loss = tf.identity(total_loss)
        lr = tf.compat.v1.train.exponential_decay(
            cfg.learning_rate,
            global_step,
            cfg.lr_decay_steps,
            cfg.lr_decay_factor,
            staircase=True,
            name="learning_rate",
        )
        opt = tf.compat.v1.train.MomentumOptimizer(lr, cfg.momentum)
        ema = tf.compat.v1.train.ExponentialMovingAverage(cfg.ema_decay_for("v1"), global_step)
        to_average = tf.compat.v1.trainable_variables() + tf.compat.v1.moving_average_variables()
        hooks: list = []
        if cluster.sync_replicas:
            opt = tf.compat.v1.train.SyncReplicasOptimizer(
                opt,
                replicas_to_aggregate=num_workers,
                total_num_replicas=num_workers,
                variable_averages=ema,
                variables_to_average=to_average,
            )
            apply_op = opt.apply_gradients(
                opt.compute_gradients(total_loss), global_step=global_step
            )
            hooks.append(opt.make_session_run_hook(is_chief, num_tokens=0))
            if is_chief:
                # A worker that started one more step than the chief would wait for a token
                # forever: at the end the chief hands every worker a token to finish with.
                hooks.append(_ReleaseTokensHook(opt.get_init_tokens_op(num_workers)))
            with tf.control_dependencies([apply_op]):
                train_op = tf.identity(total_loss, name="train_op")
        else:
            apply_op = opt.apply_gradients(
                opt.compute_gradients(total_loss), global_step=global_step
            )
            with tf.control_dependencies([apply_op]):
                averages_op = ema.apply(to_average)
            with tf.control_dependencies([apply_op, averages_op]):
                train_op = tf.identity(total_loss, name="train_op")
        # sharded=True: each ps device writes its own .data shard, in parallel.
        saver = tf.compat.v1.train.Saver(
            sharded=True, max_to_keep=cfg.max_to_keep, save_relative_paths=True
        )
        every_ps = list(range(len(cluster.ps_hosts)))
        done = tf.group(*[q.enqueue(1) for q in _done_queues(cluster, every_ps)], name="done")
        # TensorFlow's own restore map, taken from the EMA object that made the shadows (a
        # fresh ExponentialMovingAverage in this graph would name them "..._1").
        restore_map = {k: v.op.name for k, v in ema.variables_to_restore().items()}
    return WorkerGraph(
        graph, images, labels, train_op, global_step, hooks, saver, done, restore_map
    )


def _monitored_session(
    cfg: TrainConfig,
    cluster: ClusterConfig,
    target: str,
    handles: WorkerGraph,
    hooks: list,
) -> tf.compat.v1.train.MonitoredSession:
    """The chief's session initialises or restores and saves; the others wait until it has."""
    config = worker_session_config(cluster)
    scaffold = tf.compat.v1.train.Scaffold(saver=handles.saver)
    if cluster.task_index == 0:
        return tf.compat.v1.train.MonitoredTrainingSession(
            master=target,
            is_chief=True,
            checkpoint_dir=cfg.train_dir,
            scaffold=scaffold,
            hooks=hooks,  # run after the CheckpointSaverHook: the last save, then the tokens
            save_checkpoint_steps=cfg.save_every,
            save_checkpoint_secs=None,
            save_summaries_steps=None,
            save_summaries_secs=None,
            log_step_count_steps=None,
            stop_grace_period_secs=STOP_GRACE_S,
            config=config,
        )
    return tf.compat.v1.train.MonitoredSession(
        session_creator=_WorkerSessionCreator(scaffold=scaffold, master=target, config=config),
        hooks=hooks,
        stop_grace_period_secs=STOP_GRACE_S,
    )


class _WorkerSessionCreator(tf.compat.v1.train.WorkerSessionCreator):
    # TensorFlow's polls every 30 s for the chief to initialise the variables; a short run
    # would spend most of its time asleep.
    def _get_session_manager(self):  # noqa: ANN202
        if self._session_manager is None:
            self._session_manager = tf.compat.v1.train.SessionManager(
                local_init_op=self._scaffold.local_init_op,
                local_init_feed_dict=self._scaffold.local_init_feed_dict,
                ready_op=self._scaffold.ready_op,
                ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
                graph=tf.compat.v1.get_default_graph(),
                recovery_wait_secs=READY_POLL_S,
            )
        return self._session_manager


class _ReleaseTokensHook(tf.compat.v1.train.SessionRunHook):
    def __init__(self, release: tf.Operation) -> None:
        self._release = release

    def end(self, session: tf.compat.v1.Session) -> None:
        session.run(self._release)


def run_worker(cfg: TrainConfig, cluster: ClusterConfig) -> TrainResult:
    """Train as one worker; the chief (task 0) also saves; report done to every ps.

    Args:
        cfg: the run config.
        cluster: this task's cluster flags (``job_name == "worker"``).

    Returns:
        What the run did (the chief's checkpoint; other workers report it too).

    Raises:
        TrainError: bad config, resume mismatch, a NaN loss, or a TensorFlow runtime error.
    """
    is_chief = cluster.task_index == 0
    dataset = data_lib.load(cfg.data_dir)
    if is_chief:
        check_resume(cfg.train_dir, tf.train.latest_checkpoint(cfg.train_dir), cfg.resume)
        os.makedirs(cfg.train_dir, exist_ok=True)
    server = _server(cluster)
    handles = build_worker_graph(cfg, cluster)
    if is_chief:
        with open(os.path.join(cfg.train_dir, RESTORE_MAP_FILE), "w") as f:
            json.dump(handles.restore_map, f, indent=1, sort_keys=True)
    _quiet_cancelled_threads()
    hooks = [*handles.hooks, tf.compat.v1.train.StopAtStepHook(last_step=cfg.max_steps)]
    durations: list[float] = []
    loss_value: float | None = None
    step = 0
    with handles.graph.as_default():
        session = _monitored_session(cfg, cluster, server.target, handles, hooks)
        with session as sess:
            step = int(sess.run(handles.global_step))
            # Each worker draws its own batches: the workers together see more of the data.
            batches = data_lib.batches(
                dataset, cfg.batch_size, cfg.seed + 1000 * cluster.task_index, step
            )
            label = f"train v1 worker {cluster.task_index}"
            with TrainProgress(cfg.max_steps, step, cfg.progress and is_chief, label) as bar:
                while not sess.should_stop():
                    images, labels = next(batches)
                    t0 = time.perf_counter()
                    loss_value, seen = sess.run(
                        [handles.train_op, handles.global_step],
                        {handles.images: images, handles.labels: labels},
                    )
                    loss_value = float(loss_value)
                    durations.append(time.perf_counter() - t0)
                    step = max(step, int(seen) + 1)  # read with the step, maybe before its update
                    if not np.isfinite(loss_value):
                        raise nan_error(f"loss is {loss_value}", step, None, cfg.train_dir)
                    bar.update(step, loss_value, cfg.batch_size / durations[-1], durations[-1])
        # Only now (after the chief's last save): let the ps tasks go.
        config = worker_session_config(cluster)
        with tf.compat.v1.Session(server.target, config=config) as done_sess:
            done_sess.run(handles.done)
    latest = tf.train.latest_checkpoint(cfg.train_dir)
    if is_chief and latest is None:
        raise TrainError(f"no checkpoint was written to {cfg.train_dir}")
    final_step = max(step, cfg.max_steps) if latest else step
    return TrainResult(
        checkpoint=latest,
        global_step=final_step,
        steps_run=len(durations),
        final_loss=loss_value,
        examples_per_sec=median_rate(cfg.batch_size, durations),
        num_devices=len(cluster.worker_hosts),
    )


def _quiet_cancelled_threads() -> None:
    # Closing the chief's session cancels its SyncReplicasOptimizer queue-runner thread in the
    # middle of a step; the thread then dies with a CancelledError traceback. Expected: drop it.
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if not isinstance(args.exc_value, tf.errors.CancelledError):
            previous(args)

    threading.excepthook = hook


def train_with_stats(
    cfg: TrainConfig, cluster: ClusterConfig, timeout_s: float
) -> TrainResult | None:
    """Run this task of a ps/worker cluster: ``None`` for a ps task, the result for a worker.

    Raises:
        TrainError: see :func:`run_ps` and :func:`run_worker`.
    """
    cfg.validate()
    if cluster.job_name == "ps":
        run_ps(cluster, timeout_s)
        return None
    return run_worker(cfg, cluster)
