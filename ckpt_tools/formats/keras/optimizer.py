"""Keras 3 optimizer variables: which are the iteration, the learning rate, EMA copies, slots.

``optimizer/vars/<i>`` is ``optimizer.variables`` in creation order (Keras 3.15): ``iteration``,
``learning_rate`` when it is a float, then ``BaseOptimizer.build``: one ``average`` per trainable
variable (``use_ema=True``) and one ``gradient_accumulator`` per variable
(``gradient_accumulation_steps``), then the subclass' slots (``_SLOTS``). A layout is checked
against the shapes and dtypes of the trainable weights; for a bare ``.weights.h5`` (no config)
every setting is tried and ``use_ema`` is decided only when exactly one value fits.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from . import untracked
from .bag_fit import fit_runs, open_candidates, runs_of

Spec = tuple[tuple[int, ...], int]  # (shape, TensorFlow dtype enum)
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})

# Optimizer slots written after the EMA copies, per class (Keras 3.15 build() methods), as
# variants of groups: ("b", name) one per trainable variable, ("i", names) interleaved per
# variable, ("s", name) one scalar. Chosen from the optimizer config where known.
_ADAM = lambda c: [("i", ("momentum", "velocity"))] + (  # noqa: E731
    [("b", ("velocity_hat",))] if c.get("amsgrad") else [])
_SLOTS = {
    "sgd": lambda c: [("b", ("momentum",))] if c.get("momentum") else [],
    "adam": _ADAM, "adam_w": _ADAM,
    "nadam": lambda c: [("i", ("momentum", "velocity")), ("s", ("variable",))],
    "adamax": lambda c: [("i", ("momentum", "norm"))],
    "adagrad": lambda c: [("b", ("accumulator",))],
    "adadelta": lambda c: [("i", ("accumulated_grad", "accumulated_delta_var"))],
    "ftrl": lambda c: [("i", ("accumulator", "linear"))],
    "lamb": lambda c: [("i", ("momentum", "velocity"))],
    "lion": lambda c: [("b", ("momentum",))],
    "adafactor": lambda c: [(untracked.TRACKED, ("r", "c", "velocity"))],
    "rm_sprop": lambda c: [("b", ("velocity",))] + (
        [("b", ("momentum",))] if c.get("momentum") else []) + (
        [("b", ("average_gradient",))] if c.get("centered") else []),
}
# Default names of Keras 3 optimizers (snake_case class names), recognising an optimizer a
# model keeps as an attribute (the keras.io GAN's d_optimizer/g_optimizer) in a weights file.
OPTIMIZER_NAMES = frozenset({*_SLOTS, "loss_scale_optimizer", "muon", "base_optimizer",
                             "optimizer"})
# Hyperparameter settings to try when no config says which (a bare .weights.h5).
_VARIANTS = [{}, {"momentum": 0.9}, {"amsgrad": True}, {"centered": True},
             {"momentum": 0.9, "centered": True}]


def custom_note(lay, count: int) -> str:
    """Why the EMA copies of an optimizer class that is not a Keras built-in are not paired."""
    return (f"the optimizer is {lay.custom_optimizer}, not a Keras built-in (config.json), "
            "and a subclass may create variables of its own before Keras' EMA copies (a "
            f"Lookahead's slow weights), so which of its {count} variables are the copies is "
            "not recorded and they cannot be paired from this file (no --trainable decides "
            "it); save a tf.train.Checkpoint(model=model, optimizer=optimizer), whose "
            "variable names carry the weights' paths")


def spec(entry) -> Spec:
    """``(shape, dtype enum)`` of a :class:`~ckpt_tools.formats.entry.TensorEntry`."""
    return (tuple(entry.shape), entry.dtype)


def plan_optimizer(lay, keys, entries, trained, segments, *, read=None,
                   use_ema: bool | None = None, bag_groups: dict | None = None,
                   stated: bool = False, layers: list[list[int]] | None = None) -> None:
    """Finds iteration, learning rate, EMA copies and slots among the optimizer variables.

    Fills ``lay`` (a :class:`~ckpt_tools.formats.keras.layout.KerasLayout`): ``iteration``,
    ``learning_rate``, ``ema_offset``, ``use_ema``, ``ema_source``, ``averages``, ``slots``,
    ``var_names`` and, when the layout proves some weights were frozen, ``trainable``.
    ``trained`` holds (key, segment index) of the weights that may be trainable, in
    ``model.weights`` order; ``segments`` the ("seq"|"bag", keys) runs, a bag being keys whose
    order is unknown. ``use_ema`` is the caller's
    statement (``--use-ema``/``--no-use-ema``), which overrides what the file says.
    ``read`` gives the stored iteration count (a trained optimizer with no per-variable state),
    never a pairing: values do not decide which weight an average belongs to.
    ``bag_groups``: segment index -> the keys of each sublayer of that bag (see
    :func:`_settle_sublayers`). ``stated``: ``trained`` is the caller's statement of exactly
    the weights the optimizer was built with (``--trainable``): no other subset is tried.
    ``layers``: indexes into ``trained`` of each layer's weights, in model order (a layer is
    frozen or not as a whole): where config.json's flags fit, whether another set of layers
    fits too (:func:`layer_sets`); then ``lay.frozen_unproven`` is set and nothing is paired
    that the sets disagree on.
    """
    specs = [spec(entries[k]) for k in keys]
    if not keys:
        lay.use_ema, lay.ema_evidence, lay.ema_source = False, "no optimizer variables", "layout"
        if use_ema:
            lay.notes.append("use_ema=True was stated but the file holds no optimizer variables")
        return
    off = 0
    if specs[0][0] == () and entries[keys[0]].dtype_name in ("int64", "int32"):
        lay.iteration, off = keys[0], 1
    cfg = lay.optimizer_config
    if cfg is not None:
        has_lr = isinstance(cfg.get("learning_rate"), (int, float))
    else:
        has_lr = (len(specs) > off and specs[off][0] == ()
                  and entries[keys[off]].dtype_name in FLOATS)
    if has_lr and len(keys) > off:
        lay.learning_rate, off = keys[off], off + 1
    lay.ema_offset = off
    for key, name in ((lay.iteration, "iteration"), (lay.learning_rate, "learning_rate")):
        if key:
            lay.var_names[key] = name
    tkeys = [k for k, _ in trained]
    tspecs = [spec(entries[k]) for k in tkeys]
    bag_of = {k: seg for k, seg in trained if segments[seg][0] == "bag"}
    rest = specs[off:]
    if not rest and tkeys:
        lay.use_ema, lay.ema_source = False, "layout"
        steps = _steps(lay, read)
        if steps:  # trained, yet nothing per variable: a stateless optimizer (plain SGD)
            lay.ema_evidence = (f"the optimizer holds only iteration/learning_rate after "
                                f"{steps} steps: no per-variable state (e.g. SGD without "
                                "momentum) and no averages (use_ema=True would store one per "
                                "trainable weight)")
        else:
            lay.ema_evidence = ("the optimizer holds only iteration/learning_rate (it was "
                                "never built: saved before training, or an optimizer without "
                                "per-variable state such as SGD without momentum)")
        if cfg is not None and not cfg.get("use_ema"):
            lay.ema_evidence, lay.ema_source = "config.json (optimizer use_ema=False)", "config"
        elif cfg is not None:  # use_ema=True recorded, but no averages were ever created
            lay.ema_source = "config"
            lay.ema_evidence = ("config.json records use_ema=True; the optimizer holds only "
                                "iteration/learning_rate: saved before training")
        return
    cands = _candidates(lay)
    now = tuple(i for i, k in enumerate(tkeys) if lay.trainable.get(k))
    open_targets: dict[int, list[tuple[int, ...]]] = {}
    hyps, truncated, swapped = _hypotheses(cands, rest, tkeys, tspecs, bag_of, now,
                                           subsets=not stated,
                                           layers=None if stated else layers,
                                           open_targets=open_targets)
    lay.frozen_unproven = swapped
    pairings = [_pairing(h, keys[off:], rest, tkeys, tspecs, bag_of) for h in hyps]
    if use_ema is not None and "use_ema" not in (cfg or {}):  # a recorded one is checked
        lay.use_ema, lay.ema_source = use_ema, "stated"            # against it, not replaced
        lay.ema_evidence = (f"stated by the caller ({'--use-ema' if use_ema else '--no-use-ema'}; "
                             f"Python: use_ema={use_ema})")
    elif cfg is not None:
        lay.use_ema, lay.ema_source = bool(cfg.get("use_ema")), "config"
        lay.ema_evidence = f"config.json (optimizer use_ema={bool(cfg.get('use_ema'))})"
    elif {h[0][0] for h in hyps} in ({True}, {False}):
        lay.use_ema, lay.ema_source = hyps[0][0][0], "layout"
        lay.ema_evidence = (f"layout of the {len(keys)} {lay.optimizer} variables for "
                            f"{len(tkeys)} weights")
    else:
        # Both use_ema=True and a use_ema=False layout fit. Values cannot tell them apart in
        # general: a gradient accumulator dominated by L2 weight decay is parallel to its
        # weight (and, with L2(0.5), equal to it), a momentum buffer early in training is
        # near it. Only the caller can decide here (review 11-attack-2).
        lay.use_ema = None
        alternatives = sorted({_describe(h[0]) for h in hyps if not h[0][0]})
        lay.notes.append(
            f"cannot tell whether the {len(rest)} {lay.optimizer or 'unknown optimizer'} "
            f"variables after iteration/learning_rate include EMA copies ("
            + (f"they fit use_ema=True and also use_ema=False with "
               f"{' or '.join(alternatives[:3])} in their place; values cannot tell an "
               "average from such a buffer" if hyps else "no known layout fits")
            + "); the .keras config.json records use_ema; pass --use-ema or --no-use-ema")
    if lay.use_ema and lay.custom_optimizer:
        lay.notes.append(custom_note(lay, len(rest)))
        return
    chosen = [(h, p) for h, p in zip(hyps, pairings, strict=True) if h[0][0] == lay.use_ema]
    # An optimizer class of unknown slots (Muon: one or two slots per weight, by its rank):
    # its averages come first, one per variable it was built with. Their number is proven only
    # by the caller's --trainable, or by a config.json that records no frozen layer; a bare
    # .weights.h5 cannot tell it (a frozen layer shifts a slot into the "averages").
    unknown = not any(c[2] is not None for c in cands)
    if not chosen and lay.use_ema and unknown and (stated or (
            cfg is not None and not lay.frozen)) and rest[: len(tspecs)] and _matches(
            [(s, j, "average", True) for j, s in enumerate(tspecs)], rest[: len(tspecs)], tkeys,
            tspecs, bag_of):
        h = ((True, False, []), tuple(range(len(tkeys))))
        chosen = [(h, _pairing(h, keys[off:], rest, tkeys, tspecs, bag_of))]
    placed: set[str] = set()
    if chosen:
        (hyp, names), pick = _choose(chosen, lay, complete=not truncated, swapped=swapped,
                                     sampled=bool(open_targets))
        # Which weights were frozen is known only when every fitting pairing agrees on it
        # (otherwise hyp is merely the first candidate: saying "frozen" would be a guess).
        known = (all(h[1] == hyp[1] for h, _ in chosen)
                 or all(t is not None for t, n in pick.values() if n == "average"))
        if known:
            lay.trainable.update({k: False for i, k in enumerate(tkeys)
                                  if i not in set(hyp[1])})
        if known and len(set(hyp[1])) < len(tkeys):
            lay.notes.append(f"{len(tkeys) - len(hyp[1])} weights have no optimizer variables: "
                             "frozen (trainable=False)")
        kept = [tkeys[i] for i in hyp[1] if tkeys[i] in set(lay.frozen)]
        if kept and pick and all(t is not None for t, n in pick.values() if n == "average"):
            lay.notes.append(
                f"{len(kept)} weights of layers frozen after the optimizer was built "
                f"(trainable=False in config.json, e.g. {lay.paths.get(kept[0], kept[0])}) "
                "keep their EMA copies: the optimizer holds one per weight it was built with")
        if known and lay.use_ema and hyp[0][0] and bag_groups:
            pick = _settle_sublayers(pick, keys[off:], [tkeys[i] for i in hyp[1]], entries,
                                     bag_of, bag_groups, lay)
        for key, (target, name) in pick.items():
            if target is None and name == "average":
                _note_open_bag(key, names.get(key), lay)
            (lay.averages if name == "average" else lay.slots)[key] = target
            lay.var_names[key] = name
            placed.add(key)
        open_candidates(lay, keys[off:], tkeys, [h for h, _ in chosen], open_targets)
    elif lay.use_ema and stated:
        lay.notes.append(f"the {len(tkeys)} weights stated with --trainable do not fit the "
                         f"{len(rest)} {lay.optimizer or 'optimizer'} variables after "
                         "iteration/learning_rate: state every weight the optimizer was built "
                         "with, in model.trainable_variables order (Python: "
                         "apply_keras_ema(model, path))")
    elif lay.use_ema and unknown:
        lay.notes.append(f"EMA copies cannot be paired: the {lay.optimizer or 'unknown'} "
                         "optimizer's per-weight variables are not a fixed layout this tool "
                         f"knows, so the file cannot prove how many of its {len(rest)} "
                         "variables are EMA copies"
                         + (" (layers are frozen: which were frozen when it was built is not "
                            "recorded)" if lay.frozen else "")
                         + ": pass --trainable with the weights the optimizer was built with "
                         "(Python: apply_keras_ema(model, path))")
    elif lay.use_ema and bag_of:
        # subsets are not tried where sublayers' order is unknown: "nor a subset" would be
        # false (a subclassed model with a frozen sublayer has one that fits)
        lay.notes.append(f"the optimizer variables fit no set of the {len(tkeys)} weights of "
                         "the file in any order of the sublayers whose order it does not "
                         "record (or too many to try): EMA copies cannot be paired here; pass "
                         "--trainable with the weights the optimizer was built with (Python: "
                         "apply_keras_ema(model, path))")
    elif lay.use_ema and _lora_factors(rest, tspecs):
        # Keras saves a LoRA layer's kernel merged with a @ b, never the factors the
        # optimizer averaged: no --trainable can fit (config.json, where present, says so)
        lay.notes.append(f"the optimizer variables do not fit the {len(tkeys)} weights of the "
                         "file: some have the shapes of LoRA factors ([in, r] and [r, out] of "
                         "a kernel [in, out]: a layer with enable_lora), which the file does not "
                         "hold (Keras saves the kernel merged with them), so no --trainable "
                         "fits; use the run's tf.train.Checkpoint, which keeps the factors")
    elif lay.use_ema:
        lay.notes.append(f"the optimizer variables do not fit the {len(tkeys)} weights of the "
                         "file nor a subset of them (frozen or custom layers?): EMA copies "
                         "cannot be paired here; pass --trainable with the weights the "
                         "optimizer was built with (Python: apply_keras_ema(model, path))")
    for key in keys[off:]:
        if key not in placed:
            lay.slots[key] = None


def _lora_factors(rest: list[Spec], weights: list[Spec]) -> bool:
    """Whether two optimizer variables have the shapes of a LoRA pair of some kernel of
    ``weights``: ``[in, r]`` and ``[r, out]`` with ``r`` below both (a message's hint only,
    never a pairing)."""
    shapes = {s for s, _ in rest if len(s) == 2}
    return any((a, r) in shapes and (r, b) in shapes
               for (a, b), _ in (w for w in weights if len(w[0]) == 2)
               for r in range(1, min(a, b)))


Hypothesis = tuple  # ((use_ema, grad accumulation, slot groups), indexes of trained weights)
_PERMUTATIONS = 5040  # sublayer orders tried per bag (7 sublayers)


def _settle_sublayers(pick, okeys, sub_keys, entries, bag_of, bag_groups, lay):
    """Pairs the averages of a bag (sublayers whose order the file does not record) sublayer
    by sublayer: Keras builds ``trainable_variables`` one sublayer after another, so the bag's
    averages are the sublayers' variables concatenated in some order. Every order whose shapes
    fit is tried; the pairing is used only when one fits (shapes prove it; values never
    decide). Returns ``pick`` with those averages' targets set; otherwise unchanged."""
    import itertools

    pick = dict(pick)
    averages = okeys[: len(sub_keys)]  # use_ema: the first block, in sub_keys order
    here = set(sub_keys)
    for seg, parts in bag_groups.items():
        pos = [p for p, k in enumerate(sub_keys) if bag_of.get(k) == seg]
        parts = [[k for k in part if k in here] for part in parts]
        parts = [p for p in parts if p]
        if not pos or len(parts) < 2 or math.factorial(len(parts)) > _PERMUTATIONS:
            continue
        if all(pick.get(averages[p], (None,))[0] is not None for p in pos):
            continue  # every average of this bag is already paired
        want = [spec(entries[averages[p]]) for p in pos]
        fits = []
        for order in itertools.permutations(range(len(parts))):
            flat = [k for i in order for k in parts[i]]
            if len(flat) == len(want) and [spec(entries[k]) for k in flat] == want:
                fits.append({averages[p]: (k, "average") for p, k in zip(pos, flat,
                                                                        strict=True)})
        distinct = {tuple(sorted(f.items())) for f in fits}
        if len(distinct) == 1:
            pick.update(fits[0])
            lay.ema_evidence += "; sublayer order proven by their shapes"
    return pick


