"""``ckpt train`` and ``ckpt eval``: the reference trainer and its raw-vs-EMA evaluation.

Examples::

    ckpt train --api v1 --max-steps 2000 --train-dir runs/v1          # every visible GPU
    ckpt train --api v1 --num-gpus 2 --train-dir runs/v1-2towers        # 2 towers (CPU too)
    ckpt train --api tf2 --train-dir runs/tf2 --resume                  # continue a run
    ckpt train --api keras --max-steps 500 --train-dir runs/keras
    ckpt train --benchmark --api v1                                     # ex/s for 1..N GPUs
    ckpt eval runs/v1 --json

This module is imported by ``ckpt`` at start-up, so it must not import TensorFlow: the trainers
are imported inside the command functions (:func:`.common.load_trainer`).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import asdict, replace
from enum import Enum
from typing import Annotated

import typer
from typer import _click

from ..cli._common import (
    FitOrderOpt,
    LoopOrderOpt,
    NotSwappedOpt,
    OptimizerOpt,
    StrictOpt,
    TrainableOpt,
    UseEmaOpt,
    check_output_parent,
    resolve,
    trainable_names,
)
from ..cli._output import Column, Output
from ..cli.ema import EmaNameOpt
from ..errors import (
    AssumptionWarning,
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    ExitCode,
    OutputError,
    RecordedStatementWarning,
)
from ..restored_mark import marked_stated_said
from ..wording import counted
from . import distributed
from .common import (
    DEFAULT_EMA_DECAY,
    DataError,
    ModelMismatchError,
    NoCheckpointError,
    NotCheckpointError,
    TrainConfig,
    TrainError,
    TrainExistsError,
    TrainUsageError,
    first_line,
    load_trainer,
    remove_if_empty,
)
from .data import resolve_data_dir
from .devices import quiet_tensorflow


class Api(str, Enum):
    """Which trainer writes the checkpoints."""

    v1 = "v1"
    tf2 = "tf2"
    keras = "keras"


class Strategy(str, Enum):
    """tf.distribute strategy for --api tf2 / keras."""

    auto = "auto"
    mirrored = "mirrored"
    multiworker = "multiworker"
    default = "default"
    parameter_server = "parameter-server"


TRAIN_HELP = (
    "Train the small CIFAR-10 conv net and write checkpoints with EMA shadows.\n\n"
    "Uses every visible GPU (one tower / replica each), else the CPU. Data is synthetic and "
    "learnable unless --data points at the CIFAR-10 binary batches. --batch-size is per device; "
    "--max-steps is the final global step (a --resume'd run stops there too). A NaN loss stops "
    "the run with exit code 1 and leaves the last good checkpoint as it was."
)

EVAL_HELP = (
    "Report test accuracy of the reference model 'ckpt train' builds, raw and EMA weights "
    "side by side.\n\n"
    "PATH is a checkpoint of that model only (a v1 or tf2 checkpoint prefix: model.ckpt-1000, "
    "ckpt-1000; a Keras .weights.h5 / .keras file; or a train directory: its latest "
    "checkpoint); the API is detected. Another model's checkpoint is refused: evaluate your "
    "own model with your script on the file 'ckpt restore-ema' writes, or in Python after "
    "ckpt_tools.apply_ema(model, path). A bare .weights.h5 cannot tell whether the optimizer "
    "ran with use_ema=True: state it with --use-ema, or --no-use-ema to evaluate its raw "
    "weights alone. A file 'ckpt restore-ema' wrote records that its weights are the "
    "averages: evaluated as it is, with no statement (EMA = raw)."
)


class RunError(CheckpointError):
    """A training or evaluation run cannot start, or had to stop (exit 1)."""


class ModelNotFoundError(CheckpointError):
    """``eval``: the checkpoint does not hold the reference model's variables (exit 3, like an
    unknown variable)."""

    exit_code = ExitCode.NOT_FOUND


class DataNotFoundError(CheckpointError):
    """--data does not point at the CIFAR-10 binary batches (exit 3, like a missing file)."""

    exit_code = ExitCode.NOT_FOUND


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Turns the errors a user can cause into :class:`CheckpointError`s, which ``ckpt`` prints
    as one ``error:`` line with the README's exit code; a missing TensorFlow (ImportError)
    becomes exit 8 there too. Bugs still raise."""
    try:
        yield
    except DataError as exc:
        raise DataNotFoundError(str(exc)) from None
    except ModelMismatchError as exc:
        raise ModelNotFoundError(str(exc)) from None
    except TrainUsageError as exc:  # printed by ckpt's main() with the usage line, exit 2
        raise _click.exceptions.UsageError(str(exc)) from None
    except TrainExistsError as exc:
        raise OutputError(str(exc)) from None
    except NoCheckpointError as exc:
        raise CheckpointNotFoundError(str(exc)) from None
    except NotCheckpointError as exc:
        raise CorruptCheckpointError(str(exc)) from None
    except TrainError as exc:
        raise RunError(str(exc)) from None
    except Exception as exc:
        if not type(exc).__module__.startswith("tensorflow"):  # e.g. tf.errors.OpError
            raise
        raise RunError(f"TensorFlow: {first_line(exc)}") from None


