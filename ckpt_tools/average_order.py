"""Which input of ``ckpt average`` is the newest (the one integers, strings and the step are
copied from), and whether a run's state file lists its checkpoints in save order.

The step a checkpoint records (``global_step``; TF2 object checkpoints without one:
``save_counter``) decides; ``--newest`` overrides it; ties and missing steps are refused
rather than broken by name or mtime, which say nothing about training order.
"""

from __future__ import annotations

import os

from .checkpoint import Checkpoint
from .errors import EmaError
from .formats._io import is_url

# Where the step that tells which input is newest is recorded, in order of preference.
_STEP_KEYS = ("global_step", "global_step/.ATTRIBUTES/VARIABLE_VALUE",
              "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
              # a Keras optimizer saved as 'optimizer' (Keras 3, tf_keras; a legacy tf_keras
              # one: iter) counts its steps where .write() records no save_counter (u26 F2)
              "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
              "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE")


def _label(key: str) -> str:
    """How a step key is named in messages: ``global_step``, ``optimizer iterations``."""
    return "optimizer iterations" if key.startswith("optimizer/") else key.split("/", 1)[0]
_STEP_DTYPES = {"int32", "int64", "uint32", "uint64", "int16", "int8", "uint8", "uint16"}


def identity(prefix: str) -> str:
    """Returns what makes two inputs the same checkpoint: a URL without its trailing ``/``,
    a local prefix with its links resolved."""
    return prefix.rstrip("/") if is_url(prefix) else os.path.realpath(prefix)


def recorded_step(ckpt: Checkpoint, key: str) -> int | None:
    """The integer scalar ``key`` holds in ``ckpt``, or ``None`` (absent, or not one)."""
    entry = ckpt.entries().get(key)
    if entry is None or entry.shape not in ((), (1,)) or entry.dtype_name not in _STEP_DTYPES:
        return None
    return int(ckpt.tensor(key).reshape(-1)[0])


def check_save_order(ckpts: list[Checkpoint], state_file: str | None) -> None:
    """Refuses inputs chosen by ``state_file`` (``--last``) whose recorded steps do not rise
    in its order: the file was edited or rolled back out of save order, so "the N newest it
    lists" and its latest are not the newest by step.

    Raises:
        EmaError: two inputs in the wrong order (names both, their steps, the state file's
            latest and ``--newest``, which decides).
    """
    if state_file is None:
        return
    seen: set[str] = set()
    for c in ckpts:
        if identity(c.location.prefix) in seen:
            raise EmaError(f"{state_file}: lists {c.path} twice (edited?), so which are the "
                           "newest cannot be told from it: pass the checkpoints to average "
                           "explicitly")
        seen.add(identity(c.location.prefix))
    latest = ckpts[-1].path  # checkpoints_of_run lists up to its latest, which comes last
    for key in _STEP_KEYS:
        steps = [recorded_step(c, key) for c in ckpts]
        if any(s is None for s in steps):
            continue
        for (a, sa), (b, sb) in zip(zip(ckpts, steps, strict=True),
                                    zip(ckpts[1:], steps[1:], strict=True), strict=False):
            if sb <= sa:
                label = _label(key)
                # TensorFlow writes such a list itself when a run restored from an older
                # checkpoint saves again (ckpt-1, 2, 3, 5, 4): the largest step is then the
                # abandoned branch's, so the advice names the latest and --newest.
                raise EmaError(
                    f"{state_file}: lists {a.path} ({label} {sa}) before {b.path} ({label} "
                    f"{sb}), not in save order (edited, or a run restored from an older "
                    "checkpoint saved again), so which are the newest cannot be told from it; "
                    f"its latest is {latest} (what tf.train.latest_checkpoint restores): pass "
                    f"the checkpoints to average explicitly with --newest {latest} (newest= "
                    "in Python), or another --newest (without it the largest step decides, "
                    "which may be a rolled-back run's)")
        return


def order_inputs(ckpts: list[Checkpoint], chosen: str | None) -> tuple[list[Checkpoint], str]:
    """Returns ``ckpts`` with the newest one last, and why it is the newest.

    The newest is the input whose resolved prefix is ``chosen`` when given (``--newest``),
    else the input recording the largest ``global_step`` (TF2 object checkpoints without
    one: ``save_counter``); the inputs are then sorted by that step.

    Raises:
        EmaError: an input is given twice, no step counter is recorded in every input, or the
            largest is recorded by more than one input (names ``--newest``).
    """
    seen: dict[str, str] = {}
    for ckpt in ckpts:
        ident = identity(ckpt.location.prefix)
        if ident in seen:
            also = f" (also as {seen[ident]})" if seen[ident] != ckpt.path else ""
            raise EmaError(f"{ckpt.path}: given twice{also}; averaging would count it twice; "
                           "give each checkpoint once")
        seen[ident] = ckpt.path
    if chosen is not None:
        last = [c for c in ckpts if identity(c.location.prefix) == chosen]
        return [c for c in ckpts if c is not last[0]] + last, "--newest"
    for key in _STEP_KEYS:
        steps = [recorded_step(c, key) for c in ckpts]
        if any(s is None for s in steps):
            continue
        label = _label(key)
        top = max(steps)
        tied = [c.path for c, s in zip(ckpts, steps, strict=True) if s == top]
        if len(tied) > 1:
            raise EmaError(
                f"{tied[0]}: records {label} {top}, as {tied[1]} does: which checkpoint is the "
                "newest (the one integers, strings and the step are copied from) cannot be "
                "told; pass --newest CKPT (newest= in Python)")
        order = sorted(range(len(ckpts)), key=lambda i: steps[i])
        return [ckpts[i] for i in order], f"{label} {top}"
    raise EmaError(
        f"{ckpts[-1].path}: not every input records a global_step, save_counter or its "
        "optimizer's iterations, so which checkpoint is the newest (the one integers, strings "
        "and the step are copied from) cannot be told; pass --newest CKPT (newest= in Python)")
