"""ckpt_tools: inspect TensorFlow checkpoints without TensorFlow; restore their EMA weights.

Public API::

    open_checkpoint(path) -> Checkpoint      # .variables(), .tensor(name), .keys()
    ema_map(path) -> EmaMap                  # variables_to_restore() in checkpoint keys
    bake_ema(path, out_dir) -> BakeResult    # write an EMA-baked checkpoint
    restore_ema(sess, path)                  # graph mode: EMA values into a session's graph
    ema_saver(var_list, checkpoint)          # a tf.compat.v1 Saver built on the map
    apply_ema(model, path)                   # TF2 / Keras: EMA values into variables
    export_weights(path, "w.safetensors")    # EMA weights under clean names for converters
    verify(path) / checkpoint_stats(ckpt) / diff_checkpoints(a, b) / diff_ema(path)
    CheckpointError                          # base class of every error raised on purpose
"""

from importlib import import_module

from .checkpoint import Checkpoint, Variable, open_checkpoint
from .errors import (
    AssumptionWarning,
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    EmaError,
    ExitCode,
    OptionError,
    OutputError,
    RecordedStatementWarning,
    StatementWarning,
    TensorFlowRequiredError,
    UnprovenPairingError,
    UnsupportedFormatError,
    VariableNotFoundError,
    WriteError,
)

# The rest loads on first use, so `ckpt list` does not pay for writers, NumPy or Keras helpers.
_LAZY = {
    "AverageResult": "average", "average_checkpoints": "average", "average_run": "average",
    "BakeResult": "bake", "bake_ema": "bake",
    "EmaMap": "emamap", "ema_map": "emamap",
    "ExportResult": "export", "export_weights": "export",
    "apply_keras_ema": "keras_apply", "keras_ema_values": "keras_ema",
    "RestoreResult": "restore", "apply_ema": "restore", "ema_saver": "restore",
    "restore_ema": "restore",
    "DiffReport": "diff", "TensorDiff": "diff", "diff_checkpoints": "diff", "diff_ema": "diff",
    "StatsRecord": "stats", "TensorStats": "tensor_stats", "checkpoint_stats": "stats",
    "Problem": "verify", "VerifyReport": "verify", "verify": "verify",
    "numbered_lists": "pairing",
}

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from .average import AverageResult, average_checkpoints, average_run
    from .bake import BakeResult, bake_ema
    from .diff import DiffReport, TensorDiff, diff_checkpoints, diff_ema
    from .emamap import EmaMap, ema_map
    from .export import ExportResult, export_weights
    from .keras_apply import apply_keras_ema
    from .keras_ema import keras_ema_values
    from .pairing import numbered_lists
    from .restore import RestoreResult, apply_ema, ema_saver, restore_ema
    from .stats import StatsRecord, checkpoint_stats
    from .tensor_stats import TensorStats
    from .verify import Problem, VerifyReport, verify


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ckpt_tools' has no attribute {name!r}")
    loaded = import_module(f".{module}", __name__)
    # Importing a submodule binds its name on the package (ckpt_tools.verify becomes the
    # module), which would shadow a function of the same name: bind every lazy name the
    # module provides, the function last.
    for other, where in _LAZY.items():
        if where == module:
            globals()[other] = getattr(loaded, other)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "AverageResult",
    "average_checkpoints",
    "average_run",
    "BakeResult",
    "DiffReport",
    "ExitCode",
    "Problem",
    "StatsRecord",
    "TensorDiff",
    "TensorStats",
    "VerifyReport",
    "checkpoint_stats",
    "diff_checkpoints",
    "diff_ema",
    "verify",
    "EmaMap",
    "ExportResult",
    "RestoreResult",
    "apply_ema",
    "apply_keras_ema",
    "bake_ema",
    "ema_map",
    "ema_saver",
    "export_weights",
    "keras_ema_values",
    "numbered_lists",
    "restore_ema",
    "AssumptionWarning",
    "RecordedStatementWarning",
    "StatementWarning",
    "Checkpoint",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CorruptCheckpointError",
    "EmaError",
    "OptionError",
    "OutputError",
    "TensorFlowRequiredError",
    "UnprovenPairingError",
    "UnsupportedFormatError",
    "Variable",
    "VariableNotFoundError",
    "WriteError",
    "open_checkpoint",
]
