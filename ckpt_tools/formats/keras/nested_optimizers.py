"""Keras 3 ``MultiOptimizer``: optimizers nested in the compiled one (review 13 attack-r23 F2).

A ``MultiOptimizer(OptimizerMap(...))`` keeps each inner optimizer's variables under
``optimizer/optimizers/<name>/vars`` (repeated in its own ``optimizer/vars``); config.json
records each inner optimizer's ``use_ema``, while the wrapper's own is ``False``. Which weights
each inner optimizer was built with (the map's patterns, matched against variable paths at
build time) is not paired here: where an inner optimizer ran with ``use_ema=True`` (or a bare
``.weights.h5`` cannot tell), the file is refused, never read as ``use_ema=False``.
"""

from __future__ import annotations

from ...wording import agreeing, counted, noun

_NESTED = "optimizer/optimizers/"


def nested_emas(optimizer_config: dict | None) -> dict[str, bool]:
    """Inner optimizer name -> its ``use_ema`` as config.json's ``optimizer_map`` records it.

    Example:
        >>> nested_emas({"optimizer_map": {"config": {
        ...     "default_optimizer": {"class_name": "SGD", "config": {"name": "sgd",
        ...                                                        "use_ema": True}},
        ...     "optimizer_map": {".*enc.*": {"class_name": "Adam", "config": {
        ...         "name": "adam", "use_ema": False}}}}}})
        {'sgd': True, 'adam': False}
    """
    omap = ((optimizer_config or {}).get("optimizer_map") or {})
    cfg = omap.get("config") if isinstance(omap, dict) else None
    if not isinstance(cfg, dict):
        return {}
    inner = [cfg.get("default_optimizer")]
    inner += list((cfg.get("optimizer_map") or {}).values()) if isinstance(
        cfg.get("optimizer_map"), dict) else []
    found: dict[str, bool] = {}
    for o in inner:
        if isinstance(o, dict) and isinstance(o.get("config"), dict):
            c = o["config"]
            found[str(c.get("name") or o.get("class_name"))] = bool(c.get("use_ema"))
    return found


def nested_owners(entries) -> list[str]:
    """The nested optimizers' names from their variable groups (``optimizer/optimizers/adam``)."""
    return sorted({str(e.extra.get("owner"))[len(_NESTED):].split("/", 1)[0]
                   for e in entries.values()
                   if str(e.extra.get("owner") or "").startswith(_NESTED)})


def refuse_nested(lay, entries) -> None:
    """Marks ``lay`` when the optimizer nests optimizers whose EMA copies may be stored:
    ``lay.nested`` names them, no average is paired, ``use_ema`` is never read as ``False``
    from the wrapper's config (``True`` where config.json records an inner ``use_ema=True``,
    ``None`` where no config tells), and a note says what is refused and what remains."""
    owners = nested_owners(entries)
    recorded = nested_emas(lay.optimizer_config)
    if not owners and not recorded:
        return
    if recorded and not any(recorded.values()):
        lay.notes.append(f"{counted(len(lay.other), 'variable')} of nested optimizers "
                         "(use_ema=False in config.json) "
                         f"{agreeing(len(lay.other), 'is', 'are')} not interpreted")
        return
    names = [n for n, on in recorded.items() if on] if recorded else owners
    lay.nested = names
    lay.averages, lay.slots = {}, {}
    if recorded:
        lay.use_ema, lay.ema_source = True, "config"
        lay.ema_evidence = (f"config.json: the {lay.optimizer or 'optimizer'}'s nested "
                            f"{noun(len(names), 'optimizer')} {', '.join(names)} ran with "
                            "use_ema=True")
        said = f"{noun(len(names), 'optimizer')} {', '.join(names)} with use_ema=True (config.json)"
    else:
        lay.use_ema, lay.ema_source = None, "layout"
        lay.ema_evidence = "nested optimizers; no config.json records their use_ema"
        said = (f"{noun(len(names), 'optimizer')} {', '.join(names)} (a MultiOptimizer; a bare "
                ".weights.h5 does not record their use_ema)")
    lay.notes[:] = [n for n in lay.notes if not n.startswith("cannot tell whether")
                    and "variables of nested optimizers" not in n]
    lay.notes.append(
        f"the optimizer nests {said}: ckpt does not pair a nested optimizer's EMA copies with "
        "the weights it was built with (its OptimizerMap's patterns decide that at build time, "
        "which the file does not record), and no ckpt option decides it (--use-ema and "
        "--trainable state a single optimizer's); in Python, the live model's optimizer holds "
        "them: for each inner optimizer o, zip(o._trainable_variables, "
        "o._model_variables_moving_average)")