_NUM_GPUS_HELP = (
    "Towers/replicas. 0 = every visible GPU (1 on CPU). On a CPU-only machine N>0 builds N "
    "towers (v1) or N logical CPUs (tf2/keras) to exercise the multi-device code."
)
_EMA_HELP = (
    f"EMA decay. Default: {DEFAULT_EMA_DECAY['v1']} for v1/tf2 (warmed up: the decay is "
    f"min(decay, (1+step)/(10+step))); for keras, which has no warm-up, "
    f"min({DEFAULT_EMA_DECAY['keras']}, (1+max_steps)/(10+max_steps))."
)
_DATA_HELP = (
    "Directory with the CIFAR-10 binary batches (data_batch_1.bin ...). Default: synthetic."
)
_STRATEGY_HELP = (
    "tf2/keras: auto = multiworker when TF_CONFIG is set, else mirrored. tf2 only: "
    "parameter-server (ParameterServerStrategy; use with --local-cluster or TF_CONFIG)."
)
_BENCH_HELP = "Print examples/sec for 1..N devices instead of training (writes nothing)."

ApiOpt = Annotated[Api, typer.Option(help="v1 graph-mode towers, tf2 custom loop, or keras fit.")]
DirOpt = Annotated[str, typer.Option(
    metavar="DIR",
    help="Directory for checkpoints (and the v1 .meta).")]
