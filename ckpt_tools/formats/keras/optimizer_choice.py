"""Pairing a Keras 3 optimizer's EMA copies with weights once settings fit: one pairing
among those that fit, a bag's sublayer order proven by shapes, and the notes saying what is
left open and which option decides it. Values never decide. Split out of :mod:`.optimizer`.
"""

from __future__ import annotations

import math
import re

from ...wording import noun
from .optimizer_slots import expand, pair, spec
from .quantized import INT_QUANTIZED

#: The way out where the file does not pair the EMA copies: the weights the optimizer was built
#: with, in its order, which a custom training loop may have set (``--loop-order``).
STATE_WEIGHTS = ("pass --trainable with the weights the optimizer was built with, in its order "
                 "(model.trainable_variables for fit(); a custom training loop's: --trainable "
                 "NAMES --loop-order) (Python: apply_keras_ema(model, path))")

_PERMUTATIONS = 5040  # sublayer orders tried per bag (7 sublayers)


def custom_note(lay, count: int) -> str:
    """Why the EMA copies of an optimizer class that is not a Keras built-in are not paired."""
    return (f"the optimizer is {lay.custom_optimizer}, not a Keras built-in (config.json), "
            "and a subclass may create variables of its own before Keras' EMA copies (a "
            f"Lookahead's slow weights), so which of its {count} variables are the copies is "
            "not recorded and they cannot be paired from this file (--trainable decides "
            "nothing); if the class is a Keras built-in in all but name (a subclass adding "
            "no variables and keeping the built-in's updates: a get_config, a schedule), "
            "state that built-in: --optimizer CLASS[:OPTIONS] (Python: "
            "optimizer=\"CLASS[:OPTIONS]\"); "
            "or save a tf.train.Checkpoint(model=model, optimizer=optimizer), whose "
            "variable names carry the weights' paths")


def pairing(h, okeys, rest, tkeys, tspecs, bag_of) -> tuple[dict, dict]:
    """``({optimizer key: (target weight key or None, slot name)}, {key: candidate keys})``."""
    (ema, ga, groups), idx = h
    sub_keys = [tkeys[i] for i in idx]
    sub_specs = [tspecs[i] for i in idx]
    pick, names = {}, {}
    # not strict: the fallback for an unknown optimizer class pairs only the first block
    for key, got, (_want, j, name, _ref) in zip(okeys, rest, expand(ema, ga, groups,
                                                                      sub_specs), strict=False):
        # inside a bag (sublayers of unknown order) only the stored spec is known to match
        want = got
        target = None if j is None else pair(j, want, sub_keys, sub_specs, bag_of)
        pick[key] = (target, name)
        if j is not None and target is None:
            names[key] = [k for k, s in zip(sub_keys, sub_specs, strict=True)
                          if bag_of.get(k) == bag_of.get(sub_keys[j]) and s == want]
    return pick, names


def choose(chosen, lay, *, complete: bool, swapped: bool = False, sampled: bool = False):
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
                     + " and values do not decide it: " + STATE_WEIGHTS
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
    # a built-in Dense/EinsumDense saved by index is quantized (r36 F1, F8): its mode's order
    rule = (f"Keras saves a layer's trainable ones first: {layers[0]}/0, {layers[0]}/1, ..."
            if not any(classes.get(n, (None,))[0] in INT_QUANTIZED for n in layers) else
            "a quantized layer saves them in its mode's order, which a bare .weights.h5 does "
            "not record: GPTQ/AWQ the bias, quantized_kernel, kernel_scale, g_idx, int8 the "
            "kernel, bias, kernel_scale; only the bias is trainable")
    return (f", nor which weights of {'custom ' if set(custom) == set(layers) else ''}"
            f"{noun(len(layers), 'layer')} {words} are "
            f"non-trainable ({rule})"
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


def settle_sublayers(pick, okeys, sub_keys, entries, bag_of, bag_groups, lay):
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


def note_open_bag(key, candidates, lay) -> None:
    """Notes that average ``key`` belongs to one of ``candidates`` (equal-shaped sublayers
    whose order the file does not record; values do not decide it)."""
    from .custom_order import note_loose

    if candidates and len(candidates) > 1 and not note_loose(lay, key, candidates):
        lay.notes.append(f"{key} averages one of {', '.join(candidates)} (sublayers whose "
                         "order the file does not record; values do not decide it): "
                         + STATE_WEIGHTS)
