"""Throughput for 1..N devices: the same training step, no checkpoints, fixed step count."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .common import TrainConfig, TrainError, load_trainer


@dataclass(frozen=True)
class BenchmarkRow:
    """Throughput with ``devices`` towers / replicas."""

    devices: int
    global_batch: int  # examples per step, all devices together
    examples_per_sec: float  # median over the timed steps
    step_time: float  # seconds per step at that rate
    speedup: float  # examples_per_sec relative to one device

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


def max_devices(num_gpus: int) -> int:
    """Devices to sweep up to: ``--num-gpus`` if given, else the visible GPUs, else 1."""
    from .devices import visible_gpus

    if num_gpus:
        return num_gpus
    return max(1, visible_gpus())


def benchmark(api: str, cfg: TrainConfig, steps: int) -> list[BenchmarkRow]:
    """Run ``steps`` training steps with 1, 2, ... N devices and report examples/sec.

    Args:
        api: ``v1``, ``tf2`` or ``keras``.
        cfg: the run config; ``batch_size`` (per device), ``num_gpus`` (N; 0 = all visible
            GPUs, or 1 on CPU), ``data_dir`` and the optimizer settings are used, nothing is
            written to ``train_dir``.
        steps: steps per device count (the first two are warm-up and not timed).

    Returns:
        One row per device count.

    Raises:
        TrainError: bad arguments, or more devices than visible.
    """
    if steps < 5:
        raise TrainError(f"--benchmark-steps must be >= 5, got {steps}")
    trainer = load_trainer(api)
    top = max_devices(cfg.num_gpus)
    if api != "v1":
        from .devices import replica_devices, visible_gpus

        if not visible_gpus():
            replica_devices(top)  # split the CPU once, before the first strategy exists
    rows: list[BenchmarkRow] = []
    for devices in range(1, top + 1):
        run = replace(
            cfg,
            max_steps=steps,
            num_gpus=devices,
            resume=False,
            save_checkpoints=False,
            debug_nan_at_step=None,
            strategy="mirrored" if api != "v1" else cfg.strategy,
        )
        result = trainer(run)
        rate = result.examples_per_sec
        base = rows[0].examples_per_sec if rows else rate
        global_batch = cfg.batch_size * result.num_devices
        rows.append(
            BenchmarkRow(
                devices=result.num_devices,
                global_batch=global_batch,
                examples_per_sec=rate,
                step_time=global_batch / rate if rate else 0.0,
                speedup=rate / base if base else 0.0,
            )
        )
    return rows