def _hypotheses(cands, rest, tkeys, tspecs, bag_of, now: tuple[int, ...], *,
                subsets: bool, layers: list[list[int]] | None = None,
                open_targets: dict | None = None) -> tuple[list, bool, bool]:
    """Every (setting, subset of ``tkeys``) that writes exactly ``rest``.

    The optimizer holds one variable per block for each weight that was trainable when it was
    built, in ``model.trainable_variables`` order. ``tkeys`` are every weight it may have been
    built with (``now``: the indexes of those trainable when the file was saved). Tried in
    turn, per setting: the weights trainable at save; all of them (layers frozen after the
    optimizer was built, whose copies it still holds: never the first averages shifted onto
    the weights trainable now); and only when neither fits, every other subset whose specs
    the optimizer's own per-variable blocks give (layers frozen at build time that a bare
    ``.weights.h5`` does not record). Where the weights trainable at save fit and some
    weights are frozen, every other set of whole ``layers`` with the same shapes fits as well
    (the flags may have changed since the optimizer was built: gradual unfreezing), and is
    returned too. Where sublayers' order is unrecorded (``bag_of``), the subsets are those
    :func:`~.bag_fit.fit_runs` finds: pairings that together show every weight each copy
    may take (``open_targets``: number of copies -> each use_ema copy's possible weights).
    Returns the hypotheses, whether more subsets fit than were enumerated (``_SUBSETS``) and
    whether other sets of layers fit beside the flags at save."""
    out, truncated, swapped = [], False, False
    every = tuple(range(len(tspecs)))
    for c in cands:
        if c[2] is None:
            continue
        sub = [tspecs[i] for i in now]
        if _matches(_expand(*c, sub), rest, [tkeys[i] for i in now], sub, bag_of):
            out.append(((c[0], c[1], c[2]), now))
            if layers and now != every:
                others = [s for s in layer_sets(sub, tspecs, layers, _SUBSETS) if s != now]
                out += [((c[0], c[1], c[2]), s) for s in others]
                swapped |= bool(others)
            continue
        if now != every and _matches(_expand(*c, tspecs), rest, tkeys, tspecs, bag_of):
            out.append(((c[0], c[1], c[2]), every))
            continue
        if not subsets:
            continue
        subs, more = _weight_specs(c, rest, len(tspecs))
        truncated |= more
        for sub in subs:
            n = len(sub)
            if not _matches(_expand(*c, sub), rest, [str(j) for j in range(n)], sub, {}):
                continue
            found, more = _subset_hypotheses(c, sub, tspecs, tkeys, bag_of, open_targets)
            out += found
            truncated |= more
    return out, truncated, swapped


