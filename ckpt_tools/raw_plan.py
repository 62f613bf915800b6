"""Which evidence ``export --raw`` of a TF1 checkpoint decides on: its graph file's save op,
or, where that file records none that wrote this checkpoint, the keys alone.

The ``--raw`` checks that read what each key holds (a ``Saver(ema.variables_to_restore())``
writing raw ``w`` under ``w/ExponentialMovingAverage``, a mixed Saver writing ``w``'s average
under ``w``) ask the ``.meta``'s save op, and pass where it records none. A ``.meta`` exported
before the Saver was built (no save op), or a plain ``Saver()``'s ``.meta`` beside data a
second Saver overwrote (its save op writes other keys), therefore turned every check off,
while the refusals for a checkpoint with no ``.meta`` did not apply either: ``--raw`` wrote
``w``'s average as raw ``w`` and dropped raw weights, exit 0, where ``--no-meta`` and the
default export refuse (review-24-attack-r79 F2, F8). Such a graph proves nothing of what the
keys hold, so ``--raw`` must pass the reading without it too (:func:`refuse_as_without_graph`).
"""

from __future__ import annotations

from collections.abc import Callable

from .checkpoint import Checkpoint
from .errors import EmaError
from .save_op import NO_SAVE_OP, graph_file, graph_named, why_unwritten, written_sources


def unwritten_graph(ckpt: Checkpoint) -> str:
    """Why the TF1 graph file read for ``ckpt`` proves nothing of what its keys hold (it
    records no save op, several that disagree, or one that did not write this checkpoint:
    :func:`~ckpt_tools.save_op.why_unwritten`).

    Returns:
        `str`: the reason, ``""`` where no graph file is read (none, ``--no-meta``, TF2) or
        its save op wrote this checkpoint.
    """
    if graph_file(ckpt) is None or written_sources(ckpt) is not None:
        return ""
    return why_unwritten(ckpt)


def refuse_as_without_graph(ckpt: Checkpoint,
                            replan: Callable[[Checkpoint], object]) -> None:
    """Refuses an ``export --raw`` the checkpoint's keys alone refuse, where its graph file
    proves nothing of what they hold (:func:`unwritten_graph`): ``replan`` runs the same
    ``--raw`` plan on the view of ``ckpt`` without its graph (``--no-meta``).

    Raises:
        EmaError: that plan's refusal (exit 6, its option and keys kept), its message saying
            why the graph file was not trusted.
    """
    why = unwritten_graph(ckpt)
    if not why:
        return
    try:
        replan(ckpt.with_meta(False, unread=False))
    except EmaError as exc:
        said = str(exc)
        head = f"{ckpt.path}: "
        body = said[len(head):] if said.startswith(head) else said
        reason = "records no save op" if why == NO_SAVE_OP else why
        exc.args = (f"{ckpt.path}: its {graph_named(ckpt)} {reason}, so it proves nothing of "
                    "what the keys hold and export --raw reads them as with no .meta beside "
                    f"it: {body}",)
        raise
