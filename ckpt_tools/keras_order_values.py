"""Whether a Keras file's EMA copies sit where ``fit()``'s build order puts them.

A Keras optimizer keeps its copies by position, in the order it was built: ``fit()`` builds it
from ``model.trainable_variables``, a custom training loop from whatever list its first
``apply_gradients()`` got. The file records the positions, not the loop, so copies of weights
of equal shape and dtype are paired in ``fit()``'s order (``keras_assumed``: ``fit_order``).
Their values can contradict that: an average starts as its weight and follows it, and layers
initialised apart stay apart. Where each copy of a group sits clearly nearest one weight
(four times nearer than to any other, and than to the group's centre, where weights
initialised alike start), those weights are all different, and one is not the weight
``fit()``'s order gives it, the copies were built in another order: refused (exit 6), naming
``--trainable NAMES --loop-order``. Groups of fewer than ``MIN_SIZE`` elements, weights at
rounding-noise level, and copies that single out no weight prove nothing either way: the
order stays assumed. A stated ``--trainable`` or ``--fit-order`` is the caller's order and is
not checked: a statement wins, values only settle what nothing states.
"""

from __future__ import annotations

from .checkpoint import Checkpoint

# A copy belongs to a weight when it is this many times nearer to it than to any other.
MARGIN = 4.0
# Elements compared per tensor: its first ones (layers initialised apart differ everywhere).
SAMPLE = 1 << 16
# Fewer elements prove nothing: a scalar or a (1,) bias of one head lands near another's by
# chance (review-11-attack-r17 F2); nor do weights at rounding-noise level (a conv bias before
# BatchNormalization gets no gradient: its "distances" are float noise, r17 F1).
MIN_SIZE = 16
NOISE_RMS = 1e-4


def _sample(ckpt: Checkpoint, key: str):
    import numpy as np

    flat = np.asarray(ckpt.tensor(key)).reshape(-1)[:SAMPLE]
    return flat.astype(np.float64) if flat.dtype.kind in "fV" else None


def contradictions(ckpt: Checkpoint) -> list[tuple[str, str, str, float]]:
    """The copies whose values place them on another weight than ``fit()``'s order does.

    Returns:
        `list` of ``(copy key, weight paired by fit order, weight it belongs to, how many
        times nearer)``; empty where the values agree or prove nothing. Computed once per
        open checkpoint.
    """
    return ckpt.memo("keras_order_contradictions", lambda: _contradictions(ckpt))


def _contradictions(ckpt: Checkpoint) -> list[tuple[str, str, str, float]]:
    import numpy as np

    layout = getattr(ckpt.reader, "keras", None)
    if layout is None or not layout.use_ema or not layout.averages or layout.trainable_stated \
            or ckpt.fit_order:
        return []  # a stated order (--trainable, --fit-order) is the caller's: not checked
    entries = ckpt.entries()
    pairs = {a: w for a, w in layout.averages.items()
             if w is not None and w in entries and a not in layout.stated_pairs}
    groups: dict[tuple, list[tuple[str, str]]] = {}
    for a, w in pairs.items():
        groups.setdefault((tuple(entries[w].shape), entries[w].dtype), []).append((a, w))
    found = []
    for (shape, _dtype), members in groups.items():
        if len(members) < 2 or int(np.prod(shape, dtype=np.int64)) < MIN_SIZE:
            continue
        copies = [_sample(ckpt, a) for a, _ in members]
        weights = [_sample(ckpt, w) for _, w in members]
        if any(x is None for x in copies + weights) or any(
                float(np.sqrt(np.mean(w * w))) < NOISE_RMS for w in weights):
            continue
        owner: dict[int, tuple[int, float]] = {}
        # Weights initialised alike (zeros, ones) drift from one point: a copy lagging near
        # it is near whichever weight moved least, which proves nothing (r17 F2b). A copy
        # must also sit MARGIN times nearer its owner than the group's centre.
        centre = np.mean(weights, axis=0)
        for i, c in enumerate(copies):
            dist = np.array([float(np.linalg.norm(c - w)) for w in weights])
            j = int(dist.argmin())
            rest = np.delete(dist, j)
            if rest.min() > 0 and dist[j] * MARGIN <= min(rest.min(),
                                                           float(np.linalg.norm(c - centre))):
                owner[i] = (j, rest.min() / max(dist[j], 1e-300))
        if len({j for j, _ in owner.values()}) != len(owner):
            continue  # several copies near one weight: layers initialised alike, no proof
        for i, (j, ratio) in owner.items():
            if j != i:
                found.append((members[i][0], members[i][1], members[j][1], ratio))
    return found


def refuse_contradicted_order(ckpt: Checkpoint) -> None:
    """Refuses a Keras file whose copies' values contradict ``fit()``'s build order.

    Raises:
        UnprovenPairingError: naming a copy, the weight the order gives it and the one its
            values place it on, and the statements that decide (``--trainable NAMES
            --loop-order``; ``--fit-order`` to insist on fit()'s order, review-11-attack-r17
            F3); ``list`` shows it in ``ema_unproven`` as the other commands refuse it.
    """
    from .ema_refusals import UnprovenPairingError

    found = contradictions(ckpt)
    if not found:
        return
    layout = ckpt.reader.keras
    a, paired, near, ratio = found[0]
    shown = layout.paths.get
    raise UnprovenPairingError(
        f"{ckpt.path}: {len(found)} EMA cop{'y sits' if len(found) == 1 else 'ies sit'} on "
        f"another weight than fit()'s build order pairs them with: the copy paired with "
        f"{shown(paired, paired)} is {ratio:.0f}x nearer {shown(near, near)} (an average "
        "follows its own weight), so the optimizer was built in another order, as a custom "
        "training loop's first apply_gradients() may list the variables: state that order "
        "with --trainable NAMES --loop-order (Python: trainable=[...], loop_order=True); if "
        "fit() trained it, --fit-order (fit_order=True) states so",
        "--trainable NAMES --loop-order",
        {copy: (paired, near) for copy, paired, near, _r in found})
