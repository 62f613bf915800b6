"""ckpt_tools: inspect TensorFlow checkpoints without TensorFlow; restore their EMA weights.

Public API::

    open_checkpoint(path) -> Checkpoint      # .variables(), .tensor(name), .keys()
    CheckpointError                          # base class of every error raised on purpose
"""

from .checkpoint import Checkpoint, Variable, VariableNotFoundError, open_checkpoint
from .errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    EmaError,
    OutputError,
    TensorFlowRequiredError,
    UnsupportedFormatError,
)

__version__ = "0.1.0"

__all__ = [
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
