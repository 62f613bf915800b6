"""Refusing a ``--strip-scope`` that makes two checkpoint keys restore into one name.

``--strip-scope s/`` on a checkpoint holding both ``W`` and ``s/W`` gives both the name ``W``:
whichever a consumer takes last wins, so the map, a baked checkpoint and the Python API refuse
instead (review-12-attack-r19 F4), naming the file, the two keys and the option.

A ``--strip-scope`` that begins no name strips nothing: the output names are the input's, the
``.meta`` is dropped as if keys had been re-scoped, and the user who typed ``nett/`` for
``net/`` learns it only when a Saver of the stripped names fails. It is refused (exit 3), as
an ``--exclude`` or ``--rename`` that matches nothing is (review-16-user-u18 F5).

A prefix is a scope: ``w0`` is read as ``w0/`` (:func:`scope_prefix`), so it never cuts a name
in half (``w0`` -> ``0``) nor leaves one starting with ``/``; a variable named as the scope
itself (``w0`` under ``--strip-scope w0``) would be left with the empty name, which no graph has
and a bundle cannot hold: refused (exit 3), naming it (review-17-attack-r36 F5).

A TF2 object-graph checkpoint's keys are object paths its graph names
(``model/w/.ATTRIBUTES/VARIABLE_VALUE``): re-scoped, they are read by nothing, and the
variable ``model`` under ``--strip-scope model`` became ``.ATTRIBUTES/VARIABLE_VALUE``;
``restore-ema`` refuses there (exit 5), and so do ``map`` and ``ema_map``
(:func:`refuse_object_rescope`, review-17-attack-r38 F7).
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import EmaError, UnsupportedFormatError, VariableNotFoundError

_REMEDY = ("leave one out with --exclude (exclude=) or strip a scope that only one of them "
           "has")


def refuse_rescope_clash(path: str, pairs: Iterable[tuple[str, str, str]],
                         strip_scope: str | None, remedy: str = _REMEDY) -> None:
    """Refuses two inputs that would be restored or written under one output name.

    Args:
        path: the checkpoint, as its messages name it.
        pairs: ``(source key, target key, output name)`` for each tensor restored or written:
            a raw variable has ``source == target``.
        strip_scope: the ``--strip-scope`` given (``None``: nothing is stripped, and only a
            strip can make two distinct names one).
        remedy: what to do instead, as the caller's options allow.

    Raises:
        EmaError: naming the two inputs, the output name and ``--strip-scope`` (exit 6).
        VariableNotFoundError: no target begins with ``strip_scope``, or a target is the
            scope's own name (exit 3).
    """
    if not strip_scope:
        return
    said = strip_scope if strip_scope.endswith("/") else (
        f"{strip_scope} (read as the scope {strip_scope}/)")
    strip_scope = scope_prefix(strip_scope)
    pairs = list(pairs)
    own = strip_scope[:-1]
    if any(tgt == own for _, tgt, _ in pairs):
        raise VariableNotFoundError(
            f"{path}: --strip-scope {said} (Python: strip_scope=) would leave {own} "
            f"with an empty name: {own} is the scope's own name, not a name inside it; strip "
            f"a scope that {own} is inside ('ckpt map' shows the names)")
    seen: dict[str, tuple[str, str]] = {}
    stripped = False
    for src, tgt, out in pairs:
        stripped = stripped or tgt.startswith(strip_scope)
        first = seen.setdefault(out, (src, tgt))
        if first[1] != tgt:
            a, b = (_shown(*first), _shown(src, tgt))
            raise EmaError(
                f"{path}: --strip-scope {strip_scope} (Python: strip_scope=) makes {a} and "
                f"{b} restore into one variable, {out}: {remedy}")
    if seen and not stripped:
        raise VariableNotFoundError(
            f"{path}: --strip-scope {strip_scope!r} (Python: strip_scope=) matched nothing: no "
            "name begins with it, so nothing would be re-scoped; 'ckpt map' shows the names "
            "(right of each line) a prefix is stripped from")


def scope_prefix(strip_scope: str) -> str:
    """``strip_scope`` as the scope it names: ending in ``/``.

    Example:
        >>> scope_prefix("tower_0"), scope_prefix("tower_0/")
        ('tower_0/', 'tower_0/')
    """
    return strip_scope if strip_scope.endswith("/") else strip_scope + "/"


def _shown(src: str, tgt: str) -> str:
    return tgt if src == tgt else f"{src} (the average of {tgt})"


def checkpoint_key(graph_key: str, strip_scope: str | None, add_scope: str | None) -> str:
    """The checkpoint key a graph variable named ``graph_key`` reads under ``strip_scope`` /
    ``add_scope`` (the inverse of :func:`~ckpt_tools.emamap.rescope`): ``eval/w`` in a graph
    imported with ``import_meta_graph(..., import_scope="eval")`` reads ``w`` under
    ``add_scope="eval/"``. A name outside ``add_scope`` is read as it is.

    Example:
        >>> checkpoint_key("eval/w", None, "eval/")
        'w'
        >>> checkpoint_key("w", "tower_0/", None), checkpoint_key("w", "tower_0", None)
        ('tower_0/w', 'tower_0/w')
    """
    if add_scope and graph_key.startswith(add_scope):
        graph_key = graph_key[len(add_scope):]
    return (scope_prefix(strip_scope) if strip_scope else "") + graph_key


def refuse_object_rescope(ckpt, strip_scope: str | None, add_scope: str | None) -> None:
    """Refuses ``strip_scope``/``add_scope`` for a checkpoint with an object graph (TF2,
    a SavedModel's variables): its keys are object paths the graph names, which no re-scoped
    name restores (``tf.train.Checkpoint`` restores by object whatever the scope).

    Raises:
        UnsupportedFormatError: either is given and ``ckpt`` has an object graph (exit 5).
    """
    if (strip_scope or add_scope) and getattr(ckpt, "objects", None) is not None:
        raise UnsupportedFormatError(
            f"{ckpt.path}: --strip-scope/--add-scope (strip_scope/add_scope) cannot apply to a "
            "TF2 checkpoint, whose keys are the object paths its object graph names "
            "(model/w/.ATTRIBUTES/VARIABLE_VALUE): re-scoped, they are read by nothing; leave "
            "it out (tf.train.Checkpoint restores by object, whatever the scope), or name the "
            "exported weights with ckpt export --rename")


def stored_checkpoint_key(graph_key: str, strip_scope: str | None, add_scope: str | None,
                          stored) -> str:
    """:func:`checkpoint_key`, except that a name stored as it is, outside ``strip_scope``,
    where the name inside it is not stored, is read as it is: a graph rebuilt without the
    training scope ``net/`` still has the top-level ``global_step``, stored as
    ``global_step``, which ``ckpt map --strip-scope net/`` maps to itself
    (review-17-user-u19 F12). ``stored``: the checkpoint's keys (anything ``in`` tests).

    Example:
        >>> stored_checkpoint_key("global_step", "net/", None, {"net/w", "global_step"})
        'global_step'
        >>> stored_checkpoint_key("w", "net/", None, {"net/w", "global_step"})
        'net/w'
    """
    key = checkpoint_key(graph_key, strip_scope, add_scope)
    if strip_scope and key not in stored:
        bare = key[len(scope_prefix(strip_scope)):]
        if bare in stored and not bare.startswith(scope_prefix(strip_scope)):
            return bare
    return key