def _weight_specs(c, rest, limit: int) -> tuple[list[list[Spec]], bool]:
    """The specs of every set of fewer than ``limit`` weights setting ``c`` may have been
    built with to write ``rest`` (each to be checked), and whether more were left out."""
    if any(kind == untracked.UNTRACKED for kind, _ in c[2]):  # not affine in the weights
        return untracked.weight_specs(int(c[0]) + int(c[1]), rest, limit)
    dummy = ((1, 1), 1)
    # the count of variables is affine in the number of weights: solve for it
    f0 = len(_expand(*c, []))
    slope = len(_expand(*c, [dummy])) - f0
    n, r = divmod(len(rest) - f0, slope) if slope > 0 else (0, 1)
    if r or not 1 <= n < limit:
        return [], False
    first: dict[int, int] = {}
    for i, (_, j, _, ref) in enumerate(_expand(*c, [dummy] * n)):
        if ref and j is not None:
            first.setdefault(j, i)
    return ([[rest[first[j]] for j in range(n)]] if len(first) == n else []), False


def _subset_hypotheses(c, sub, tspecs, tkeys, bag_of, open_targets) -> tuple[list, bool]:
    """The hypotheses ``(setting, weight indexes)`` placing weights of specs ``sub`` among
    ``tspecs``, and whether more fit than were enumerated."""
    setting = (c[0], c[1], c[2])
    if bag_of:
        fit = fit_runs(sub, tspecs, runs_of(tkeys, bag_of))
        if fit is None:
            return [], False
        if c[0] and open_targets is not None:
            open_targets[len(sub)] = fit[0]
        return [(setting, w) for w in fit[1]], False
    embs = _embeddings(sub, tspecs, limit=_SUBSETS)
    return [(setting, emb) for emb in embs], len(embs) >= _SUBSETS


