"""TF2 averages of one EMA name that the object graph reaches through different holders
(review-28-attack-r103 F4).

A TF2 checkpoint records no decay and no ``apply()``: two default-named objects
(``ExponentialMovingAverage(0.5)`` over ``w``, ``b`` and ``ExponentialMovingAverage(0.9)``
over ``c``) both name their averages ``<variable>/ExponentialMovingAverage``, so the names
read as one object's. What the file does show is where each average is tracked:
``Checkpoint(model=m, ema=[e1's averages], ema2=[e2's average])`` puts them under two
holders (``ema``, ``ema2``), and so do ``ema={"gen": [...], "disc": [...]}`` (``ema/gen``,
``ema/disc``), a list of lists or a GAN module's two lists (review-28-attack-r104 F1): the
holder is each object directly holding the average: every parent the object graph records
for its node, not only its key's path (TensorFlow keys an average by its first path, so one kept
in a combined list ``all`` beside per-object lists ``g_ema``, ``d_ema`` is keyed under ``all``
alone in one attribute order: review-30-attack-r111 F4). The averages of one name are split where
some holder holds a proper subset of them (:func:`is_split`). A holder's path is read off the
object-graph edges (one
dict keyed by the weights' paths, ``{"dense/kernel": ...}``, is one holder: the edge holds the
slash). A structure that mirrors the model's paths (``ema={"gen": {"w", "b"}, "disc":
{"c"}}`` for ``gan/gen/w``, ``gan/disc/c``) is several holders too: two objects kept per
network write exactly those keys (review-29-attack-r109 F2), so nothing tells it from one
object's mirror. ``ckpt train --api tf2`` keeps its averages in one dict keyed by the
weights' paths (``ema/conv1.Sweights``); the mirror it wrote before (``ema/conv1/weights``)
is refused like any other, and ``--ema-name ExponentialMovingAverage`` reads it. A Keras
optimizer's own averages (no EMA name) are its own. Averages of one
name reached through different holders are not proven one object's: exporting them
together may give each weight its own object's average beside the other's, so they are
refused unless ``--ema-name`` states the name (your statement that they are one object's
averages), with the ``--exclude`` offers that export one holder's averages alone. Only TF's
default name is such a statement: ``--ema-name ema``, needed just to read averages of a name
the user gave, states nothing of holders (two objects both named ``ema`` write the same keys:
review-31-attack-r113 F4), so those are refused with it too, offering one holder at a time. One
holder (a single list, dict or module, or every average an attribute of the root) proves
nothing either way and is read as before (``docs/setups.md``: nothing in such a file tells
one object from two).
"""

from __future__ import annotations

import re
from collections import deque

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError, suffix_base
from .holder_offers import MOST_EXCLUDES, SHOWN, holder_offers, shown_names
from .offer_probe import ONE_HOLDER
from .roles import DEFAULT_EMA_NAME
from .tf2_twins import reach


def _edges(key: str) -> tuple[str, ...]:
    """The object-graph edges a TF2 checkpoint key runs through, unescaped (TensorFlow writes
    ``/`` in an edge's name as ``.S`` and ``.`` as ``..``): ``("ema", "dense/kernel")`` of
    ``ema/dense.Skernel/.ATTRIBUTES/VARIABLE_VALUE`` (one dict key holding a slash)."""
    escaped = key.split("/.ATTRIBUTES/")[0].split("/")
    return tuple(_ESCAPE.sub(lambda m: "/" if m.group(1) == "S" else m.group(1), e)
                 for e in escaped)


_ESCAPE = re.compile(r"\.(.)")


def _parents(objects) -> tuple[dict[str, list[int]], dict[int, tuple[str, ...]]]:
    """Every node directly holding each variable key (all the parent edges the object graph
    records, not only the key's own path: TensorFlow names a key by its first path, so an
    average also kept in a combined list is keyed under that list alone, review-30-attack-r111
    F4), and each node's path of edges (breadth-first from the root, as TensorFlow names the
    keys)."""
    path_of: dict[int, tuple[str, ...]] = {0: ()}
    queue = deque([0])
    while queue:
        node = queue.popleft()
        for name, child in objects.children.get(node, ()):
            if child not in path_of:
                path_of[child] = path_of[node] + (name,)
                queue.append(child)
    node_of = {k: n for n, k in objects.node_keys.items()}
    parents: dict[int, list[int]] = {}
    for node, kids in objects.children.items():
        for _name, child in kids:
            if node not in parents.setdefault(child, []):
                parents[child].append(node)
    return ({k: sorted(parents.get(n, ())) for k, n in node_of.items()}, path_of)


