"""Readable names of a checkpoint's keys, from the TF2 object graph: the object path
:class:`~ckpt_tools.variable.Variable` shows for each key, and a Keras 3 model's weights by
their path through the model itself.

:class:`KeyPaths` is the part of :class:`~ckpt_tools.checkpoint.Checkpoint` that names keys;
it needs no roles and no ``.meta``, so ``ckpt list -q`` names variables without classifying
them.
"""

from __future__ import annotations

from .formats.entry import TensorEntry
from .formats.objgraph import OBJECT_GRAPH_KEY, readable_name
from .object_paths import LIST_ITEM, clashing_paths, model_side_paths, named_paths

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from .formats import Reader
    from .formats.objgraph import ObjectGraph


class KeyPaths:
    """The readable object paths of the stored keys; a base of
    :class:`~ckpt_tools.checkpoint.Checkpoint`, which sets ``objects`` (``None``: the key is
    the name) and the caches ``_qualified`` and ``_clashing`` (``None`` until computed)."""

    _reader: Reader
    objects: ObjectGraph | None
    _qualified: dict[str, str] | None
    _clashing: set[str] | None

    def path_of(self, key: str, entry: TensorEntry | None = None) -> str | None:
        """Returns the readable object path :class:`Variable` shows for ``key`` (TF2 object
        checkpoints, Keras files), or ``None`` when the key is the name (TF1 checkpoints).

        Needs no roles, so ``ckpt list -q`` can name 100,000 variables without classifying
        them. ``entry`` saves a lookup when the caller has it.
        """
        if self.objects is None:
            if entry is None:
                entry = self._reader.entries[key]
            return entry.extra.get("path") if entry.extra else None  # readers that know one
        path = self.objects.paths.get(key) or (readable_name(key) if key != OBJECT_GRAPH_KEY
                                               else None)
        full = self.objects.full_names.get(key)
        if path and full and LIST_ITEM.search(path):
            # Keras 3 models are reachable only through list attributes
            # ("optimizer/_trainable_variables/0"): the variable's own name says more, unless
            # another variable has it too (two models named "net": a GAN's generator and
            # critic), where the object path's leading segments tell them apart.
            path = self._named_paths().get(key, full)
        elif path:
            if self._clashing is None:
                self._clashing = clashing_paths(self.objects)
            if key in self._clashing:  # "a/b" and a -> b: the escaped form tells them apart
                path = readable_name(key)
        return path

    def keys_by_model_path(self) -> dict[str, str]:
        """Returns ``<object path>/.ATTRIBUTES/VARIABLE_VALUE`` -> checkpoint key for the
        variables a TF2 object checkpoint keys through an optimizer's lists (a Keras 3 model's
        weights: ``optimizer/_trainable_variables/0``), by their path through the model
        itself (``model/_operations/1/_kernel``), which the object graph records too. Empty
        for other checkpoints."""
        if self.objects is None:
            return {}
        return {f"{path}/.ATTRIBUTES/VARIABLE_VALUE": key
                for key, path in model_side_paths(self.objects, escaped=True).items()
                if path and f"{path}/.ATTRIBUTES/VARIABLE_VALUE" != key}

    def _named_paths(self) -> dict[str, str]:
        """Key -> ``<root>/<own name>`` for the list-reachable variables whose own name
        (``net/h/kernel``) another such variable shares: the fewest leading segments of their
        object paths that tell them apart (``gen_opt/net/h/kernel``,
        ``critic_opt/net/h/kernel``). Computed once
        (:func:`~ckpt_tools.object_paths.named_paths`)."""
        if self._qualified is None:
            self._qualified = named_paths(self.objects)
        return self._qualified