def layer_sets(sub: list, specs: list, layers: list[list[int]],
                limit: int) -> list[tuple[int, ...]]:
    """Up to ``limit`` sets of whole layers whose weights, in model order, have exactly the
    specs ``sub`` (index tuples into ``specs``; ``layers`` holds each layer's indexes)."""
    n, g = len(sub), len(layers)
    lspecs = [[specs[i] for i in idx] for idx in layers]
    # ways[j][p]: sets of layers j.. matching sub[p:], capped at limit
    ways = [[0] * (n + 1) for _ in range(g + 1)]
    ways[g][n] = 1
    for j in range(g - 1, -1, -1):
        size, mine, row, nxt = len(lspecs[j]), lspecs[j], ways[j], ways[j + 1]
        for p in range(n, -1, -1):
            w = nxt[p]
            if size and p + size <= n and sub[p] == mine[0] and sub[p:p + size] == mine:
                w += nxt[p + size]
            row[p] = min(w, limit)
    out: list[tuple[int, ...]] = []
    stack = [(0, 0, ())] if ways[0][0] else []
    while stack and len(out) < limit:
        j, p, acc = stack.pop()
        if j == g:
            out.append(acc)
            continue
        size = len(lspecs[j])
        if ways[j + 1][p]:
            stack.append((j + 1, p, acc))
        if size and p + size <= n and sub[p:p + size] == lspecs[j] and ways[j + 1][p + size]:
            stack.append((j + 1, p + size, acc + tuple(layers[j])))
    return out


