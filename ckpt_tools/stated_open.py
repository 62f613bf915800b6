"""The file statements of :func:`~ckpt_tools.open_checkpoint`, taken by every Python function
that pairs averages, as the CLI takes them on every pairing command (review-16-attack-r32 F1).

``ckpt export``/``map``/``restore-ema``/``diff --ema``/``stats`` take ``--use-ema``,
``--optimizer``, ``--trainable`` (``--loop-order``), ``--fit-order``, ``--averages-only`` and
``--not-swapped``; :func:`~ckpt_tools.export_weights`, :func:`~ckpt_tools.ema_map`,
:func:`~ckpt_tools.bake_ema`, :func:`~ckpt_tools.diff_ema` and
:func:`~ckpt_tools.checkpoint_stats` take the same statements under the Python names
(``use_ema=``, ``optimizer=``, ``trainable=``, ``loop_order=``, ``fit_order=``,
``averages_only=``, ``not_swapped=``) and forward them here (``export --keys-are-raw``,
``keys_are_raw=``, too; ``export``/``map``/``restore-ema --saver-def-wrote``,
``saver_def_wrote=``), the one place that opens the file
with them: a path is opened with them, an open :class:`~ckpt_tools.Checkpoint` is opened again
with them added (:meth:`~ckpt_tools.Checkpoint.reopened`; the caller's stays as it was).
"""

from __future__ import annotations

import os

from .checkpoint import Checkpoint, open_checkpoint
from .errors import OptionError

# the statements open_checkpoint takes (loop_order: trainable= in a custom loop's order)
STATEMENTS = ("use_ema", "optimizer", "trainable", "loop_order", "fit_order", "averages_only",
              "not_swapped", "keys_are_raw", "saver_def_wrote")


def _said(key: str, value) -> bool:
    """Whether ``value`` states something: the defaults (``None``; ``False`` but for
    ``use_ema``, where it is ``--no-use-ema``) state nothing."""
    return value is not None and (value is not False or key == "use_ema")


def take_statements(options: dict) -> dict:
    """Removes the statements from ``options`` (a function's ``**map_options``) and returns
    them, those left at their defaults dropped; ``not_swapped`` stays in
    ``options`` too (:func:`~ckpt_tools.ema_map` states it on the checkpoint it pairs)."""
    said = {k: options[k] for k in STATEMENTS if k in options and _said(k, options[k])}
    for k in STATEMENTS:
        if k != "not_swapped":
            options.pop(k, None)
    return said


def refuse_unknown(function: str, options: dict, checkpoint=None) -> None:
    """A ``TypeError`` for a keyword that is no statement, as Python gives it, and
    :func:`refuse_raw_statement`'s ``OptionError``."""
    for k in options:
        if k not in STATEMENTS:
            raise TypeError(f"{function}() got an unexpected keyword argument {k!r}")
    refuse_raw_statement(function, options, checkpoint)


def refuse_raw_statement(function: str, options: dict, checkpoint=None) -> None:
    """An ``OptionError`` for ``keys_are_raw=True`` given to ``function``, which is no
    ``export_weights(..., ema=False)``: only ``--raw`` reads it, and elsewhere it would be
    ignored, the averages read whatever it states (review-24-attack-r77 F3; the CLI's
    ``--keys-are-raw`` without ``--raw`` exits 2 alike). Stated inside an open
    ``checkpoint`` (``open_checkpoint(p, keys_are_raw=True)``) it is refused alike, as
    ``export_weights`` without ``ema=False`` refuses it there (review-24-attack-r79 F4).

    Raises:
        OptionError: where ``options`` or ``checkpoint`` states ``keys_are_raw``.
    """
    if options.get("keys_are_raw") or getattr(checkpoint, "keys_are_raw", False):
        raise OptionError(
            f"{function}(): keys_are_raw=True (--keys-are-raw) states that keys named as "
            "averages hold the raw weights, which only export_weights(..., ema=False) "
            "(ckpt export --raw) exports: omit it here")


def _open_arguments(path: str, statements: dict) -> dict:
    said = dict(statements)
    loop_order = said.pop("loop_order", False)
    trainable = said.get("trainable")
    if isinstance(trainable, str):  # "d1,d2": the CLI's spelling, not a list of characters
        trainable = [n.strip() for n in trainable.split(",") if n.strip()]
    if loop_order:
        if trainable is None:
            raise OptionError(f"{path}: loop_order=True states the order of trainable=: "
                              "give trainable=[...] too (--loop-order --trainable NAMES)")
        from .formats.keras.stated import LoopOrder

        trainable = LoopOrder(trainable)
    if trainable is not None:
        said["trainable"] = list(trainable) if not loop_order else trainable
    return said


class opened_stated:
    """Context manager: ``checkpoint`` (a path or an open checkpoint) opened with
    ``statements``; what it opened is closed on exit (a caller's checkpoint never is).

    Args:
        checkpoint: a path, or an open :class:`~ckpt_tools.Checkpoint`.
        statements: ``use_ema``, ``optimizer``, ``trainable``, ``loop_order``, ``fit_order``,
            ``averages_only``, ``not_swapped``, ``keys_are_raw``, ``saver_def_wrote`` (as
            :func:`~ckpt_tools.open_checkpoint`).
        meta: for a path, read the ``.meta`` beside it.

    Raises:
        OptionError, EmaError: as :func:`~ckpt_tools.open_checkpoint` refuses the statements.
    """

    def __init__(self, checkpoint: str | os.PathLike | Checkpoint, statements: dict, *,
                 meta: bool = True):
        self.checkpoint, self.meta = checkpoint, meta
        self.statements = {k: v for k, v in statements.items() if _said(k, v)}
        self.owned = False

    def __enter__(self) -> Checkpoint:
        c = self.checkpoint
        if isinstance(c, Checkpoint):
            said = dict(self.statements)
            if said.pop("not_swapped", False):  # stated on the caller's, as ema_map states it
                c.not_swapped = True
            if not said:
                return c
            changes = _open_arguments(c.path, said)
            if c.not_swapped and not c.not_swapped_record:  # stated on it after it was opened
                changes.setdefault("not_swapped", True)
            self.ckpt = c.reopened(**changes)
        else:
            self.ckpt = open_checkpoint(c, meta=self.meta,
                                        **_open_arguments(os.fspath(c), self.statements))
        self.owned = True
        return self.ckpt

    def __exit__(self, *exc) -> None:
        if self.owned:
            self.ckpt.close()