StepsOpt = Annotated[int, typer.Option(min=1, help="Train until global_step reaches this.")]
BatchOpt = Annotated[int, typer.Option(min=1, help="Examples per device per step.")]
GpusOpt = Annotated[int, typer.Option(min=0, help=_NUM_GPUS_HELP)]
EmaOpt = Annotated[float | None, typer.Option(help=_EMA_HELP)]
LrOpt = Annotated[float, typer.Option(help="Initial learning rate (staircase exponential decay).")]
LrStepsOpt = Annotated[int, typer.Option(min=1, help="Decay the learning rate every N steps ...")]
LrFactorOpt = Annotated[float, typer.Option(help="... by this factor.")]
SaveOpt = Annotated[int, typer.Option(min=1, help="Checkpoint every N steps (and at the last).")]
KeepOpt = Annotated[int, typer.Option(min=1, help="Keep the newest N checkpoints.")]
SeedOpt = Annotated[int, typer.Option(help="Seed for initialisation and shuffling.")]
ResumeOpt = Annotated[
    bool, typer.Option("--resume", help="Continue from the latest checkpoint in --train-dir.")
]
DataOpt = Annotated[str | None, typer.Option(metavar="DIR", help=_DATA_HELP)]
StrategyOpt = Annotated[Strategy, typer.Option(help=_STRATEGY_HELP)]
BenchOpt = Annotated[bool, typer.Option("--benchmark", help=_BENCH_HELP)]
BenchStepsOpt = Annotated[int, typer.Option(min=5, help="Steps per device count (--benchmark).")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress bar, no notes but those saying the EMA pairing rests on "
    "an assumption the file cannot check.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
NanOpt = Annotated[int | None, typer.Option(hidden=True, help="Poison the inputs of step N.")]

_DEFAULTS = TrainConfig()


def train_command(
    api: ApiOpt = Api.v1,
    train_dir: DirOpt = _DEFAULTS.train_dir,
    max_steps: StepsOpt = _DEFAULTS.max_steps,
    batch_size: BatchOpt = _DEFAULTS.batch_size,
    num_gpus: GpusOpt = _DEFAULTS.num_gpus,
    ema_decay: EmaOpt = None,
    learning_rate: LrOpt = _DEFAULTS.learning_rate,
    lr_decay_steps: LrStepsOpt = _DEFAULTS.lr_decay_steps,
    lr_decay_factor: LrFactorOpt = _DEFAULTS.lr_decay_factor,
    save_every: SaveOpt = _DEFAULTS.save_every,
    max_to_keep: KeepOpt = _DEFAULTS.max_to_keep,
    seed: SeedOpt = _DEFAULTS.seed,
    resume: ResumeOpt = False,
    data: DataOpt = None,
    strategy: StrategyOpt = Strategy.auto,
    benchmark: BenchOpt = False,
    benchmark_steps: BenchStepsOpt = 30,
    quiet: QuietOpt = False,
    json_output: JsonOpt = False,
    debug_nan_at_step: NanOpt = None,
    ps_hosts: distributed.PsHostsOpt = None,
    worker_hosts: distributed.WorkerHostsOpt = None,
    job_name: distributed.JobNameOpt = None,
    task_index: distributed.TaskIndexOpt = 0,
    sync_replicas: distributed.SyncOpt = True,
    local_cluster: distributed.LocalClusterOpt = None,
    cluster_timeout: distributed.ClusterTimeoutOpt = distributed.DEFAULT_TIMEOUT_S,
    verbose: distributed.VerboseOpt = False,
) -> None:
    """Train the small CIFAR-10 conv net and write checkpoints with EMA shadows."""
    cfg = TrainConfig(
        train_dir=train_dir,
        max_steps=max_steps,
        batch_size=batch_size,
        num_gpus=num_gpus,
        ema_decay=ema_decay,
        learning_rate=learning_rate,
        lr_decay_steps=lr_decay_steps,
        lr_decay_factor=lr_decay_factor,
        save_every=save_every,
        max_to_keep=max_to_keep,
        seed=seed,
        resume=resume,
        data_dir=data,
        strategy=strategy.value,
        debug_nan_at_step=debug_nan_at_step,
        progress=not quiet and not json_output,
    )
    out = Output(json_mode=json_output, quiet=quiet)
    with _errors():
        cfg.validate()
        if data is not None:  # fail on a bad --data before paying for the TensorFlow import
            resolve_data_dir(data)
        if benchmark:
            _print_benchmark(out, api.value, cfg, benchmark_steps)
            return
        check_output_parent(train_dir, "creating the training directory")
        dist = distributed.DistOptions(
            api.value, ps_hosts, worker_hosts, job_name, task_index, sync_replicas,
            local_cluster, cluster_timeout, verbose, json_output,
        )
        if dist.active(cfg):
            result = distributed.run(cfg, dist)  # exits with the chief's code, or None
            if result is None:
                return
            if result.checkpoint:  # the path as its launcher was given it (u34)
                result = replace(result, checkpoint=distributed.as_given(result.checkpoint))
        else:
            quiet_tensorflow(verbose)
            created = not os.path.lexists(train_dir)
            try:
                result = load_trainer(api.value)(cfg)
            except TrainError:
                if created:  # this run made it and (NaN at the first steps) wrote nothing
                    remove_if_empty(train_dir)
                raise
    if result.checkpoint:  # saved: a summary that cannot be printed is only a warning
        out.wrote(result.checkpoint)
    if json_output:
        out.json(asdict(result))
        return
    if not result.steps_run:
        out.prose(f"{result.checkpoint}  global_step={result.global_step} >= --max-steps: done")
        return
    out.prose(  # wrapped at spaces on a terminal, never inside a word
        f"{result.checkpoint}  global_step={result.global_step}  "
        f"loss={_fmt(result.final_loss)}  {result.examples_per_sec:,.0f} examples/sec "
        f"on {counted(result.num_devices, 'device')}"
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _print_benchmark(out: Output, api: str, cfg: TrainConfig, steps: int) -> None:
    from .benchmark import benchmark

    rows = benchmark(api, cfg, steps)
    if out.json_mode:
        out.json([row.to_dict() for row in rows])
        return
    out.table(f"--api {api}, batch {cfg.batch_size}/device, {steps} steps",
              [Column(c, "right") for c in ("devices", "global batch", "examples/sec",
                                            "sec/step", "speed-up")],
              [[str(row.devices), str(row.global_batch), f"{row.examples_per_sec:,.0f}",
                f"{row.step_time:.4f}", f"{row.speedup:.2f}x"] for row in rows])


CheckpointArg = Annotated[
    str, typer.Argument(help="A checkpoint of the reference model: prefix, .weights.h5/.keras "
                        "file, or train directory.",
                        metavar="PATH")
]
EvalDataOpt = Annotated[
    str | None,
    typer.Option(metavar="DIR",
        help="Directory with CIFAR-10 test_batch.bin. Default: the synthetic test set."),
]
NumExamplesOpt = Annotated[
    int, typer.Option(min=0, help="Use the first N test examples (0 = all).")
]
EvalBatchOpt = Annotated[int, typer.Option(min=1, help="Evaluation batch size.")]


def eval_command(
    checkpoint: CheckpointArg,
    data: EvalDataOpt = None,
    num_examples: NumExamplesOpt = 0,
    batch_size: EvalBatchOpt = 500,
    strict: StrictOpt = False,
    not_swapped: NotSwappedOpt = False,
    fit_order: FitOrderOpt = False,
    use_ema: UseEmaOpt = None,
    optimizer: OptimizerOpt = None,
    trainable: TrainableOpt = None,
    loop_order: LoopOrderOpt = False,
    ema_name: EmaNameOpt = None,
    json_output: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Report test accuracy of the reference model ``ckpt train`` builds, raw and EMA weights
    side by side (the command's help: ``EVAL_HELP``)."""
    out = Output(json_mode=json_output, quiet=quiet)
    names = trainable_names(trainable, loop_order, fit_order)
    # The same pick as every other command (and one note when a directory offers several).
    path = resolve(out, checkpoint)
    if not os.path.isdir(path) and not os.path.exists(path) \
            and not os.path.exists(path + ".index"):
        raise CheckpointNotFoundError(f"{path}: no such checkpoint prefix, Keras file or "
                                      "directory")
    with _errors():
        if data is not None:
            resolve_data_dir(data)
        quiet_tensorflow()
        from .evaluate import evaluate

        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", AssumptionWarning)
            result = evaluate(path, data, num_examples, batch_size, strict=strict,
                              not_swapped=not_swapped, fit_order=fit_order,
                              use_ema=use_ema, optimizer=optimizer,
                              trainable=None if names is None else list(names),
                              loop_order=loop_order, ema_name=ema_name)
    # What a Keras file's EMA pairing rests on, said (and in --json) as export says it: the
    # statements first, then what was assumed (review-13-user-u15 F4).
    # restore-ema's output with nothing stated: no EMA pairing was read (evaluate)
    stated = {} if result.weights_are_averages and use_ema is None and names is None and \
        optimizer is None else _stated(out, result, use_ema, names, not_swapped, fit_order)
    if result.weights_are_averages:  # what restore-ema's mark says it rested on (r128 F3)
        note, fields = marked_stated_said(result.checkpoint)
        if note:
            out.note(f"note: {note}", always=True)
        stated = {**fields, **stated}
    assumed: list[str] = []
    for w in said:  # what the EMA pairing assumed: a note, as export and restore-ema say it
        if issubclass(w.category, AssumptionWarning):
            for line in getattr(w.message, "notes", None) or [str(w.message)]:
                out.note(f"note: {' '.join(line.split())}", always=True)
            assumed += [a for a in getattr(w.message, "assumed", ()) if a not in assumed]
        elif not issubclass(w.category, RecordedStatementWarning):  # _stated's note says it
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if json_output:
        out.json({**result.to_dict(), **({"assumed": assumed} if assumed else {}), **stated})
        return
    if not quiet:
        out.prose(f"{result.checkpoint}  api={result.api} global_step={result.global_step} "
                  f"test examples={result.num_examples} data={result.data}")
    rows = [["raw", f"{result.raw_accuracy:.4f}"]]
    said = ""  # why a row reads as it does: a note under the table, never in a cell (u19 F11)
    if result.ema_accuracy is None:  # --no-use-ema: no averages evaluated
        rows.append(["EMA", "-"])
        said = ("EMA: not evaluated (--no-use-ema stated); ckpt restore-ema wrote this file: its "
                "weights are the averages" if result.weights_are_averages else
                "EMA: not evaluated (--no-use-ema: the file holds no averages)")
    else:
        rows += [["EMA", f"{result.ema_accuracy:.4f}"],
                 ["EMA - raw", f"{result.ema_accuracy - result.raw_accuracy:+.4f}"]]
        if result.weights_are_averages and result.ema_accuracy == result.raw_accuracy:
            said = "EMA = raw: ckpt restore-ema wrote this file, its weights are the averages"
    out.table(None, [Column("weights"), Column("accuracy", "right")], rows)
    if said and not quiet:
        out.summary()
        out.summary(said)


def _stated(out: Output, result, use_ema: bool | None, names, not_swapped: bool,
            fit_order: bool) -> dict:
    """The notes and ``--json`` fields (``stated_not_swapped``, ``stated_fit_order``,
    ``stated_use_ema``, ``stated_trainable``) of what a Keras file's EMA pairing rests on
    because the user stated it, as ``ckpt export`` gives them; ``{}`` when the EMA weights were
    not evaluated or the file is no Keras file."""
    if result.api != "keras" or result.ema_accuracy is None:
        return {}
    from ..checkpoint import open_checkpoint
    from ..cli.ema import note_stated_order

    with open_checkpoint(result.checkpoint, use_ema=use_ema, trainable=names,
                         not_swapped=not_swapped, fit_order=fit_order) as ckpt:
        return note_stated_order(out, ckpt, None)


def register(app: typer.Typer) -> None:
    """Add ``train`` and ``eval`` to ``app`` (the main ``ckpt`` app or a standalone one)."""
    app.command("train", help=TRAIN_HELP)(train_command)
    app.command("eval", help=EVAL_HELP)(eval_command)