_SUBSETS = 64  # frozen-layer subsets enumerated; beyond, even agreeing pairings prove nothing


def _embeddings(sub: list, specs: list, limit: int) -> list[tuple[int, ...]]:
    """Up to ``limit`` ways to find ``sub`` as a subsequence of ``specs`` (index tuples)."""
    n, m = len(sub), len(specs)
    # ways[k][i]: embeddings of sub[k:] in specs[i:], capped at limit (iterative: no recursion
    # limit on models with thousands of weights)
    ways = [[0] * (m + 1) for _ in range(n + 1)]
    ways[n] = [1] * (m + 1)
    for k in range(n - 1, -1, -1):
        row, nxt = ways[k], ways[k + 1]
        for i in range(m - 1, -1, -1):
            row[i] = min(row[i + 1] + (nxt[i + 1] if specs[i] == sub[k] else 0), limit)
    out: list[tuple[int, ...]] = []
    stack = [(0, 0, ())] if ways[0][0] else []
    while stack and len(out) < limit:
        k, i, acc = stack.pop()
        if k == n:
            out.append(acc)
            continue
        nexts = [x for x in range(i, m) if specs[x] == sub[k] and ways[k + 1][x + 1]]
        stack += [(k + 1, x + 1, acc + (x,)) for x in reversed(nexts)]
    return out


