"""Device discovery and tf.distribute strategy choice (GPU when TensorFlow sees one, else CPU)."""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile

from ..cli._output import Output
from ..wording import counted
from .common import TrainError


def quiet_tensorflow(verbose: bool = False) -> None:
    """Import TensorFlow without its start-up lines; silence its Python deprecation chatter.

    ``import tensorflow`` writes absl's "All log messages before absl::InitializeLog()" and the
    oneDNN / CUDA-probe lines straight to file descriptor 2 -- twice, once per native library it
    loads -- whatever ``TF_CPP_MIN_LOG_LEVEL`` says. So the import runs with fd 2 pointed at a
    temporary file: dropped, or with ``verbose`` shown once each; all of it if the import fails.
    Must run before the first ``import tensorflow``; an explicit ``TF_CPP_MIN_LOG_LEVEL`` wins.
    """
    # 3 also hides the C++ errors of start-up probes ("failed call to cuInit" on a machine
    # without a GPU); real failures still surface as Python exceptions.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "3")
    if "tensorflow" not in sys.modules:
        _import_tensorflow_capturing_stderr(verbose)
    import tensorflow as tf

    tf.get_logger().setLevel(logging.ERROR)


def _import_tensorflow_capturing_stderr(verbose: bool) -> None:
    sys.stderr.flush()
    saved = os.dup(2)
    failed = False
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except BaseException:
            failed = True
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if failed or verbose:
                captured.seek(0)
                lines = captured.read().decode(errors="replace").splitlines()
                shown = lines if failed else _once(lines)
                Output().relay(shown)


def _once(lines: list[str]) -> list[str]:
    # The repeated banner differs only in its timestamp: compare from the source location on.
    seen, out = set(), []
    for line in lines:
        key = line.split("] ", 1)[-1]
        if key not in seen:
            seen.add(key)
            out.append(line)
    return out


def visible_gpus() -> int:
    """Number of GPUs TensorFlow can use."""
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def tower_devices(num_gpus: int) -> list[str]:
    """Devices of the v1 towers: one per GPU, or ``num_gpus`` (default 1) towers on the CPU.

    Args:
        num_gpus: ``--num-gpus``; 0 means every visible GPU (or 1 tower on a CPU-only machine).

    Returns:
        One device string per tower, e.g. ``["/gpu:0", "/gpu:1"]`` or ``["/cpu:0"]``.

    Raises:
        TrainError: more GPUs requested than visible.
    """
    gpus = visible_gpus()
    if gpus == 0:
        # CPU only: several towers on /cpu:0 still exercise the tower/averaging logic.
        return ["/cpu:0"] * max(1, num_gpus)
    count = num_gpus or gpus
    if count > gpus:
        raise TrainError(f"--num-gpus {count}: only {counted(gpus, 'GPU')} visible")
    return [f"/gpu:{i}" for i in range(count)]


def replica_devices(num_gpus: int) -> list[str]:
    """Devices for MirroredStrategy: GPUs, or ``num_gpus`` logical CPUs on a CPU-only machine.

    Args:
        num_gpus: ``--num-gpus``; 0 means every visible GPU (or the one CPU).

    Returns:
        Device strings.

    Raises:
        TrainError: more GPUs requested than visible, or logical CPUs can no longer be
            configured because TensorFlow already initialised its devices in this process.
    """
    import tensorflow as tf

    gpus = visible_gpus()
    if gpus:
        count = num_gpus or gpus
        if count > gpus:
            raise TrainError(f"--num-gpus {count}: only {counted(gpus, 'GPU')} visible")
        return [f"/gpu:{i}" for i in range(count)]
    count = max(1, num_gpus)
    cpu = tf.config.list_physical_devices("CPU")[0]
    # get_logical_device_configuration, unlike list_logical_devices, does not initialise the
    # runtime (after which the CPU can no longer be split).
    if count > 1 and len(tf.config.get_logical_device_configuration(cpu) or [None]) < count:
        # Split the CPU so MirroredStrategy has `count` replicas to test with.
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * count
            )
        except RuntimeError as exc:
            raise TrainError(
                f"--num-gpus {count} on CPU needs {count} logical CPUs, which must be set up "
                f"before TensorFlow initialises its devices ({exc})"
            ) from None
    return [f"/cpu:{i}" for i in range(count)]


def tf_config_workers() -> int:
    """Number of workers in ``TF_CONFIG`` (0 when unset).

    Raises:
        TrainError: ``TF_CONFIG`` is not valid JSON.
    """
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except (ValueError, AttributeError):
        raise TrainError(f"TF_CONFIG is not a JSON object: {raw[:80]!r}") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def make_strategy(name: str, num_gpus: int):  # -> tf.distribute.Strategy
    """Build the tf.distribute strategy for ``--strategy``.

    ``auto`` is MultiWorkerMirroredStrategy when ``TF_CONFIG`` names a cluster, else
    MirroredStrategy (all visible GPUs; one replica on a CPU-only machine).

    Args:
        name: one of ``auto``, ``mirrored``, ``multiworker``, ``default``.
        num_gpus: ``--num-gpus`` (mirrored only; multi-worker uses every local GPU).

    Returns:
        The strategy.

    Raises:
        TrainError: ``multiworker`` without ``TF_CONFIG``, or bad device counts.
    """
    import tensorflow as tf

    if name == "auto":
        name = "multiworker" if tf_config_workers() else "mirrored"
    if name == "multiworker":
        if not tf_config_workers():
            raise TrainError("--strategy multiworker needs TF_CONFIG naming the worker cluster")
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=replica_devices(num_gpus))
    if name == "default":
        return tf.distribute.get_strategy()
    raise TrainError(f"--strategy must be one of auto, mirrored, multiworker, default; got {name}")


def is_chief(strategy) -> bool:  # strategy: tf.distribute.Strategy
    """Whether this process writes the real checkpoints (always, except non-chief workers)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief
