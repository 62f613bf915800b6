"""The distributed modes of ``ckpt train``: their flags, and which task runs what.

* ``--api v1 --ps-hosts ... --worker-hosts ... --job-name ps|worker --task-index i``: one task
  of the classic ps + SyncReplicasOptimizer cluster (:mod:`.v1_dist`).
* ``--api tf2 --strategy parameter-server`` with ``TF_CONFIG``: one task of a
  ParameterServerStrategy cluster (:mod:`.tf2_ps`); the ``chief`` task is the coordinator.
* ``--local-cluster ps=N,workers=M`` with either: every task on this machine (:mod:`.cluster`).

TensorFlow-free (imported by the CLI at start-up); the trainers are imported when they run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Annotated

import typer

from .cluster import (
    Task,
    exit_with_parent,
    free_ports,
    hosts,
    parse_local_cluster,
    run_cluster,
    train_dir_lock,
    wait_for_hosts,
)
from .common import (
    ClusterConfig,
    TrainConfig,
    TrainExistsError,
    TrainResult,
    TrainUsageError,
)

DEFAULT_TIMEOUT_S = 3600.0

#: What a local cluster's launcher gives its chief: ``--train-dir`` as the user spelled it.
#: Every task gets its absolute path; the chief's result line names the checkpoint under the
#: spelling given, as every other mode does (review-32-user-u34).
GIVEN_ENV = "CKPT_TRAIN_DIR_GIVEN"

PsHostsOpt = Annotated[
    str | None, typer.Option(metavar="HOST:PORT,...",
        help="v1 cluster: comma-separated host:port of the ps tasks.")
]
WorkerHostsOpt = Annotated[
    str | None,
    typer.Option(metavar="HOST:PORT,...",
                 help="v1 cluster: comma-separated host:port of the workers (task 0 = chief)."),
]
JobNameOpt = Annotated[str | None, typer.Option(
    metavar="ps|worker", help="v1 cluster: this task's job, ps or worker.")]
TaskIndexOpt = Annotated[int, typer.Option(min=0, help="v1 cluster: this task's index in its job.")]
SyncOpt = Annotated[
    bool,
    typer.Option(
        "--sync-replicas/--no-sync-replicas",
        help="v1 cluster: SyncReplicasOptimizer (EMA applied by it), or asynchronous updates.",
    ),
]
LocalClusterOpt = Annotated[
    str | None,
    typer.Option(
        metavar="ps=N,workers=M",
        help="Run a whole cluster on 127.0.0.1, one process per task: ps=N,workers=M "
        "(--api v1, or --api tf2 --strategy parameter-server). Exit code = the chief's."
    ),
]
ClusterTimeoutOpt = Annotated[
    float, typer.Option(min=1, metavar="SECONDS",
        help="Cluster runs: a --local-cluster run, a ps waiting for its "
                        "workers and a worker waiting for the ps hosts give up after this many "
                        "seconds.")
]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", help="Show TensorFlow / gRPC start-up and log lines.")
]


@dataclass(frozen=True)
class DistOptions:
    """The distributed flags of one ``ckpt train`` call."""

    api: str
    ps_hosts: str | None
    worker_hosts: str | None
    job_name: str | None
    task_index: int
    sync_replicas: bool
    local_cluster: str | None
    timeout_s: float
    verbose: bool
    json_output: bool

    def active(self, cfg: TrainConfig) -> bool:
        """Whether this call is a cluster run (or one task of one)."""
        return bool(
            self.local_cluster
            or self.job_name
            or self.ps_hosts
            or self.worker_hosts
            or cfg.strategy == "parameter-server"
        )

    def cluster(self) -> ClusterConfig:
        """This task's :class:`ClusterConfig`.

        Raises:
            TrainUsageError: missing or inconsistent flags.
        """
        config = ClusterConfig(
            ps_hosts=_split(self.ps_hosts),
            worker_hosts=_split(self.worker_hosts),
            job_name=self.job_name or "",
            task_index=self.task_index,
            sync_replicas=self.sync_replicas,
        )
        config.validate()
        return config


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(h.strip() for h in (value or "").split(",") if h.strip())


def _refuse_existing(cfg: TrainConfig) -> None:
    """A fresh ``--local-cluster`` run into a directory with a checkpoint state file.

    Raises:
        TrainExistsError: ``cfg.train_dir/checkpoint`` exists and ``--resume`` was not given.
    """
    state = os.path.join(cfg.train_dir, "checkpoint")
    if not cfg.resume and os.path.isfile(state):
        raise TrainExistsError(
            f"{cfg.train_dir} already exists with checkpoints (state file {state}); "
            "pass --resume to continue, or choose another --train-dir"
        )


def run(cfg: TrainConfig, dist: DistOptions) -> TrainResult | None:
    """Run a cluster (``--local-cluster``) or this process' task of one.

    Returns:
        A worker's (or coordinator's) result; None for a ps task, which prints nothing.

    Raises:
        TrainUsageError: bad flags; TrainExistsError: a fresh run over checkpoints;
        TrainError: the task failed.
        typer.Exit: after a ``--local-cluster`` run, with the chief's exit code.
    """
    parameter_server = cfg.strategy == "parameter-server"
    if dist.api == "tf2" and not parameter_server:
        raise TrainUsageError("--api tf2 runs on a cluster only with --strategy parameter-server")
    if dist.api not in ("v1", "tf2"):
        raise TrainUsageError(f"--api {dist.api} has no ps cluster mode (use v1 or tf2)")
    if dist.local_cluster and (dist.ps_hosts or dist.worker_hosts or dist.job_name):
        raise TrainUsageError(
            "--local-cluster chooses its own hosts and jobs: drop --ps-hosts/--worker-hosts/"
            "--job-name"
        )
    if parameter_server and (dist.ps_hosts or dist.worker_hosts or dist.job_name):
        raise TrainUsageError(
            "--strategy parameter-server takes its cluster from TF_CONFIG or --local-cluster, "
            "not --ps-hosts/--worker-hosts/--job-name"
        )
    if dist.local_cluster:
        num_ps, num_workers = parse_local_cluster(dist.local_cluster)
        _refuse_existing(cfg)  # one line now, not one per task after the cluster started
        tasks = (_tf2_tasks if parameter_server else _v1_tasks)(cfg, dist, num_ps, num_workers)
        with train_dir_lock(cfg.train_dir):  # a second cluster into this directory: refused
            code = run_cluster(tasks, dist.timeout_s, dist.verbose)
        raise typer.Exit(code)
    from .devices import quiet_tensorflow

    exit_with_parent()  # a --local-cluster task: never outlive the launcher
    quiet_tensorflow(dist.verbose)
    if parameter_server:
        from . import tf2_ps

        return tf2_ps.train_with_stats(cfg, dist.timeout_s)
    cluster = dist.cluster()
    if cluster.job_name == "worker":  # TensorFlow would wait for the ps without a limit
        wait_for_hosts(cluster.ps_hosts, dist.timeout_s, f"worker {cluster.task_index}")
    from . import v1_dist

    return v1_dist.train_with_stats(cfg, cluster, dist.timeout_s)


def task_argv(cfg: TrainConfig, dist: DistOptions, chief: bool) -> list[str]:
    """The ``ckpt train`` arguments every task of a local cluster shares."""
    argv = [
        "train",
        "--api", dist.api,
        "--train-dir", os.path.abspath(cfg.train_dir),
        "--max-steps", str(cfg.max_steps),
        "--batch-size", str(cfg.batch_size),
        "--learning-rate", repr(cfg.learning_rate),
        "--lr-decay-steps", str(cfg.lr_decay_steps),
        "--lr-decay-factor", repr(cfg.lr_decay_factor),
        "--save-every", str(cfg.save_every),
        "--max-to-keep", str(cfg.max_to_keep),
        "--seed", str(cfg.seed),
        "--strategy", cfg.strategy,
        "--cluster-timeout", repr(dist.timeout_s),
        "-q",
    ]  # fmt: skip
    if cfg.ema_decay is not None:
        argv += ["--ema-decay", repr(cfg.ema_decay)]
    if cfg.data_dir is not None:
        argv += ["--data", os.path.abspath(cfg.data_dir)]
    if cfg.resume:
        argv.append("--resume")
    if chief and dist.json_output:
        argv.append("--json")
    if dist.verbose:
        argv.append("--verbose")
    return argv


def _v1_tasks(cfg: TrainConfig, dist: DistOptions, num_ps: int, num_workers: int) -> list[Task]:
    ports = free_ports(num_ps + num_workers)
    ps, workers = ",".join(hosts(ports[:num_ps])), ",".join(hosts(ports[num_ps:]))
    tasks = []
    for job, count in (("ps", num_ps), ("worker", num_workers)):
        for i in range(count):
            chief = job == "worker" and i == 0
            argv = task_argv(cfg, dist, chief) + [
                "--ps-hosts", ps, "--worker-hosts", workers, "--job-name", job,
                "--task-index", str(i),
            ]  # fmt: skip
            if not dist.sync_replicas:
                argv.append("--no-sync-replicas")
            tasks.append(Task(f"{job}{i}", argv, env=_given(cfg, chief), chief=chief))
    return tasks


def _tf2_tasks(cfg: TrainConfig, dist: DistOptions, num_ps: int, num_workers: int) -> list[Task]:
    ports = free_ports(1 + num_ps + num_workers)
    cluster = {
        "chief": hosts(ports[:1]),
        "ps": hosts(ports[1 : 1 + num_ps]),
        "worker": hosts(ports[1 + num_ps :]),
    }
    tasks = []
    for job, count in (("ps", num_ps), ("worker", num_workers), ("chief", 1)):
        for i in range(count):
            chief = job == "chief"
            tf_config = json.dumps({"cluster": cluster, "task": {"type": job, "index": i}})
            name = "chief" if chief else f"{job}{i}"
            tasks.append(
                Task(
                    name,
                    task_argv(cfg, dist, chief),
                    env={"TF_CONFIG": tf_config, **_given(cfg, chief)},
                    chief=chief,
                    wait=chief,  # tf2 servers serve until torn down
                )
            )
    return tasks


def _given(cfg: TrainConfig, chief: bool) -> dict[str, str]:
    """The chief's :data:`GIVEN_ENV` (``{}`` for the other tasks)."""
    return {GIVEN_ENV: cfg.train_dir} if chief else {}


def as_given(checkpoint: str) -> str:
    """``checkpoint`` (a cluster task's, under the absolute ``--train-dir`` it was given)
    under the spelling of ``--train-dir`` its launcher was given (:data:`GIVEN_ENV`), or as
    it is (no launcher, or another directory).

    Returns:
        `str`.
    """
    given = os.environ.get(GIVEN_ENV)
    if not given:
        return checkpoint
    root = os.path.abspath(given)
    if not checkpoint.startswith(root + os.sep):
        return checkpoint
    return os.path.join(given, checkpoint[len(root) + 1:])