def _candidates(lay) -> list[tuple[bool, bool, list | None]]:
    """(use_ema, gradient accumulation, slot groups) settings that may have written the file."""
    cfg, slot_fn = lay.optimizer_config, _SLOTS.get(lay.optimizer or "")
    if cfg is not None:
        out = [(bool(cfg.get("use_ema")), bool(cfg.get("gradient_accumulation_steps")),
                slot_fn(cfg) if slot_fn else None)]
    elif slot_fn:
        out = [(e, ga, slot_fn(v)) for e in (False, True) for ga in (False, True)
               for v in _VARIANTS]
    else:
        out = []
    if lay.loss_scaled:  # built inside LossScaleOptimizer.build: see untracked's docstring
        out += [(e, ga, g) for e, ga, groups in out if (g := untracked.as_loss_scaled(groups))]
    return out


def _fits(cands, rest, tkeys, tspecs, bag_of):
    return [c for c in cands if c[2] is not None
            and _matches(_expand(*c, tspecs), rest, tkeys, tspecs, bag_of)]


def _pairing(h, okeys, rest, tkeys, tspecs, bag_of) -> tuple[dict, dict]:
    """``({optimizer key: (target weight key or None, slot name)}, {key: candidate keys})``."""
    (ema, ga, groups), idx = h
    sub_keys = [tkeys[i] for i in idx]
    sub_specs = [tspecs[i] for i in idx]
    pick, names = {}, {}
    # not strict: the fallback for an unknown optimizer class pairs only the first block
    for key, got, (_want, j, name, _ref) in zip(okeys, rest, _expand(ema, ga, groups,
                                                                      sub_specs), strict=False):
        # inside a bag (sublayers of unknown order) only the stored spec is known to match
        want = got
        target = None if j is None else _pair(j, want, sub_keys, sub_specs, bag_of)
        pick[key] = (target, name)
        if j is not None and target is None:
            names[key] = [k for k, s in zip(sub_keys, sub_specs, strict=True)
                          if bag_of.get(k) == bag_of.get(sub_keys[j]) and s == want]
    return pick, names