def root_attributes(ckpt: Checkpoint) -> dict[str, frozenset[str]]:
    """Variable key -> every attribute of the checkpoint's root the object graph reaches it
    through (``Checkpoint(all=[e1(w), e2(c)], d=[e2(c)])``: ``e2(c)``, keyed ``all/1``, is
    ``{"all", "d"}``): TensorFlow keys a variable by its first path only, so its key's first
    part names one of them (review-31-attack-r113 F1).

    Returns:
        `dict`: ``{}`` for a checkpoint without an object graph."""
    return {} if ckpt.objects is None else reach(ckpt.objects)  # the walk tf2_twins does


def holders(ckpt: Checkpoint, pairs,
            left_out=None) -> dict[str, dict[tuple[str, ...], list[tuple[str, str]]]]:
    """EMA name -> holder (each object directly holding the average: every parent the object
    graph records for its node, by that parent's path of edges; an average kept in a combined
    list and in a per-object list is under both) -> ``[(weight key, average key), ...]`` of
    the pairs (``(average key, weight key)``) of a TF2 checkpoint whose averages its object
    graph tracks (optimizer slots left out: an optimizer's own), ``left_out(average, weight)``
    leaving a pair out.

    Returns:
        `dict`: ``{}`` for a checkpoint without an object graph.
    """
    objects = ckpt.objects
    if objects is None:
        return {}
    parents, path_of = _parents(objects)
    out: dict[str, dict[tuple[str, ...], list[tuple[str, str]]]] = {}
    for average, weight in sorted(pairs):
        if average == weight or average in objects.slots or average not in objects.paths or (
                left_out is not None and left_out(average, weight)):
            continue
        name, var = objects.full_names.get(average, ""), objects.full_names.get(weight, "")
        family = suffix_base(name[len(var) + 1:]) if var and name.startswith(var + "/") \
            else ""
        if not family:  # no EMA name (a Keras optimizer's own averages): no name to share
            continue
        held = [path_of[n] for n in parents.get(average, ()) if n in path_of] \
            or [_edges(average)[:-1]]
        for holder in sorted(set(held)):
            out.setdefault(family, {}).setdefault(holder, []).append((weight, average))
    return out


def is_split(each: dict[tuple[str, ...], list[tuple[str, str]]]) -> bool:
    """Whether the averages of one EMA name (:func:`holders`' holders of one name) are split:
    some holder holds a proper subset of them while another holder holds averages outside
    it (a combined list beside per-object lists is split; one list or dict holding them all,
    alone or twice, is not)."""
    every = {a for taken in each.values() for _w, a in taken}
    return any({a for _w, a in taken} < every for taken in each.values())


def combined(each: dict[tuple[str, ...], list[tuple[str, str]]]) -> list[tuple[str, ...]]:
    """The holders of one EMA name's averages (:func:`holders`) that hold exactly the
    averages of two or more other holders together (``all=g_ema + d_ema`` beside ``g_ema``
    and ``d_ema``): a combined list, no object of its own, so a refusal does not count it as
    one (note s30m: "3 different objects" of all, g_ema and d_ema)."""
    sets = {h: {a for _w, a in taken} for h, taken in each.items()}
    out = []
    for holder, held in sets.items():
        parts = [s for h, s in sets.items() if h != holder and s < held]
        if len(parts) > 1 and set().union(*parts) == held:
            out.append(holder)
    return sorted(out)


#: keys beside the averages that ``ckpt train --api tf2`` writes (its step and loss averages)
_TRAIN_KEYS = ("step/.ATTRIBUTES/VARIABLE_VALUE",
               "losses/cross_entropy/avg/.ATTRIBUTES/VARIABLE_VALUE")


def _older_train(ckpt: Checkpoint, each: dict[tuple[str, ...], list]) -> bool:
    """Whether the split averages are kept as an older ``ckpt train --api tf2`` kept its one
    object's (``mirror_module``: ``ema/conv1/weights`` beside ``step`` and ``losses/``): every
    holder below ``ema``, the run's own keys stored. A file like it may still hold two
    objects' averages: this only names where it may come from."""
    paths = ckpt.objects.paths if ckpt.objects is not None else {}
    return all(k in paths for k in _TRAIN_KEYS) and all(h[:1] == ("ema",) for h in each)


def unstated(family: str) -> str:
    """Why ``--ema-name family``, a name the user gave (not TF's default), states nothing of
    split averages: it is passed to read averages of that name at all, and two objects both
    given it write exactly these keys (review-31-attack-r113 F4).

    Returns:
        the words, with the way out (one holder)."""
    return (f"--ema-name {family}, which averages of a name TensorFlow does not give need "
            f"to be read at all, does not state that they are one EMA object's (two objects "
            f"both named {family} write these keys), and no option does: one object's "
            f"averages kept in one list or dict are read together")


