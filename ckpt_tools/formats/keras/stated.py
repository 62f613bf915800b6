"""What a user states with ``--trainable``: the weights the optimizer was built with, in
``model.trainable_variables`` order, checked against what the Keras file records.

:func:`stated_keys` turns the stated names (object paths, layer prefixes, ``bn/gamma``) into
weight keys, refusing names that match nothing, match twice, or name a layer whose sublayers
the file saved in another order than training tracked them; :func:`check_stated` refuses a
statement that contradicts a Sequential/Functional config.json.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence

from ...errors import EmaError, VariableNotFoundError
from ...wording import counted
from .custom_order import check_stated_loose
from .model_tree import ORDERS
from .optimizer_slots import shown_name
from .stated_names import check_numbering
from .stated_quantized import not_float_first, refuse_live_name
from .stated_tied import refuse_tied


class LoopOrder(list):
    """``trainable`` names in a custom training loop's order: the one its first
    ``apply_gradients()`` listed the variables in (``--loop-order``). Only such a statement
    may order the weights otherwise than the model (``fit()`` builds the optimizer in model
    order): a plain list in another order is refused where config.json records the model's,
    as it is more often a slip than a loop.

    Example:
        >>> LoopOrder(["d3", "d2", "d1"]).loop_order
        True
    """

    loop_order = True


TYPE_CHECKING = False
if TYPE_CHECKING:
    from .layout import KerasLayout


def check_stated(lay: KerasLayout, keys: list[str], possible: list[str],
                  proven: list[str] | None) -> None:
    """Refuses a ``--trainable`` that contradicts what a Sequential/Functional config.json
    records: where the file proves them (``proven``: the weights its averages pair with, one
    set of layers fitting), the weights the optimizer was built with. Where several sets of
    layers fit (flags changed since the optimizer was built), the caller's set decides. An
    order other than the model's (``fit()`` builds in ``model.weights`` order) is taken only
    as a custom loop's, stated with :class:`LoopOrder` (``lay.loop_order``);
    ``lay.stated_reordered`` then holds its first pair out of model order.

    Raises:
        EmaError: the stated set differs from the one the file proves, or the order from the
            model's without ``lay.loop_order`` (exit 6, naming both).
    """

    def show(ks):
        return ", ".join(lay.paths.get(k, k) for k in ks[:4]) + (" ..." if len(ks) > 4 else "")

    # sublayers whose order the file does not record (lay.unordered): any order among them
    first: dict = {}
    for i, k in enumerate(lay.model):
        first.setdefault(lay.unordered.get(k, (None,))[0], i)
    pos = {k: first[b] if (b := lay.unordered.get(k, (None,))[0]) is not None else i
           for i, k in enumerate(lay.model)}
    # Another order than the model's is a custom loop's when stated as one (LoopOrder): its
    # first apply_gradients() built the optimizer in the order it listed the variables, which
    # config.json cannot show (fit() follows the model); unmarked, more often a slip.
    moved = next(((a, b) for a, b in zip(keys, keys[1:], strict=False) if pos[a] > pos[b]),
                 None)
    if moved and not lay.loop_order:
        model_order = sorted(keys, key=pos.__getitem__)  # stable: sublayers in any order
        at = next(i for i, (k, m) in enumerate(zip(keys, model_order, strict=True)) if k != m)
        raise EmaError(
            f"--trainable contradicts config.json: the order you gave differs from the "
            f"model's at name {at + 1}: you gave {show([keys[at]])}, the model has "
            f"{show([model_order[at]])} there (its weights, and so its trainable_variables, "
            "which fit() builds the optimizer in, come in the model's order); state them in "
            "model order, or, if a custom training loop's first apply_gradients() listed them "
            "in yours, add --loop-order (Python: loop_order=True)")
    lay.stated_reordered = moved
    if proven is None or set(keys) == set(proven):
        return
    now = [k for k in possible if lay.trainable.get(k)]
    raise EmaError(
        f"--trainable contradicts config.json: it states {counted(len(keys), 'weight')} "
        f"({show(keys)}), "
        f"but the file proves the optimizer was built with {len(proven)} ({show(proven)}; "
        f"{len(now)} trainable at save"
        + (f", {len(proven) - len(now)} of layers frozen since" if len(proven) > len(now)
           else "")
        + ", no other set of layers fits the averages' shapes); omit --trainable (the .keras "
        "records which layers were frozen)")


def check_proven(lay: KerasLayout, proven: dict[str, str | None]) -> None:
    """Refuses a ``--trainable`` whose pairing differs from one the file proves by itself
    (``proven``: EMA copy key -> weight key found without the statement; a bare
    ``.weights.h5`` lists a Functional model's layers in Keras' order, so no config.json is
    needed to prove it). Nothing is checked where the file alone leaves a copy unpaired, nor
    where a :class:`LoopOrder` pairs the same weights in another order (a custom loop's,
    which the file pairs in fit()'s order only by assumption).

    Raises:
        EmaError: naming an EMA copy the statement moves, and both weights (exit 6).
    """
    if not proven or None in proven.values():
        return
    if lay.loop_order and set(lay.averages.values()) - {None} == set(proven.values()):
        return  # the same weights in a custom loop's order, stated as one
    for avg, weight in proven.items():
        stated = lay.averages.get(avg, weight)
        if stated != weight:
            def show(k):
                return lay.paths.get(k, k) if k else "no weight"
            raise EmaError(
                f"--trainable contradicts the file: without it every EMA copy pairs with a "
                f"weight by what the file records, and the average of {show(weight)} would "
                f"go to {show(stated)} instead; omit --trainable, or state the weights in "
                "model.trainable_variables order")


def check_stated_model_name(config: dict | None, names: Sequence[str],
                            recorded: str | None = None, layers: Collection[str] = ()) -> None:
    """Refuses stated paths printed in another process than the one that saved the file.

    ``[v.path for v in model.trainable_variables]`` starts with the model's name, and Keras
    numbers automatic names per process: a model built after another in training is
    ``sequential_1`` with layers ``dense_1``..., the same code in a fresh evaluation process
    gives ``sequential`` with ``dense``..., so the stated ``dense_1`` is another layer of the
    file. Where config.json (or, for a bare ``.weights.h5``, the name the file records for the
    model: ``recorded``) gives the model's name and a stated path starts with the same
    automatic name under another number, the names are shifted, unless that name is one of
    the file's layers (``layers``, or a nested model config.json lists: a sub-model built
    before the model holding it is ``sequential`` inside ``sequential_1``).

    Raises:
        EmaError: naming both model names and what to state instead.
    """
    cfg = config.get("config") if isinstance(config, dict) else None
    model = cfg.get("name") if isinstance(cfg, dict) else recorded
    if not isinstance(model, str) or not model:
        return
    base = re.sub(r"_\d+$", "", model)
    inner = set(layers) | set(_config_names(cfg))
    for name in names:
        first = name.split("/", 1)[0] if "/" in name else None
        if first and first != model and first not in inner \
                and re.sub(r"_\d+$", "", first) == base:
            raise EmaError(
                f"--trainable {name!r} starts with the model name {first!r}, but the file's "
                f"model is {model!r}: these paths were printed in another process, where Keras "
                f"numbers its automatic names (dense, dense_1, ...) differently, so they may name "
                f"other layers of this file; state the file's keys as 'ckpt list --json' shows "
                f"them (layers/.../vars/0: numbered by the file, not by a process), or in Python "
                f"pass the variables, not their paths: apply_keras_ema(model, path, "
                f"trainable=model.trainable_variables), as when the optimizer was built "
                f"(matched by position, not by name)")


def _config_names(cfg) -> Iterator[str]:
    """The names of the layers a model's config lists, nested models' layers included."""
    for layer in (cfg.get("layers") if isinstance(cfg, dict) else None) or []:
        sub = layer.get("config") if isinstance(layer, dict) else None
        if isinstance(sub, dict):
            if isinstance(sub.get("name"), str):
                yield sub["name"]
            yield from _config_names(sub)


def stated_keys(lay: KerasLayout, names: Sequence[str], possible: set[str],
                by_layer: list[str] | None = None, read=None) -> list[str]:
    """Model weight keys for the caller's names, in the order given; ``by_layer``, when
    given, gets the keys a layer's name stood for (every weight of the layer: whether one
    of its variables was frozen on its own is then the tool's reading, not the statement).

    A name is a weight's key or object path as ``ckpt list`` shows it (``dense/kernel``), a
    layer's path (``dense``, ``encoder/block_1``) standing for its weights that can be
    trainable (``possible``; not BatchNormalization statistics) in file order, or a live
    model's ``variable.path`` (``net/blk/proj/kernel``): leading segments the file does not
    record (the model's name) are dropped, and a variable name the file does not record
    (``vars/0`` holds ``kernel``) stands for its layer's weights.

    Raises:
        VariableNotFoundError: a name matches no weight, or only weights already matched.
        EmaError: a name matches several weights (two sub-models' ``dense/kernel``), or a
            layer name would stand for weights of sublayers whose order the file does not
            record.
    """

    shown: dict[str, list[str]] = {}
    for k in lay.model:
        shown.setdefault(lay.paths.get(k, k), []).append(k)
    keys: list[str] = []
    last_layer: str | None = None
    # A Sequential's paths start with the model's name (s/a/kernel), which a model from
    # keras.models.load_model does not put in its variable paths (a/kernel): try both.
    firsts = {p.split("/", 1)[0] if "/" in p else None for p in shown}
    roots = [""] + [f"{r}/" for r in firsts if r and len(firsts) == 1]

    def spellings(name: str) -> Iterator[str]:
        """``name`` as the file may record it: leading segments it does not record (the
        model's name) dropped one by one, each with and without a Sequential's root."""
        parts = name.split("/")
        for i in range(len(parts)):
            for root in roots:
                yield root + "/".join(parts[i:])

    def find(name: str) -> tuple[list[str], str | None]:
        for s in spellings(name):
            if s in lay.model:
                return [s], None
            if s in shown:
                if len(shown[s]) > 1:  # two sub-models' dense/kernel: never pick one
                    raise EmaError(
                        f"--trainable {name!r} matches {len(shown[s])} weights: "
                        f"{', '.join(shown[s])}; state the one meant by that key")
                return list(shown[s]), None
            under = [k for k in lay.model if k in possible
                     and lay.paths.get(k, k).startswith(s + "/")]
            check_stated_loose(lay, name, under)
            if under:
                _proven_order(name, s, under)
                return under, s
        return by_suffix(name)

    def by_suffix(name: str) -> tuple[list[str], str | None]:
        """A tf_keras variable name (``fc/kernel:0``) leaves out the sub-models that hold its
        layer (``enc/fc/kernel``): the one weight or layer whose path ends with it, and a
        refusal where several do (two sub-models' ``fc``), never a pick."""
        tail = "/" + re.sub(r":\d+$", "", name)
        weights = [p for p in shown if ("/" + p).endswith(tail)]
        layers: set[str] = set()
        for p in shown:
            q = "/" + p + "/"
            at = q.find(tail + "/")
            while at >= 0:
                layers.add(q[1:at + len(tail)])
                at = q.find(tail + "/", at + 1)
        hits = weights or sorted(layers - set(shown))
        if len(hits) > 1:
            raise EmaError(
                f"--trainable {name!r} matches {len(hits)} " + ("weights" if weights else
                                                                   "layers")
                + f": {', '.join(hits[:6])}; state the one meant by its full path")
        return find(hits[0]) if hits else ([], None)

    def _proven_order(name: str, s: str, under: list[str]) -> None:
        """Refuses a layer standing for the weights of several sublayers whose order the
        file does not record (attributes, saved alphabetically: a residual block's up/down,
        Bidirectional's forward/backward): file order is not Keras' training order."""
        bags: dict[object, set] = {}
        for k in under:
            if k in lay.unordered:
                bag, part = lay.unordered[k]
                bags.setdefault(bag, set()).add(part)
        if any(len(parts) > 1 for parts in bags.values()):
            subs = sorted({lay.paths.get(k, k).rsplit("/", 1)[0] for k in under})
            raise EmaError(
                f"--trainable {name!r} stands for the weights of several sublayers ("
                f"{', '.join(subs[:4])}{' ...' if len(subs) > 4 else ''}) whose order the file "
                f"does not record, so {s!r} cannot stand for them: state its weights one by one "
                "in Keras' order, as [v.path for v in model.trainable_variables] prints them")

    def layer_of(head: str) -> str:
        """The layer path ``head`` names, where the file saves variables of its own by index;
        "" where none. Unlike :func:`find`, never stands for (or refuses) the layer's
        sublayers' weights."""
        return next((s for s in spellings(head) if _positional(lay, s)), "")

    next_own: dict[str, int] = {}
    used: list[tuple[str, list[str]]] = []  # names that are not keys, with what they selected
    for raw in names:
        name = raw.strip().strip("/")
        if not name:
            continue
        hit, layer = find(name)
        if not hit and "/" in name and last_layer is not None \
                and find(name.rsplit("/", 1)[0])[1] == last_layer:
            continue  # the next variable of the layer the previous name stood for
        if not hit and "/" in name:  # a variable name the file does not record
            head, var = name.rsplit("/", 1)
            own = _positional(lay, layer_of(head))
            layer = None
            refuse_live_name(lay, name, head, own)
            # A built-in layer's variables saved by index (a subclassed model's
            # BatchNormalization: bn/0..3): Keras' fixed order of them names var.
            at = {order.index(var) for order in ORDERS if len(order) == len(own)
                  and var in order}
            if len(at) == 1:
                hit = [own[at.pop()]]
            elif own:
                # A custom layer's variables: Keras 3 saves a layer's trainable variables
                # first, in the order trainable_variables lists them, so the n-th name
                # stated under it is its n-th saved variable.
                check_stated_loose(lay, name, own)
                n = next_own.get(head, 0)
                next_own[head] = n + 1
                hit = [own[n]] if n < len(own) else []
            else:
                hit, layer = find(head)
        if not hit:
            raise VariableNotFoundError(
                f"--trainable {name!r} names no weight of the file (names as 'ckpt list' shows "
                f"them, e.g. {', '.join(lay.paths.get(k, k) for k in lay.model[:3])})")
        again = [k for k in hit if k in keys]
        if again:
            raise VariableNotFoundError(
                f"--trainable {name!r} names {lay.paths.get(again[0], again[0])}, which an "
                "earlier name already stated")
        keys += hit
        last_layer = layer
        if layer is not None and by_layer is not None:
            by_layer += hit
        if name not in lay.model:
            used.append((name, hit))
    _check_prefix(lay, keys, read)
    check_numbering(lay, used, keys)
    return keys


def refuse_layer_count(lay: KerasLayout, counts: tuple[int, ...], by_layer: list[str]) -> None:
    """Leaves the EMA copies unpaired (a refusal naming the variables to state) where the
    file does not prove how many copies it holds (``counts``, e.g. 3 or 4: Adam's amsgrad
    adds a per-weight variable a bare ``.weights.h5`` does not record) and the caller named
    layers (``by_layer``: the keys those names stood for): a variable of a stated layer frozen
    on its own (``ln2.gamma.trainable = False``) fits the file with fewer copies, so the
    statement does not decide. Stating the variables one by one does."""
    paired = sum(w is not None for w in lay.averages.values())
    if not by_layer or not any(c < paired for c in counts):
        return
    layers = sorted({lay.paths.get(k, k).rsplit("/", 1)[0] for k in by_layer})
    lay.averages = dict.fromkeys(lay.averages)
    lay.stated_pairs = {}
    lay.copy_counts = counts
    lay.notes.append(
        f"--trainable names layers ({', '.join(layers[:4])}{' ...' if len(layers) > 4 else ''})"
        f", standing for all {len(by_layer)} of their weights, but the file does not prove how "
        f"many EMA copies it holds ({' or '.join(map(str, counts))}: settings such as Adam's "
        "amsgrad or gradient accumulation add per-weight variables a bare .weights.h5 does "
        "not record), so a variable of a stated layer frozen on its own (trainable=False on "
        "the variable) fits as well: state the variables one by one as "
        "[v.path for v in model.trainable_variables] prints them (e.g. --trainable "
        f"{','.join(lay.paths.get(k, k) for k in by_layer[:3])},...)")


def _positional(lay: KerasLayout, layer: str) -> list[str]:
    """The own variables of ``layer`` that the file names by index only (``sc/0``, ``sc/1``:
    a custom layer's ``add_weight`` variables), in saved order; [] where it names them."""
    if not layer:
        return []
    own = [k for k in lay.model
           if re.fullmatch(re.escape(layer) + r"/\d+", lay.paths.get(k, k))]
    return sorted(own, key=lambda k: int(lay.paths.get(k, k).rsplit("/", 1)[1]))


def _check_prefix(lay: KerasLayout, keys: list[str], read=None) -> None:
    """Refuses a statement that names a layer's variables saved by index other than as its
    first ones in order: Keras saves a layer's trainable variables before its non-trainable
    ones (``_trainable_variables + _non_trainable_variables``), so the weights of one layer an
    optimizer was built with are ``L/0 .. L/n-1``. Stating ``sc/0, sc/2`` (creation order, with
    a non-trainable ``sc/1`` between) would put an average on a running statistic.

    Raises:
        EmaError: the stated variables of one layer are not its first ones, in order.
    """
    stated: dict[str, list[int]] = {}
    for k in keys:
        m = re.fullmatch(r"(.+)/(\d+)", lay.paths.get(k, k))
        if m:
            stated.setdefault(m.group(1), []).append(int(m.group(2)))
    for layer, got in stated.items():
        if not_float_first(lay, _positional(lay, layer)):
            # vars/0 no float (an int8 kernel): not Layer's trainable-first order but a
            # quantized class's own (kernel, bias, kernel_scale): taken as said (r36 F1)
            continue
        # a layer whose stored order is not proven (custom_order): any order of its first
        loose = any(lay.paths.get(k, k).startswith(layer + "/") for k in lay.loose)
        if (sorted(got) if loose else got) != list(range(len(got))) and _positional(lay, layer):
            refuse_tied(lay.paths, layer, _positional(lay, layer), got, keys, read)
            want = ",".join(f"{layer}/{i}" for i in range(len(got)))
            raise EmaError(
                f"--trainable states {', '.join(f'{layer}/{i}' for i in got)}, but Keras saves "
                f"a layer's trainable variables first, in trainable_variables order, and its "
                f"non-trainable ones (running statistics, state) after them, so the "
                f"{len(got)} of {layer!r} the optimizer was built with are {want}; state them so "
                f"(the file does not record the names a custom layer gives its variables, so a "
                f"live path's name is read as its place), or use apply_keras_ema(model, path)")


def check_stated_use_ema(layout: KerasLayout, use_ema: bool | None, where: str) -> None:
    """Refuses a ``--use-ema``/``--no-use-ema`` that contradicts the optimizer config the
    file records (``where``: config.json of a ``.keras`` or model directory, a legacy ``.h5``'s
    training config).

    Raises:
        EmaError: the statement differs from the recorded ``use_ema`` (a tf_keras legacy
            optimizer has none: it counts as ``use_ema=False``).
    """
    cfg = layout.optimizer_config
    if use_ema is None or cfg is None:
        return
    from .tf_keras import is_legacy, legacy_name

    legacy_opt = layout.tf_keras and is_legacy(layout)
    if "use_ema" not in cfg and not legacy_opt:
        return
    recorded = bool(cfg.get("use_ema")) and not legacy_opt
    if recorded == use_ema:
        return
    what = (f"{legacy_name(layout)}, a legacy optimizer without use_ema"
            if legacy_opt else
            f"its {shown_name(layout.optimizer) or 'optimizer'} with use_ema={recorded}")
    # keras.io's GAN: the averages are in optimizers the model keeps, not the compiled one
    kept = next((n for n in layout.notes if n.startswith("the model keeps")), None)
    raise EmaError(
        f"--{'' if use_ema else 'no-'}use-ema contradicts {where}, which records {what}; "
        f"omit --{'' if use_ema else 'no-'}use-ema (the file records it)"
        + (f"; {kept}" if kept else ""))