def _choose(chosen, lay, *, complete: bool, swapped: bool = False, sampled: bool = False):
    """One of several hypotheses with the same ``use_ema``: the only pairing, or, when every
    fitting one was enumerated (``complete``), the first if all pair the averages alike (they
    differ in slots only); otherwise averages that differ are left unpaired. Values never
    decide: a frozen copy tracking its layer (a momentum encoder, BYOL/MoCo/DQN target) sits
    nearer the optimizer's average than the layer it averages (review 11-attack-r3).
    ``swapped``: the pairings are config.json's trainable set and other sets of layers of the
    same shapes (the refusal says the flags are those at save time). ``sampled``: the
    pairings are a sample of those that fit (:func:`~.bag_fit.fit_runs`), not a count."""
    pairings = [p for _, (p, _) in chosen]
    if all(p == pairings[0] for p in pairings):
        return (chosen[0][0], chosen[0][1][1]), pairings[0]
    averages = {tuple(sorted((k, t) for k, (t, n) in p.items() if n == "average"
                             and t is not None)) for p in pairings}
    if complete and len(averages) == 1:
        return (chosen[0][0], chosen[0][1][1]), pairings[0]
    merged = {}
    for key in pairings[0]:
        targets = {p.get(key, (None, None))[0] for p in pairings}
        t, name = pairings[0][key]
        merged[key] = (t if len(targets) == 1 else None, name)
    cands = sorted({str(p[k][0]) for p in pairings for k in p if merged[k][0] is None
                    and p[k][1] == "average" and p[k][0] is not None})
    if swapped:
        # The first pairing is config.json's flags at save: its layers, as --trainable takes
        # them, are the answer when the model was recompiled after its flags last changed.
        layers: list[str] = []
        saved = [t for t, n in pairings[0].values() if n == "average" and t is not None]
        for target in saved:
            layer = lay.paths.get(target, target).rsplit("/", 1)[0]
            if layer not in layers:
                layers.append(layer)
        from .stated_names import numbered_alike

        stated = ",".join(layers) if numbered_alike(lay, layers, saved) else (
            "with their keys as 'ckpt list --json' shows them: this file's layer names carry "
            "counters another process numbers otherwise")
        lay.notes.append(
            f"{len(pairings)} sets of layers fit the EMA copies' shapes (candidate weights: "
            f"{', '.join(cands[:6])}" + (" ..." if len(cands) > 6 else "") + "): config.json "
            "records the trainable flags at save time, which may differ from those when the "
            "optimizer was built (a layer unfrozen and another frozen since, same shapes), so "
            "it does not prove which weights the averages belong to: pass --trainable with the "
            "weights the optimizer was built with"
            + (f" (if the model was compiled after its trainable flags last changed, as the "
               f"fine-tuning recipe recompiles, those at save: --trainable {stated})"
               if layers else "")
            + " (Python: apply_keras_ema(model, path, "
            "trainable=model.trainable_variables) as when it was built)")
        return (chosen[0][0], {}), merged
    counts = sorted({sum(n == "average" for _, n in p.values()) for p in pairings})
    if len(counts) > 1:  # how many copies there are is open too: never claim one count
        lay.copy_counts = tuple(counts)
    lay.notes.append(f"{'several' if sampled else len(pairings)} pairings of EMA copies with "
                     "weights fit the file "
                     f"(candidate weights: {', '.join(cands[:6])}); "
                     + ("this model's config.json does not record which layers were frozen"
                        if lay.optimizer_config is not None else
                        "frozen layers are not recorded in a bare .weights.h5")
                     + (f", nor how many of the optimizer variables are EMA copies "
                        f"({' or '.join(map(str, counts))}: settings such as Adam's amsgrad "
                        "or gradient accumulation add per-weight variables it does not "
                        "record)" if len(counts) > 1 else "")
                     + _custom_note(lay, cands)
                     + " and values do not decide it: pass --trainable with the weights the "
                     "optimizer was built with (Python: apply_keras_ema(model, path))"
                     + ("" if lay.optimizer_config is not None else ", or save a .keras"))
    return (chosen[0][0], {}), merged


def _custom_note(lay, cands: list[str]) -> str:
    """Words for candidates a layer saves by index (``sc/0``): the file does not say which
    of them are trainable, only that Keras saves the trainable ones first. A layer is called
    custom only where config.json names a class outside Keras; a Keras one is named by its
    class (``SpectralNormalization`` keeps its wrapped layer's kernel as its own weight too:
    one variable stored twice, review-12-attack F5)."""
    shown = [lay.paths.get(c, c) for c in cands]
    layers = sorted({c.rsplit("/", 1)[0] for c in shown if re.fullmatch(r".+/\d+", c)})
    if not layers:
        return ""
    classes = _layer_classes(lay.tree, {lay.paths.get(c, c).rsplit("/", 1)[0]: c
                                        for c in cands})
    custom = [n for n in layers if classes.get(n, (None, True))[1]]
    words = ", ".join(n if n in custom or not classes.get(n, (None,))[0]
                      else f"{n} ({classes[n][0]})" for n in layers[:3])
    tied = any(classes.get(n, ("",))[0] == "spectral_normalization" for n in layers)
    return (f", nor which weights of {'custom ' if set(custom) == set(layers) else ''}"
            f"layer(s) {words} are non-trainable (Keras saves a layer's trainable ones "
            f"first: {layers[0]}/0, {layers[0]}/1, ...)"
            + ("; Keras' SpectralNormalization keeps its wrapped layer's kernel as its own "
               "weight too, so that variable is stored twice and averaged once"
               if tied else ""))


def _layer_classes(root, keys: dict[str, str]) -> dict[str, tuple[str | None, bool]]:
    """Shown layer path -> (snake_case class config.json records, custom) for the layers
    holding ``keys`` (shown layer path -> one of its weight keys), from the model tree."""
    found: dict[str, tuple[str | None, bool]] = {}
    if root is None:
        return found
    owner = {}
    stack = [root]
    while stack:
        node = stack.pop()
        for k in node.keys:
            owner[k] = node
        stack.extend(node.ordered + node.bag)
    for shown, key in keys.items():
        node = owner.get(key)
        if node is not None:
            found[shown] = (node.cls, bool(node.custom))
    return found


def _describe(setting) -> str:
    """Words for a use_ema=False setting's per-variable blocks (``gradient accumulators``)."""
    _ema, ga, groups = setting
    names = (["gradient accumulators"] if ga else []) + [
        "/".join(names) + " slots" for _kind, names in groups or [] if _kind != "s"]
    return " + ".join(names) or "no per-variable state"