def split_named(ckpt: Checkpoint, pairs, name: str) -> str:
    """Where ``pairs`` (``(average key, weight key)``) read under ``--ema-name name`` (a name
    TensorFlow does not give, which the unknown-name refusal asks for) are split over holders
    (:func:`is_split`): the words that say so, with the ``--ema-name name --exclude`` offers
    that export one holder's averages alone (review-31-attack-r113 F4).

    Returns:
        `str`: ``""`` where they are not split (or no object graph is read)."""
    if ckpt.objects is None:
        return ""
    split = {f: each for f, each in holders(ckpt, pairs).items()
             if is_split(each) and f == suffix_base(name)}
    if not split:
        return ""
    family, each = next(iter(split.items()))
    paths = shown_names(ckpt)
    shown = "; ".join(f"{'/'.join(holder) or 'the root'} holds the averages of "
                      f"{', '.join(paths.get(w, w) for w, _a in taken)}"
                      for holder, taken in sorted(each.items())[:SHOWN])
    offers, _unlisted = holder_offers(ckpt, each, name)
    return (f"; --ema-name {name} is refused because the averages named {family} are split "
            f"over {len(each)} holders ({shown}), as two EMA objects both named {family} saved "
            f"apart keep theirs: "
            f"{unstated(family)}" + (f"; {' or '.join(offers)} {ONE_HOLDER}" if offers
                                     else ""))


def _within(ckpt: Checkpoint, found: dict[str, dict[tuple[str, ...], list[tuple[str, str]]]],
            ema_name: str | None) -> dict[str, dict[tuple[str, ...], list[tuple[str, str]]]]:
    """``found`` (:func:`holders`), where ``ema_name`` is one root attribute reaching every
    average of a name (``--ema-name d``: the duplicate refusal's statement that ``d`` holds
    its own object's averages), with only the holders below that attribute: a combined list
    ``all`` beside ``d`` holds another object's averages too, and the user stated ``d``'s
    (review-31-attack-r113 F1), unless the holders outside it disagree (``g``, ``d`` beside a
    stated combined ``all``: two objects). Sub-holders of the attribute (``ema={"gen": [...],
    "disc": [...]}`` with ``--ema-name ema``) still count (review-29-attack-r109 F3)."""
    if ema_name is None or "," in ema_name:
        return found
    reach = root_attributes(ckpt)
    out = {}
    for family, each in found.items():
        outside = {frozenset(a for _w, a in t) for h, t in each.items() if h[:1] != (ema_name,)}
        # holders outside that disagree (g, d beside a stated combined 'all') show two objects
        if len(outside) < 2 and all(ema_name in reach.get(a, ()) for taken in each.values()
                                    for _w, a in taken):
            each = {h: t for h, t in each.items() if h[:1] == (ema_name,)} or each
        out[family] = each
    return out


class SplitHoldersError(UnprovenPairingError):
    """:func:`refuse_split_holders`' refusal (exit 6), with ``for_eval``: what ``ckpt eval``
    says instead, naming only ``--ema-name``, the option eval has (and ``ckpt export`` for
    the ``--exclude`` offers: review-30-attack-r111 F3), or ``None`` where no EMA name states
    anything; and ``offers``: every option the refusal offers that decides (the
    ``--exclude`` options exporting one holder's averages alone, then the ``--ema-name``
    statement), which ``list`` names all, not ``option`` alone (review-33-user-u33 F3)."""

    def __init__(self, message: str, option: str | None,
                 undecided: dict[str, tuple[str, ...]], for_eval: str | None = None,
                 offers: tuple[str, ...] = ()):
        super().__init__(message, option, undecided)
        self.for_eval = for_eval
        self.offers = tuple(offers)


