"""TensorFlow-free pieces shared by every trainer: the run config, the result record, the errors.

Importing this module (or anything the CLI imports at start-up) must never import TensorFlow:
``ckpt list`` stays fast and TF-free, so TensorFlow is only imported inside the trainers.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..wording import counted

APIS = ("v1", "tf2", "keras")
STRATEGIES = ("auto", "mirrored", "multiworker", "default", "parameter-server")

# v1 and tf2 pass ``num_updates=global_step`` to ExponentialMovingAverage, which warms the decay up
# as min(decay, (1 + step) / (10 + step)); so the classic 0.9999 is usable from step 1. Keras'
# ``use_ema`` has no warm-up (ema_momentum is used as given from the second step on), so a fixed
# 0.99 keeps averaging the fast-changing early weights of a short run (review-13-user-u15 F9: EMA
# accuracy 0.13 vs raw 0.94 after 100 steps, 0.89 vs 0.97 after 300): its default is the decay
# TF's warm-up reaches at the run's last step, at most Keras' own default 0.99 (keras_ema_decay).
DEFAULT_EMA_DECAY = {"v1": 0.9999, "tf2": 0.9999, "keras": 0.99}


def keras_ema_decay(max_steps: int) -> float:
    """The keras trainer's default ``ema_momentum`` for a run of ``max_steps`` steps:
    ``min(0.99, (1 + max_steps) / (10 + max_steps))``, the decay TF's ``num_updates`` warm-up
    reaches at the last step (0.918 for 100 steps, 0.971 for 300, 0.99 from 890 on)."""
    return min(DEFAULT_EMA_DECAY["keras"], (1 + max_steps) / (10 + max_steps))


class TrainError(Exception):
    """A training or evaluation run cannot start, or had to stop.

    The message is one line, ready for the CLI to print as ``Error: <message>``.
    """


class TrainUsageError(TrainError):
    """A bad or conflicting flag: the CLI prints the usage line and exits 2."""


class TrainExistsError(TrainError):
    """A fresh run into a directory that already holds checkpoints: the CLI exits 7."""


class NoCheckpointError(TrainError):
    """``--resume`` into a directory without a checkpoint: exit 3 ("not found") in ``ckpt``."""


class NotCheckpointError(TrainError):
    """``eval``'s path is a file but no checkpoint or Keras file: exit 4 ("malformed"), as
    ``ckpt list`` says of it."""


class NaNLossError(TrainError):
    """The loss (or a variable) became NaN/Inf; no checkpoint was written for that state."""


class ModelMismatchError(TrainError):
    """The checkpoint does not hold the reference model's variables (names or shapes differ):
    it was not written by ``ckpt train`` (exit 3 in ``ckpt``, like an unknown variable)."""


def not_reference(path: str, api: str, detail: str = "") -> ModelMismatchError:
    """``eval``'s refusal of another model's checkpoint: one line for every API, in our words
    (no TensorFlow or Keras text, which names the reference model's layers as if the file
    were broken), with the way ``ckpt eval --help`` gives (review-20-user-u22 F4).

    Args:
        path: the checkpoint as eval read it.
        api: ``v1``, ``tf2`` or ``keras``: the trainer whose model eval built.
        detail: what the file lacks, where known (``the file has no variable conv1/weights``).

    Returns:
        `ModelMismatchError` (exit 3), to raise.
    """
    # A TF1 graph's checkpoint is restored into a session (apply_ema is eager TF2's).
    python = ("ckpt_tools.restore_ema(sess, path)" if api == "v1" else
              "ckpt_tools.apply_ema(model, path)")
    return ModelMismatchError(
        f"{path}: not a checkpoint of the reference model 'ckpt eval' evaluates (the one "
        f"'ckpt train --api {api}' builds{f'; {detail}' if detail else ''}): ckpt eval "
        "evaluates only that model; for your own, run your evaluation on the file 'ckpt "
        f"restore-ema PATH --out DIR' writes (Python: {python})")


class DataError(TrainError):
    """The data directory is missing or does not hold CIFAR-10 binary batches."""


@dataclass
class TrainConfig:
    """Options of one training run; `ckpt train` flags set these fields (same names).

    ``batch_size`` is per device (tower / replica), like the classic multi-GPU trainers: one step
    consumes ``batch_size * num_devices`` examples. ``max_steps`` is the final ``global_step``,
    so a resumed run stops at the same step a run without interruption would.
    """

    train_dir: str = "train_dir"  # where checkpoints (and the v1 .meta) are written
    max_steps: int = 1000  # train until global_step == max_steps
    batch_size: int = 128  # examples per device per step
    num_gpus: int = 0  # towers / replicas; 0 = every visible GPU, or 1 on CPU
    ema_decay: float | None = None  # None = the API's default (ema_decay_for)
    learning_rate: float = 0.05  # initial rate of the exponential decay
    lr_decay_steps: int = 2000  # staircase decay every this many steps ...
    lr_decay_factor: float = 0.1  # ... by this factor
    momentum: float = 0.9
    weight_decay: float = 1e-4  # L2 on conv/dense kernels, as cifar10's weight_loss
    save_every: int = 100  # checkpoint every N steps (and always at the last step)
    max_to_keep: int = 5
    seed: int = 0
    resume: bool = False  # continue from the latest checkpoint in train_dir
    data_dir: str | None = None  # CIFAR-10 binary batches; None = synthetic data
    strategy: str = "auto"  # tf2 / keras only
    debug_nan_at_step: int | None = None  # poison the inputs of this step (tests)
    progress: bool = True  # rich progress bar on stderr
    save_checkpoints: bool = True  # False for benchmarks

    def ema_decay_for(self, api: str) -> float:
        """Return the EMA decay this run uses with ``api`` (the flag, or the API's default:
        v1/tf2 warm it up with the step, keras gets :func:`keras_ema_decay` of max_steps)."""
        if self.ema_decay is not None:
            return self.ema_decay
        return keras_ema_decay(self.max_steps) if api == "keras" else DEFAULT_EMA_DECAY[api]

    def validate(self) -> None:
        """Check values the CLI cannot check by type alone.

        Raises:
            TrainError: a value is out of range.
        """
        checks = [
            (self.max_steps >= 1, f"--max-steps must be >= 1, got {self.max_steps}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.num_gpus >= 0, f"--num-gpus must be >= 0, got {self.num_gpus}"),
            (self.save_every >= 1, f"--save-every must be >= 1, got {self.save_every}"),
            (self.max_to_keep >= 1, f"--max-to-keep must be >= 1, got {self.max_to_keep}"),
            (self.learning_rate > 0, f"--learning-rate must be > 0, got {self.learning_rate}"),
            (self.strategy in STRATEGIES, f"--strategy must be one of {STRATEGIES}"),
        ]
        if self.ema_decay is not None:
            checks.append(
                (0.0 < self.ema_decay < 1.0, f"--ema-decay must be in (0, 1), got {self.ema_decay}")
            )
        for ok, message in checks:
            if not ok:
                raise TrainError(message)


@dataclass(frozen=True)
class TrainResult:
    """What a training run did."""

    checkpoint: str | None  # latest checkpoint written (or found, when nothing was left to do)
    global_step: int  # global_step at the end
    steps_run: int  # steps run by this call (0 when resuming a finished run)
    final_loss: float | None  # last step's total loss
    examples_per_sec: float  # median over the timed steps (the first steps warm up and are skipped)
    num_devices: int  # towers (v1) or replicas in sync (tf2 / keras)


def check_resume(train_dir: str, latest: str | None, resume: bool) -> None:
    """Refuse to mix runs: ``--resume`` needs a checkpoint, a fresh run needs none.

    Args:
        train_dir: the ``--train-dir``.
        latest: the latest checkpoint found there, or None.
        resume: whether ``--resume`` was given.

    Raises:
        NoCheckpointError: resume without a checkpoint.
        TrainExistsError: a fresh run over existing checkpoints, or a train_dir that is a
            file.
    """
    if os.path.exists(train_dir) and not os.path.isdir(train_dir):
        raise TrainExistsError(f"--train-dir {train_dir}: is not a directory; choose another "
                               "--train-dir")
    if resume and latest is None:
        raise NoCheckpointError(f"--resume: no checkpoint found in {train_dir}")
    if not resume and latest is not None:
        raise TrainExistsError(
            f"{train_dir} already exists with checkpoints (latest: {latest}); "
            "pass --resume to continue, or choose another --train-dir"
        )


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (TensorFlow's run to dozens of lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cause_line(exc: BaseException) -> str:
    r"""The cause of a TensorFlow error on one line: what follows ``Original error:`` in a
    failed ``Saver.restore`` (``Key conv1/w not found in checkpoint``), else the first line;
    graph-node annotations (``[[{{node save/RestoreV2}}]]``) are left out.

    Example:
        >>> cause_line(ValueError("Restoring failed. Original error:\n\nKey w not found\n[[x]]"))
        'Key w not found'
    """
    text = str(exc)
    if "Original error:" in text:
        text = text.split("Original error:", 1)[1]
    text = text.split("Original stack trace", 1)[0]
    # Headers ("Graph execution error:"), where the op was built, and node annotations say
    # nothing about the cause.
    skip = ("[[", "File ", "Node:", "Detected at node")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line for line in lines if not line.startswith(skip) and not line.endswith(":")]
    return causes[0] if causes else lines[0] if lines else type(exc).__name__


def save_due(cfg: TrainConfig, step: int) -> bool:
    """Whether to checkpoint after global step ``step``: every ``save_every`` and at the end."""
    return cfg.save_checkpoints and (step % cfg.save_every == 0 or step >= cfg.max_steps)


def nan_error(problem: str, step: int, saved: str | None, train_dir: str) -> NaNLossError:
    """The error for a non-finite loss (``problem="loss is nan"``) or non-finite variables.

    Args:
        problem: what is not finite, e.g. ``"loss is nan"``.
        step: the global step it happened at.
        saved: the last checkpoint written (left untouched), or None.
        train_dir: the run's ``--train-dir``, which the message names first (u16 F12).

    Returns:
        The error to raise.
    """
    if problem.startswith("loss"):
        what = f"{problem} at step {step}: training stopped"
    else:
        what = f"{problem} at step {step}: not saved, training stopped"
    return NaNLossError(f"{train_dir}: {what}; last good checkpoint: {saved or 'none'}")


def remove_if_empty(directory: str) -> None:
    """Remove a ``--train-dir`` a failed run created, where it wrote nothing (u16 F12)."""
    with contextlib.suppress(OSError):  # not empty, or gone: leave it as it is
        os.rmdir(directory)


def median_rate(examples: int, durations: list[float]) -> float:
    """Median examples/sec over step durations, skipping warm-up steps (graph tracing, allocs).

    Args:
        examples: examples per step (all devices together).
        durations: wall time of each step, in order.

    Returns:
        Examples per second, or 0.0 when no step was timed.
    """
    timed = durations[2:] if len(durations) > 4 else durations
    timed = sorted(d for d in timed if d > 0)
    if not timed:
        return 0.0
    return examples / timed[len(timed) // 2]


def is_finite(value: float | None) -> bool:
    """True for a real, finite number."""
    return value is not None and math.isfinite(value)


_STEP_RE = re.compile(r"-(\d+)(?:\.weights\.h5)?$")


def step_of(path: str) -> int | None:
    """The step number in a checkpoint name (``model.ckpt-120``, ``ckpt-120.weights.h5``)."""
    match = _STEP_RE.search(path)
    return int(match.group(1)) if match else None


def load_trainer(api: str) -> Callable[[TrainConfig], TrainResult]:
    """Import the trainer of ``api`` (this imports TensorFlow) and return its train_with_stats.

    Args:
        api: ``v1``, ``tf2`` or ``keras``.

    Returns:
        ``train_with_stats(cfg) -> TrainResult`` of that trainer.

    Raises:
        TrainError: unknown API, or ``keras`` with a non-TensorFlow ``KERAS_BACKEND``.
    """
    from .devices import quiet_tensorflow

    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if api == "keras" and backend != "tensorflow":
        raise TrainError(f"--api keras needs KERAS_BACKEND=tensorflow, got {backend}")
    quiet_tensorflow()
    if api == "v1":
        from . import v1 as trainer
    elif api == "tf2":
        from . import tf2 as trainer
    elif api == "keras":
        from . import keras_fit as trainer
    else:
        raise TrainError(f"--api must be one of {', '.join(APIS)}; got {api}")
    return trainer.train_with_stats


@dataclass(frozen=True)
class ClusterConfig:
    """One task of a ps/worker cluster (``--ps-hosts``, ``--worker-hosts``, ``--job-name``,
    ``--task-index``: the flag names of the classic distributed trainers). Worker 0 is the chief.
    """

    ps_hosts: tuple[str, ...]
    worker_hosts: tuple[str, ...]
    job_name: str  # "ps" or "worker"
    task_index: int
    sync_replicas: bool = True  # SyncReplicasOptimizer; False = asynchronous updates

    def validate(self) -> None:
        """Check the flags fit together.

        Raises:
            TrainError: a missing host list, unknown job name or out-of-range task index.
        """
        if not self.ps_hosts or not self.worker_hosts:
            raise TrainUsageError("--ps-hosts and --worker-hosts are both needed (host:port,...)")
        if self.job_name not in ("ps", "worker"):
            raise TrainUsageError(f"--job-name must be ps or worker, got {self.job_name!r}")
        hosts = self.ps_hosts if self.job_name == "ps" else self.worker_hosts
        if not 0 <= self.task_index < len(hosts):
            raise TrainUsageError(
                f"--task-index {self.task_index} is out of range for "
                f"{counted(len(hosts), self.job_name + ' host')}"
            )
        for host in (*self.ps_hosts, *self.worker_hosts):
            name, _, port = host.rpartition(":")
            if not name or not port.isdigit():
                raise TrainUsageError(f"bad host {host!r}: expected host:port")