def _steps(lay, read) -> int | None:
    """The optimizer's ``iterations`` count stored in the file, or ``None`` if unknown."""
    if read is None or lay.iteration is None:
        return None
    try:
        import numpy as np

        return int(np.asarray(read(lay.iteration)).reshape(()))
    except (TypeError, ValueError, OverflowError):
        return None


def _note_open_bag(key, candidates, lay) -> None:
    """Notes that average ``key`` belongs to one of ``candidates`` (equal-shaped sublayers
    whose order the file does not record; values do not decide it)."""
    from .custom_order import note_loose

    if candidates and len(candidates) > 1 and not note_loose(lay, key, candidates):
        lay.notes.append(f"{key} averages one of {', '.join(candidates)} (sublayers whose "
                         "order the file does not record; values do not decide it): pass "
                         "--trainable with the weights the optimizer was built with (Python: "
                         "apply_keras_ema(model, path))")


def infer_use_ema(layout, entries: dict, trainable: list[Spec]) -> bool | None:
    """Decides ``use_ema`` for a Keras 3 file given the exact trainable variables of the model.

    A bare ``.weights.h5`` does not say which weights were trainable (frozen layers); a live
    model does, which settles layouts :func:`analyze` had to leave open. Values never decide
    here: a gradient accumulator or momentum buffer can sit as near its weight as an average.

    Args:
        layout: the file's layout.
        entries: the file's entries.
        trainable: ``(shape, dtype enum)`` of ``model.trainable_variables``, in order.

    Returns:
        `bool`, or `None` when both ``use_ema=True`` and a ``use_ema=False`` setting would
        write the same variables (the caller must state it).
    """
    if layout.kind != "keras3" or layout.optimizer_config is not None:
        return layout.use_ema
    if layout.ema_source == "stated":
        return layout.use_ema
    if not layout.optimizer_vars[layout.ema_offset:]:
        return False
    found = fitting_use_ema(layout, entries, trainable)
    if layout.tf_keras:  # no config: the live model's weights decide, or nothing does
        return found.pop() if len(found) == 1 else None
    if len(found) > 1 and layout.use_ema is not None and layout.ema_source == "layout":
        return layout.use_ema
    return found.pop() if len(found) == 1 else None


def fitting_use_ema(layout, entries: dict, trainable: list[Spec]) -> set[bool]:
    """The ``use_ema`` values of the known optimizer settings that write exactly the file's
    optimizer variables for a model whose ``trainable_variables`` have these specs (empty: no
    known setting fits, e.g. another number of trainable variables)."""
    rest = [spec(entries[k]) for k in layout.optimizer_vars[layout.ema_offset:]]
    if layout.tf_keras:  # iteration, averages, a built-in's slots: tf_keras.py
        from .tf_keras import fitting_use_ema as tf_keras_fitting

        return tf_keras_fitting(list(trainable), rest)
    tkeys = [str(i) for i in range(len(trainable))]
    return {c[0] for c in _fits(_candidates(layout), rest, tkeys, list(trainable), {})}


def _expand(use_ema, ga, groups, tspecs) -> list[tuple[Spec, int | None, str, bool]]:
    """(spec, index of the variable it belongs to, slot name, spec equals the variable's)."""
    out = []
    blocks = (["average"] if use_ema else []) + (["gradient_accumulator"] if ga else [])
    for name in blocks:
        out += [(s, j, name, True) for j, s in enumerate(tspecs)]
    for kind, names in groups:
        if kind == "b":
            out += [(s, j, names[0], True) for j, s in enumerate(tspecs)]
        elif kind == "i":
            out += [(s, j, n, True) for j, s in enumerate(tspecs) for n in names]
        elif kind in (untracked.TRACKED, untracked.UNTRACKED):  # r, c, v per weight
            out += [x for j, s in enumerate(tspecs) for x in untracked.expand(kind, names, j, s)]
        else:
            out.append((((), tspecs[0][1] if tspecs else 1), None, names[0], False))
    return out


def _matches(expected, actual, tkeys, tspecs, bag_of) -> bool:
    if len(expected) != len(actual):
        return False
    bag_want: Counter = Counter()
    bag_got: Counter = Counter()
    for (want, j, name, _ref), got in zip(expected, actual, strict=True):
        if j is not None and tkeys[j] in bag_of:
            bag_want[(name, bag_of[tkeys[j]], want)] += 1
            bag_got[(name, bag_of[tkeys[j]], got)] += 1
        elif want != got:
            return False
    return bag_want == bag_got


def _pair(j: int, want: Spec, tkeys, tspecs, bag_of) -> str | None:
    key = tkeys[j]
    if key not in bag_of:
        return key
    same = [k for k, s in zip(tkeys, tspecs, strict=True)
            if bag_of.get(k) == bag_of[key] and s == want]
    return same[0] if len(same) == 1 else None