def refuse_split_holders(ckpt: Checkpoint, pairs, ema_name: str | None,
                         left_out=None) -> None:
    """Refuses a TF2 checkpoint's pairs (``(average key, weight key)``) where averages of one
    EMA name are tracked under different holders (:func:`holders`) and ``ema_name`` does not
    state that name: they may be two objects' averages. Only ``--ema-name`` of the split name
    itself, TF's default ``ExponentialMovingAverage``, is that statement (a name the user gave
    is passed to read its averages at all: review-31-attack-r113 F4); a checkpoint attribute chosen
    with it (``--ema-name ema``, which the Keras ``use_ema`` refusal offers) selects pairs
    that are checked the same way (review-29-attack-r109 F3).

    Raises:
        SplitHoldersError: naming the holders and their weights, ``--ema-name`` (your
            statement) and the ``--exclude`` options that export one holder's averages alone
            where the export accepts them (exit 6). Where the split is the mirror an older
            ``ckpt train --api tf2`` wrote (:func:`_older_train`), a
            :class:`SplitHoldersError` leading with ``--ema-name`` (its ``option``, which
            ``list`` shows) and no ``--exclude`` offers (review-30-user-u32 F4). Its
            ``option`` is the statement, ``--ema-name ExponentialMovingAverage``, whatever the
            layout (``list`` said "no option decides": review-30-attack-r111 F2).
    """
    if ckpt.objects is None:
        return
    stated = set() if ema_name is None else {suffix_base(n.strip())
                                             for n in ema_name.split(",")}
    # only TF's default name states it: a name the user gave is passed to read the averages
    # at all, two objects both given it write the same keys (review-31-attack-r113 F4)
    split = {f: each for f, each in _within(ckpt, holders(ckpt, pairs, left_out),
                                             ema_name).items()
             if is_split(each) and not (f in stated and f == DEFAULT_EMA_NAME)}
    if not split:
        return
    family, each = sorted(split.items())[0]
    paths = shown_names(ckpt)
    listed = sorted(each.items())
    more = (f"; and {len(listed) - SHOWN} more holders" if len(listed) > SHOWN else "")
    shown = "; ".join(f"{'/'.join(holder) or 'the root'} holds the averages of "
                      f"{', '.join(paths.get(w, w) for w, _a in taken)}"
                      for holder, taken in listed[:SHOWN]) + more
    undecided = {w: (a,) for taken in each.values() for w, a in taken}
    said = f"--ema-name {ema_name}: " if ema_name is not None else ""
    together = combined(each)
    # the objects as the graph shows them: a combined list is none (note s30m)
    counted = len(each) - len(together)
    also = (f" and together under {', '.join('/'.join(h) or 'the root' for h in together)}"
            if together else "")
    if _older_train(ckpt, each) and family == DEFAULT_EMA_NAME:  # the tool's own older layout
        names = ", ".join("/".join(h) for h, _t in listed[:SHOWN]) + (
            ", ..." if len(listed) > SHOWN else "")
        core = (f"{said}the averages named {family} are kept in a mirror of the model's paths "
                f"under {counted} objects{also} ({names}), as an older ckpt train --api tf2 kept "
                f"its one EMA object's averages (ema/conv1/weights) and as two EMA objects of "
                f"that name kept per network keep theirs: a TF2 checkpoint records no decay "
                f"to tell them apart")
        statement = f"--ema-name {family}"
        raise SplitHoldersError(
            f"{ckpt.path}: {core}; {statement} states that they are one EMA object's averages "
            f"(a ckpt train run's are) and reads them; ckpt export --raw exports the raw "
            f"weights instead", statement, undecided,
            for_eval=f"{core}; ckpt eval {statement} states that they are one EMA object's "
                     f"averages (a ckpt train run's are) and evaluates them", offers=(statement,))
    offers, unlisted = holder_offers(ckpt, each, ema_name)
    stated = f"--ema-name {family}" if family else "--ema-name NAME"
    offer = (f"{' or '.join(offers)} exports one holder's averages alone"
             + (f" (one of the first {SHOWN} of {len(listed)} holders)"
                if len(listed) > SHOWN else "") + "; " if offers else "")
    if unlisted:  # an offer of hundreds of options is no offer to type (r109 F4)
        offer += (f"exporting one holder's averages alone takes more --exclude options than "
                  f"are listed here ({MOST_EXCLUDES} at most): {', '.join(unlisted)}; ")
    core = (f"{said}the averages named {family or '(unnamed)'} are tracked under "
            f"{counted} different objects{also} ({shown}), as two EMA objects of that name saved "
            f"apart are, or one object whose averages each network keeps, and a TF2 checkpoint "
            f"records no decay to show they are one object's, so each weight may take its own "
            f"object's average beside the other's")
    if family and family != DEFAULT_EMA_NAME:  # a name the user gave states nothing (r113 F4)
        alone = (f"; ckpt export {' or '.join(offers)} exports one holder's averages alone"
                 if offers else "")
        raise SplitHoldersError(
            f"{ckpt.path}: {core}; {offer}{unstated(family)}; ckpt export --raw exports the "
            "raw weights instead", "--exclude" if offers else None, undecided,
            for_eval=f"{core}; {unstated(family)}{alone}", offers=tuple(offers))
    # ckpt eval takes --ema-name, not --exclude nor --raw: it names only what it takes, and
    # ckpt export for the --exclude offers (review-30-attack-r111 F3)
    for_eval = (f"{core}; ckpt eval {stated} states that they are one EMA object's averages "
                f"and evaluates them" + (f"; ckpt export {' or '.join(offers)} exports one "
                                         f"holder's averages alone" if offers else "")
                if family else None)
    raise SplitHoldersError(
        f"{ckpt.path}: {core}; {offer}{stated} states that they are one EMA object's "
        "averages; ckpt export --raw exports the raw weights instead",
        stated if family else None, undecided, for_eval=for_eval,
        offers=(*offers, *([stated] if family else [])))
