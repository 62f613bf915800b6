"""Keys named as averages that no op of the part of a ``.meta``'s graph read writes, where
that graph was not read whole (review-28-attack-r103 F5).

:func:`~ckpt_tools.ema_sources.unwritten_sources` finds averages read by name (``c/fast``)
that no op of the graph writes, and their refusal says the ``.meta`` may be another graph's
or the keys tensors kept from outside it, offering ``--allow-missing`` as TF's answer
(``ema.average(c)`` is ``None`` there). Where the graph calls more functions than
:func:`~ckpt_tools.formats.graph_def.read_branches` reads, an ``ema.apply()`` in a function
left unread (a second object's, inside a ``tf.cond``) may write them: nothing is proven
unwritten, so the refusal says the graph was not read whole and offers ``--exclude`` (the
weights left out) and ``--no-meta`` (the names), ``--allow-missing`` only as the caller's
statement.
"""

from __future__ import annotations

import glob

from .checkpoint import Checkpoint
from .offer_probe import option_text, works
from .wording import counted


def unread_message(ckpt: Checkpoint, found: dict[str, str], stated: str | None = None) -> str:
    """The refusal of ``found`` (weight key -> the key read as its average, none written by
    an op read) where the ``.meta``'s graph was not read whole; ``stated``: the command's
    ``--ema-name``, kept in the ``--exclude`` offer.

    Returns:
        the one-line refusal, naming the options that decide.
    """
    sample = "; ".join(f"{s} for {t}" for t, s in sorted(found.items())[:3])
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    meta = ckpt.meta.path if ckpt.meta is not None else ".meta"
    exclude = tuple(sorted(glob.escape(t) for t in found))
    offer = f"{option_text(stated, exclude)} exports the other weights' averages without " \
        "them; " if works(ckpt, stated, exclude) else ""
    return (f"{ckpt.path}: the checkpoint stores {counted(len(found), 'key')} named as averages "
            "that no "
            f"op of the part of the graph in {meta} read writes: {sample}{more}; that graph "
            f"calls more functions than are read, so an ema.apply() in one not read (inside a "
            f"tf.cond or tf.function) may write them, and nothing proves them unwritten or "
            f"one EMA object's averages beside the others; {offer}--no-meta (Python: "
            f"use_meta=False) pairs by the checkpoint's names (nothing then tells one EMA "
            f"object's averages from another's); --allow-missing keeps them raw only as your "
            f"statement that nothing averages them")
