"""What ``show``/``stats`` say of a name the checkpoint does not store (:func:`not_found`):
the closest names ``ckpt list`` shows, the weight a layer's name means where only its average
records that name, a partitioned variable's part by its graph name."""

from __future__ import annotations

from .checkpoint import Checkpoint


def not_found(ckpt: Checkpoint, name: str, by_path: dict[str, str]) -> Exception:
    """The error for ``name``, stored under no key or object path: the closest of the names
    ``ckpt list`` shows (object paths where the file has them: a Keras file's
    ``sequential/dense/bias``, not its key ``layers/dense/vars/1``), else of the keys."""
    import difflib

    from .errors import VariableNotFoundError
    from .variable import shell_word

    shown = {**{k: None for k in ckpt.keys() if k not in by_path.values()},
             **dict.fromkeys(by_path)}
    close = difflib.get_close_matches(name, list(shown), n=3) or difflib.get_close_matches(
        name, list(ckpt.keys()), n=3)
    if not close:  # a layer's weight named without the model's prefix (dense/bias)
        close = [p for p in shown if p.endswith("/" + name)][:3]
    hint = f"; did you mean {', '.join(map(shell_word, close))}?" if close else ""
    averaged = _averaged_weights(ckpt, name)
    if averaged:  # the layer's name the average records, not slots named alike (u24 F2)
        hint = "; did you mean " + ", ".join(
            f"{shell_word(weight)} (averaged as {shell_word(average)})"
            for weight, average in averaged) + "?"
    part = _part_said(ckpt, name)
    if part:
        hint = f"; did you mean {part}?"
    return VariableNotFoundError(f"{ckpt.path}: no variable named {name!r}{hint}")


def _averaged_weights(ckpt: Checkpoint, name: str) -> list[tuple[str, str]]:
    """``[(weight, average)]`` (shown names) of the weights whose paired average's shown name
    ends with ``/name``: a tf_keras TF-format file stores layer ``d1``'s kernel as
    ``layer_with_weights-0/kernel`` and only its average names it
    (``Adam/average/d1/kernel``), so ``d1/kernel`` means that weight, not the optimizer
    slots named alike (review-22-user-u24 F2). At most three.

    Returns:
        `list[tuple[str, str]]`.
    """
    from .errors import CheckpointError

    try:
        variables = ckpt.variables_unwarned()
    except CheckpointError:  # a file whose roles need a statement: the other hints stand
        return []
    shown = {v.name: v.path or v.name for v in variables}
    return [(shown[v.ema_of], shown[v.name]) for v in variables
            if v.role == "ema" and v.ema_of in shown and shown[v.name].endswith("/" + name)
            and not shown[v.ema_of].endswith("/" + name)][:3]


def _part_said(ckpt: Checkpoint, name: str) -> str | None:
    """Returns ``emb (partitioned; part 1 is rows 4:8)`` for ``emb/part_1``, the graph name
    of a part of a partitioned variable the checkpoint stores whole under ``emb`` (one key,
    one slice per part); ``None`` for any other name (review-22-user-u24 F2).

    TensorFlow names a partitioned variable's parts ``part_0``, ``part_1``... in the order of
    their offsets along the partitioned axis; the slices record each part's offset there.
    """
    import re

    from .formats.slices import FULL

    found = re.fullmatch(r"(.+)/part_(\d+)", name)
    whole = found.group(1) if found else None
    if whole is None or whole not in ckpt or not ckpt.entry(whole).slices:
        return None
    parts = sorted(ckpt.entry(whole).slices, key=lambda s: [start for start, _ in s.extents])
    index = int(found.group(2))
    if index >= len(parts):
        return f"{whole} (partitioned into {len(parts)} parts)"
    shape = ckpt.entry(whole).shape
    cut = [(axis, start, length) for axis, (start, length) in enumerate(parts[index].extents)
           if length != FULL and (start, length) != (0, shape[axis])]
    if len(cut) != 1:
        return f"{whole} (partitioned)"
    axis, start, length = cut[0]
    span = (f"rows {start}:{start + length}" if axis == 0 else
            f"{start}:{start + length} along axis {axis}")
    return f"{whole} (partitioned; part {index} is {span})"
