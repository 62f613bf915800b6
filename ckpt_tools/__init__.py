"""ckpt_tools: inspect TensorFlow checkpoints without TensorFlow; restore their EMA weights.

Public API::

    open_checkpoint(path) -> Checkpoint      # .variables(), .tensor(name), .keys()
    ema_map(path) -> EmaMap                  # variables_to_restore() in checkpoint keys
    bake_ema(path, out_dir) -> BakeResult    # write an EMA-baked checkpoint
    restore_ema(sess, path)                  # graph mode: EMA values into a session's graph
    ema_saver(var_list, checkpoint)          # a tf.compat.v1 Saver built on the map
    apply_ema(model, path)                   # TF2 / Keras: EMA values into variables
    CheckpointError                          # base class of every error raised on purpose
"""

from .bake import BakeResult, bake_ema
from .checkpoint import Checkpoint, Variable, VariableNotFoundError, open_checkpoint
from .emamap import EmaMap, ema_map
from .errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    EmaError,
    OutputError,
    TensorFlowRequiredError,
    UnsupportedFormatError,
)
from .restore import RestoreResult, apply_ema, ema_saver, restore_ema

__version__ = "0.1.0"

__all__ = [
    "BakeResult",
    "EmaMap",
    "RestoreResult",
    "apply_ema",
    "bake_ema",
    "ema_map",
    "ema_saver",
    "restore_ema",
    "Checkpoint",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CorruptCheckpointError",
    "EmaError",
    "OutputError",
    "TensorFlowRequiredError",
    "UnsupportedFormatError",
    "Variable",
    "VariableNotFoundError",
    "open_checkpoint",
]
