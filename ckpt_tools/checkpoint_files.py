"""The run history beside a checkpoint: files a writer's ``--force`` must not replace.

:meth:`~ckpt_tools.checkpoint.Checkpoint.input_files` adds these to the files a command reads.
"""

from __future__ import annotations

import os

from .errors import CorruptCheckpointError
from .formats._io import is_url
from .locate import STATE_FILE, read_state_file


def history_files(files: list[str]) -> list[str]:
    """Returns the run's history beside the checkpoint of ``files`` (its reader's files):
    the ``checkpoint`` state file in its directory (read or not) and the files of every
    checkpoint that state file lists (the last 1,000). Empty without a local ``.index`` or
    state file. A writer's ``--force`` must not replace them either (``export --out`` onto
    a sibling checkpoint's ``.index`` would destroy it); an unreadable state file lists
    only itself."""
    import glob

    index = next((f for f in files if f.endswith(".index")), None)
    if index is None or is_url(index):
        return []
    directory = os.path.dirname(index) or "."
    state = os.path.join(directory, STATE_FILE)
    if not os.path.isfile(state):
        return []
    found = [state]
    try:
        listed = read_state_file(directory)
    except (CorruptCheckpointError, FileNotFoundError, OSError):
        return found
    for prefix in listed[-1000:]:
        found += [prefix + ".index", prefix + ".meta"]
        found += glob.glob(glob.escape(prefix) + ".data-*")
    return found
