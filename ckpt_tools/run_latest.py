"""Which checkpoint of a run directory without a ``checkpoint`` state file is the latest (and
what to say where one with a state file led elsewhere: :func:`state_file_note`).

The names a training loop writes record the step or epoch (``ckpt-11``, ``model.ckpt-1000``,
Keras' ``ModelCheckpoint("ep{epoch}.keras")`` or ``"ep{epoch:02d}-{val_loss:.2f}.keras"``);
a file's modification time records only how the directory was copied (``cp``, ``gsutil cp``,
``rsync`` without ``-t`` give every file the time of its copy). So:

- names that are one pattern differing only in integers (floats such as a loss in the name
  are not an order) are ordered by the first integer that differs between them, the step or
  epoch; where that integer does not tell every name apart, the names prove no order;
- names none of which carries a number (``adam.keras``, ``model.keras``) record no order:
  the last modified is taken, and the caller says so;
- anything else (a numbered series, or one numbered name such as ``ckpt-11``, beside other
  names such as ``best``; two series; two names carrying one number) is refused: the user
  names a file. ``best`` beside ``ckpt-11`` is a copy kept for its metric, older or newer:
  only its modification time would choose, and that is no evidence (review-32-user-u34 F3).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from .errors import AmbiguousCheckpointError
from .wording import noun

_SUFFIXES = (".weights.h5", ".index", ".keras", ".hdf5", ".h5")
_SHARD = re.compile(r"-\?{5}-of-\d{5}$")  # a sharded V1 checkpoint's pattern
# A float (a loss or metric formatted into the name, "0.45", "4.50e-01") or an integer.
_NUMBER = re.compile(r"(\d+\.\d+(?:[eE][-+]?\d+)?)|(\d+)")

BY_NAME = "the highest step/epoch number in the names"
BY_MTIME = "last modified: the names record no step"
ONLY = "the only file of its kind"


def _split(name: str) -> tuple[str, list[int]]:
    """``(template, integers)`` of a file name: the name without its checkpoint suffix, with
    floats and integers replaced by placeholders, and the integers in order."""
    stem, suffix, ints = _split_suffix(name)
    return stem + suffix, ints


def _split_suffix(name: str) -> tuple[str, str, list[int]]:
    """``(template, suffix, integers)``: :func:`_split` with the checkpoint suffix apart."""
    stem = _SHARD.sub("", name)
    suffix = ""
    for end in _SUFFIXES:
        if stem.endswith(end):
            stem, suffix = stem[: -len(end)], end
            break
    ints = [int(m.group(2)) for m in _NUMBER.finditer(stem) if m.group(2)]
    template = _NUMBER.sub(lambda m: "\0f" if m.group(1) else "\0i", stem)
    return template, suffix, ints


def later_by_name(picked: str, others: list[str]) -> list[str]:
    """Returns the names of ``others`` that their own numbering proves later than ``picked``:
    the same pattern as ``picked`` but for the checkpoint suffix (``ep03.keras`` and
    ``ep12.weights.h5``), with a higher first integer that differs (the step or epoch).
    Names of another pattern, or carrying the same numbers, are not later by their names.
    """
    template, _, ints = _split_suffix(picked)
    later = []
    for name in others:
        t, _, n = _split_suffix(name)
        if t != template or len(n) != len(ints) or not ints:
            continue
        differ = [(a, b) for a, b in zip(ints, n, strict=True) if a != b]
        if differ and differ[0][1] > differ[0][0]:
            later.append(name)
    return sorted(later)


def _by_number(names: list[str]) -> str | None:
    """The name with the highest step when ``names`` (two or more) are one pattern whose
    first differing integer tells them all apart; ``None`` when they are not one series.

    Raises:
        ValueError: one series, but no integer tells every name apart (why, for a message).
    """
    split = [_split(n) for n in names]
    if len({t for t, _ in split}) != 1:
        return None
    if not split[0][1]:
        raise ValueError("they differ only in parts that are not an integer step")
    columns = list(zip(*(ints for _, ints in split), strict=True))
    varying = [c for c in columns if len(set(c)) > 1]
    if not varying:
        raise ValueError("they carry the same step numbers")
    first = varying[0]
    if len(set(first)) != len(first):
        raise ValueError("the first number that differs does not tell every name apart")
    return names[first.index(max(first))]


def pick_latest(where: str, pool: list[str], candidates: list[str],
                mtime: Callable[[str], object]) -> tuple[str, str]:
    """Returns ``(name, why)``: the latest of ``pool`` (the names of one kind a directory
    without a state file holds) and how it was told, :data:`BY_NAME` or :data:`BY_MTIME`
    (:data:`ONLY` where ``pool`` holds one name).

    Args:
        where: the directory or URL, for the message.
        pool: the names to choose from (two or more for a choice to be made).
        candidates: every checkpoint-like name there, listed when refusing.
        mtime: a name's modification time (any orderable value), used only where the names
            record no step at all.

    Raises:
        AmbiguousCheckpointError: the names do not prove which is the latest, and
            modification times are not evidence (a copy resets them).
    """
    if len(pool) == 1:
        return pool[0], ONLY
    try:
        picked = _by_number(pool)
    except ValueError as exc:
        reason = str(exc)
    else:
        if picked is not None:
            return picked, BY_NAME
        numbered = sorted(n for n in pool if _split(n)[1])
        if not numbered:  # no name records a step: the mtime is all there is (documented)
            return max(pool, key=lambda n: (mtime(n), n)), BY_MTIME
        if len(numbered) == 1:
            others = "the other" if len(pool) == 2 else f"the {len(pool) - 1} others"
            reason = f"{numbered[0]} carries a step number, {others} none"
        else:
            reason = "they are not one numbered series"
    shown = sorted(candidates)
    more = f" and {len(shown) - 8} more" if len(shown) > 8 else ""
    raise AmbiguousCheckpointError(
        f"{where}: {len(candidates)} candidate checkpoints and no 'checkpoint' state file, "
        f"and their names do not prove which is the latest ({reason}): "
        f"{', '.join(shown[:8])}{more}; modification times are not evidence (a copy resets "
        f"them): name the file to read{_example(where, shown)}")


def _example(where: str, names: list[str]) -> str:
    """Returns `` (its prefix, e.g. DIR/ckpt-11)`` for TensorFlow checkpoints among ``names``
    (``.index`` files: the prefix is what is typed), else ``""``."""
    index = [n for n in names if n.endswith(".index")]
    if not index:
        return ""
    return f" (its prefix, e.g. {where.rstrip('/')}/{index[0][: -len('.index')]})"


def state_file_note(directory: str, state: str, written: str, used: str, written_exists: bool,
                    keras_files: list[str]) -> str | None:
    """What to say (one note) when a run directory's ``checkpoint`` state file led to its
    checkpoint in a way the user might not expect (review-11-attack-r16 N1).

    Args:
        directory: the directory as given.
        state: its state file.
        written: the latest checkpoint as the state file writes it.
        used: the prefix read.
        written_exists: whether ``written``, an absolute path, is a checkpoint too.
        keras_files: the Keras files (``.keras``, ``.h5``) beside the state file.

    Returns:
        `str`: the note, or ``None`` where the state file named the one checkpoint read, in
        ``directory``, and nothing else there was a candidate.
    """
    said = []
    same = os.path.realpath(used) == os.path.realpath(written)  # named as the user typed it
    if used != written and written_exists and not same:
        said.append(f"{state} names {written}, which exists too; using {used}, the copy of "
                    f"that name beside the state file (name {written} to read that one)")
    elif used == written and os.path.isabs(written) and os.path.realpath(
            os.path.dirname(written)) != os.path.realpath(directory):  # not via a symlink
        said.append(f"{state} names {written}, outside {directory} (no copy of that name "
                    "beside it): reading it")
    if keras_files:
        shown = ", ".join(sorted(keras_files)[:3]) + (" ..." if len(keras_files) > 3 else "")
        said.append(f"{directory}: using {used}, which its 'checkpoint' state file names, not "
                    f"the Keras {noun(len(keras_files), 'file')} beside it ({shown}): name a file "
                    "to read one")
    return "; ".join(said) or None
