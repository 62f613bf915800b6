"""What a writer checks before it writes (see :mod:`ckpt_tools.formats._write`, the writer
discipline, which imports these too): the files a command read (:class:`Inputs`), outputs
that would shadow an input's checkpoint, and file and member names."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence

from ..errors import OutputError
from ._io import state_entries
from .write_locks import physical


# -- inputs --------------------------------------------------------------------------------
def inode_key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class Inputs:
    """Every file a command read, by device and inode (so links to them are recognised).

    Args:
        paths: input files (``None`` entries and missing files are ignored).
    """

    def __init__(self, paths: Iterable[str | None]):
        self.paths: list[str] = []
        self._files: dict[tuple[int, int], str] = {}
        self._dirs: dict[tuple[int, int], str] = {}
        for p in paths:
            if not p:
                continue
            try:
                st = os.stat(p)
                dst = os.stat(os.path.dirname(p) or ".")
            except OSError:
                continue
            self.paths.append(p)
            self._files.setdefault(inode_key(st), p)
            self._dirs.setdefault(inode_key(dst), p)

    def which(self, path: str) -> str | None:
        """Returns the input file ``path`` is (through symlinks and hard links), else None."""
        try:
            return self._files.get(inode_key(os.stat(path)))
        except OSError:
            return None

    def held_by(self, directory: str) -> str | None:
        """Returns an input file inside ``directory`` (itself, not a subdirectory), else None."""
        try:
            return self._dirs.get(inode_key(os.stat(directory)))
        except OSError:
            return None

    def refuse_shadowing(self, out: str) -> None:
        """Refuses an output directory ``out`` named like a checkpoint of an input's run
        (:func:`shadowed_checkpoint`): afterwards that checkpoint's prefix would read the new
        directory, and the run (its state file, ``average --last``) would change meaning.

        Raises:
            OutputError: naming ``out`` and the input whose run it is in (exit 7).
        """
        parent, name = os.path.split(os.path.realpath(out))
        held = self.held_by(parent)
        if held is None:
            return
        try:
            siblings = os.listdir(parent)
        except OSError:
            return
        state = None
        if "checkpoint" in siblings:
            try:
                with open(os.path.join(parent, "checkpoint"), "rb") as f:
                    state = f.read(_STATE_LIMIT)
            except OSError:
                state = None
        if shadowed_checkpoint(name, siblings, state):
            shown = out.rstrip("/") or out
            raise OutputError(
                f"{shown}: would shadow checkpoint {shown} of the run of input {held} (that "
                "prefix would then read this directory instead of the checkpoint); refusing "
                "to write there; choose another --out")

    def refuse_beside(self, target: str, what: str) -> None:
        """Refuses the output file ``target`` when its directory holds an input: an output,
        in any format, never goes beside the checkpoint (or the state file) it was read from.

        Raises:
            OutputError: naming ``target``, the input, and ``what`` it would have written.
        """
        held = self.held_by(os.path.dirname(physical(target)))
        if held is not None:
            raise OutputError(f"{target}: its directory holds the input {held}; refusing to "
                              f"write a {what} there (the directory would then hold two "
                              "candidate checkpoints, and whatever is given that directory, "
                              "ckpt itself or an evaluation script taking the latest, could "
                              "read the wrong one); choose another --out, e.g. a new directory")


# A sharded V1 checkpoint's shard suffix (model.ckpt-4-00000-of-00002).
_V1_SHARD = re.compile(r"-\d{5}-of-\d{5}")
# How much of a state file is read to see what it lists (TensorFlow's are a few KiB).
_STATE_LIMIT = 1 << 20


def shadowed_checkpoint(name: str, siblings: Iterable[str], state: bytes | None) -> bool:
    """Returns whether a directory ``name`` would take the name of a checkpoint of the run
    whose directory holds ``siblings`` (file names) and state file ``state`` (its bytes, or
    None): ``<name>.index`` or a V1 shard ``<name>-00000-of-0000N`` is there, or the state
    file lists ``name``. Such a directory would shadow that checkpoint: its prefix would then
    resolve to the directory (``ckpt show``, ``average --last``) instead of the checkpoint.
    """
    siblings = set(siblings)
    if name + ".index" in siblings or any(
            s.startswith(name + "-") and _V1_SHARD.fullmatch(s[len(name):]) for s in siblings):
        return True
    return any(listed.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] == name
               for _field, listed in state_entries(state or b""))


def file_kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device")


# -- names ---------------------------------------------------------------------------------
# bake and export refuse outputs named like these (restore-ema without importing export)
_CHECKPOINT_PART = re.compile(r"(\.index|\.meta|\.data-\d+-of-\d+)$")


def checkpoint_file_kind(path: str) -> str | None:
    """What TensorFlow checkpoint file ``path`` is named like (``a checkpoint's .index
    file``, its ``.meta``, a ``.data-…`` shard, the ``checkpoint`` state file), or None."""
    base = path.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]
    if base == "checkpoint":
        return "a run's 'checkpoint' state file"
    m = _CHECKPOINT_PART.search(base)
    if m is None:
        return None
    return f"a checkpoint's {'.data-…' if m.group(1).startswith('.data-') else m.group(1)} file"


def check_file_name(name: str, option: str = "--name") -> str:
    """Returns ``name`` if it is safe as one file name inside the output directory.

    Raises:
        OutputError: empty, ``.``/``..``, or containing ``/``, ``\\``, NUL or another control
            character (a newline would break the ``checkpoint`` state file TensorFlow reads).
    """
    if not name or name in (".", "..") or any(c in name for c in "/\\") or any(
            ord(c) < 32 or ord(c) == 127 for c in name):
        raise OutputError(f"invalid {option} {name!r}: must be a plain file name (no '/', "
                          "'\\', NUL or control characters, and not '.' or '..')")
    return name


SAFETENSORS_RESERVED = "__metadata__"


def member_name_ok(name: str, fmt: str) -> bool:
    """Whether ``name`` can be a member name of an ``fmt`` output file (see
    :func:`check_member_name`)."""
    return not (not name or "\x00" in name or "\\" in name
                or any(part in ("", ".", "..") for part in name.split("/"))
                or (fmt == "safetensors" and name == SAFETENSORS_RESERVED))


def check_member_name(name: str, source: str | None = None, *, fmt: str,
                      hint: str | None = None, others: Sequence[str] = ()) -> str:
    """Returns ``name`` if it is safe as a member name of an ``fmt`` output file.

    Names may use ``/`` as a separator (``dense/kernel``), but no component may be empty,
    ``.`` or ``..`` (an ``.npz`` member ``../../x`` would be extracted outside the target), and
    NUL and ``\\`` are refused. safetensors reserves ``__metadata__`` for its header.

    Args:
        hint: what the user can do (the caller's options); by default ``--rename``/``--exclude``.
        others: more names refused for the same reason (named in the message, up to 5).

    Raises:
        OutputError: naming the tensor and the options that rename or leave it out.
    """
    where = f" (from {source!r})" if source and source != name else ""
    more = (f" (so are {', '.join(repr(o) for o in others[:5])}"
            + (f" and {len(others) - 5} more" if len(others) > 5 else "") + ")") if others else ""
    hint = hint or "; rename it with --rename or leave it out with --exclude"
    if fmt == "safetensors" and name == SAFETENSORS_RESERVED:
        raise OutputError(f"tensor name {name!r}{where} is reserved by safetensors for its "
                          f"header{more}{hint}")
    if not member_name_ok(name, fmt):
        raise OutputError(f"tensor name {name!r}{where} cannot be a {fmt} member name (empty "
                          f"part, '.', '..', '\\' or NUL){more}{hint}")
    return name
