"""Whether a Keras file's EMA copies sit where ``fit()``'s build order puts them.

A Keras optimizer keeps its copies by position, in the order it was built: ``fit()`` builds it
from ``model.trainable_variables``, a custom training loop from whatever list its first
``apply_gradients()`` got. The file records the positions, not the loop, so copies of weights
of equal shape and dtype are paired in ``fit()``'s order (``keras_assumed``: ``fit_order``).
Their values can contradict that: an average starts as its weight and follows it, and layers
initialised apart stay apart. Where copies of a group each sit clearly nearest one weight
(four times nearer than to any other), those weights are all different, and one is not the
weight ``fit()``'s order gives it while also four times nearer it than to the group's centre
and, where that weight's own copy sits nearest it too, than to that copy (where copies of
weights initialised alike lag, review-20-attack-r51 F2; review-21-attack-r57 F1), or than
that weight's own copy is (review-20-attack-r47 F2), or where
swapping two copies cuts their summed distance to the weights threefold while each sits nearer
the other's weight than its own (review-20-attack-r51 F3: a third weight near them hides the
first test), the copies were built in another order: refused (exit 6), naming
``--trainable NAMES --loop-order``. Groups of fewer than ``MIN_SIZE`` elements, weights at
rounding-noise level, and copies that single out no weight prove nothing either way: the
order stays assumed (the first two are not compared at all, and the ``fit_order`` note says
so: :func:`unchecked`). A stated ``--trainable`` or ``--fit-order`` is the caller's order and is
not checked: a statement wins, values only settle what nothing states.
"""

from __future__ import annotations

from .checkpoint import Checkpoint

# A copy belongs to a weight when it is this many times nearer to it than to any other.
MARGIN = 4.0
# Two copies were built in each other's place when swapping them cuts their summed distance
# to the weights this many times, each nearer the other's weight than its own. Both must
# point at the other: no fit() file screened showed that at any batch end (review-20-attack-r51
# F3; fit() Dense/LayerNorm/BatchNorm MLPs), while loops that swapped two Dense(32) layers
# show 3.4x after 20 steps of ema_momentum=0.99 (review-20-attack-r47 F2).
SWAP_MARGIN = 3.0
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
    return _checks(ckpt)[0]


def unchecked(ckpt: Checkpoint) -> dict[str, str]:
    """The weights whose group of equal shape and dtype the values were not compared for
    (the ``fit_order`` note says so: review-21-user-u23 F4, two swapped Dense(8) biases
    exported exit 0 while the README said swapped copies are refused).

    Returns:
        `dict`: weight key -> why, in a few words (``"under 16 elements"``, ``"noise-level
        values"``, ``"not float"``); empty where every group was compared or the order is
        stated (then nothing is checked, nor assumed).
    """
    return _checks(ckpt)[1]


def _checks(ckpt: Checkpoint) -> tuple[list[tuple[str, str, str, float]], dict[str, str]]:
    return ckpt.memo("keras_order_contradictions", lambda: _contradictions(ckpt))


def _contradictions(ckpt: Checkpoint,
                    ) -> tuple[list[tuple[str, str, str, float]], dict[str, str]]:
    import numpy as np

    layout = getattr(ckpt.reader, "keras", None)
    if layout is None or not layout.use_ema or not layout.averages or layout.trainable_stated \
            or ckpt.fit_order:
        return [], {}  # a stated order (--trainable, --fit-order) is the caller's: not checked
    entries = ckpt.entries()
    pairs = {a: w for a, w in layout.averages.items()
             if w is not None and w in entries and a not in layout.stated_pairs}
    groups: dict[tuple, list[tuple[str, str]]] = {}
    for a, w in pairs.items():
        groups.setdefault((tuple(entries[w].shape), entries[w].dtype), []).append((a, w))
    found = []
    skipped: dict[str, str] = {}
    for (shape, _dtype), members in groups.items():
        if len(members) < 2:
            continue
        why = ""
        if int(np.prod(shape, dtype=np.int64)) < MIN_SIZE:
            why = f"under {MIN_SIZE} elements"
        else:
            copies = [_sample(ckpt, a) for a, _ in members]
            weights = [_sample(ckpt, w) for _, w in members]
            if any(x is None for x in copies + weights):
                why = "not float"
            elif any(float(np.sqrt(np.mean(w * w))) < NOISE_RMS for w in weights):
                why = "noise-level values"
            else:
                found.extend(_misplaced(members, copies, weights))
        skipped.update((w, why) for _, w in members if why)
    return found, skipped


def _misplaced(members: list[tuple[str, str]], copies: list, weights: list,
               ) -> list[tuple[str, str, str, float]]:
    """The copies of one same-shape group that sit on another weight than their own.

    A copy singles out the weight it is ``MARGIN`` times nearer than any other. It contradicts
    ``fit()``'s order (the i-th copy pairs with the i-th weight) where any rule holds:

    - centre: it is also ``MARGIN`` times nearer that weight than the group's centre and
      than that weight's own copy by ``fit()``'s order. Copies of weights initialised alike
      (zero biases) lag near their common start, so near each other and near whichever
      weight moved least (r17 F2b): no proof. The centre stands for that start only where
      the group's weights started alike; LayerNormalization's gammas (ones) beside zero
      biases pull it away, so the copies are compared with each other too
      (review-20-attack-r51 F2), but only where that weight's own copy sits nearest it:
      otherwise the two may have traded places (review-21-attack-r57 F1);
    - pairwise: the copy ``fit()``'s order gives that weight is itself ``MARGIN`` times
      farther from it (review-20-attack-r47 F2: three Dense(32) kernels with
      ``ema_momentum=0.99`` sit 5-6x nearer their own weights for hundreds of steps while the
      centre, ~5 from each weight, singled out none).

    Several copies singling out one weight prove nothing (layers initialised alike). Besides,
    two copies contradict it where swapping them cuts their summed distance to the weights
    ``SWAP_MARGIN``-fold while each is nearer the other's weight than its own: a
    transposition, which a third weight near them cannot mask as it masks "nearer than any
    other" (review-20-attack-r51 F3). Copies lagging near a common start give no such margin:
    each is about as far from the other's weight as from its own.

    Returns:
        ``(copy key, weight paired by fit order, weight it sits on, how many times nearer
        that weight than its own; inf where it equals it)`` for each contradicting copy, the
        most telling first; empty where none.
    """
    import numpy as np

    dist = np.array([[float(np.linalg.norm(c - w)) for w in weights] for c in copies])
    centre = np.mean(weights, axis=0)
    singled: dict[int, int] = {}
    for i in range(len(copies)):
        j = int(dist[i].argmin())
        rest = np.delete(dist[i], j)
        if rest.min() > 0 and dist[i, j] * MARGIN <= rest.min():
            singled[i] = j
    def far_from_start(i: int, j: int) -> float:
        # The copy must also stand clear of where weights initialised alike start. Where the
        # weight's own copy sits nearest it too, copies lag near that common start together,
        # so the copies are compared with each other as well (LayerNormalization's gammas pull
        # the centre away: review-20-attack-r51 F2). Where it sits nearer another weight, the
        # two copies may have traded places, and their closeness is no alibi
        # (review-21-attack-r57 F1: l1/bias and ln1/beta traded, both started at zero).
        far = float(np.linalg.norm(copies[i] - centre))
        if int(dist[j].argmin()) == j:
            far = min(far, float(np.linalg.norm(copies[i] - copies[j])))
        return far

    by_centre = {i: j for i, j in singled.items() if dist[i, j] * MARGIN <= far_from_start(i, j)}
    found: dict[int, int] = {}
    if len(set(by_centre.values())) == len(by_centre):
        found.update((i, j) for i, j in by_centre.items() if j != i)
    if len(set(singled.values())) == len(singled):
        found.update((i, j) for i, j in singled.items()
                     if j != i and dist[i, j] * MARGIN <= dist[j, j])
    for i in range(len(copies)):
        for j in range(i + 1, len(copies)):
            if (dist[i, j] + dist[j, i]) * SWAP_MARGIN <= dist[i, i] + dist[j, j] \
                    and dist[i, j] < dist[i, i] and dist[j, i] < dist[j, j]:
                found.setdefault(i, j)
                found.setdefault(j, i)

    def nearer(i: int, j: int) -> float:
        return dist[i, i] / dist[i, j] if dist[i, j] > 0 else float("inf")

    return sorted(((members[i][0], members[i][1], members[j][1], nearer(i, j))
                   for i, j in found.items()), key=lambda f: -f[3])


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
    _copy, paired, near, ratio = found[0]
    paired, near = layout.paths.get(paired, paired), layout.paths.get(near, near)
    # a copy equal to another weight (saved right after an ema_overwrite_frequency step) has
    # no ratio to print (review-20-attack-r51 F1: it printed a 305-digit number)
    where = (f"equals {near}" if ratio == float("inf") else
             f"is {ratio:.{1 if ratio < 10 else 0}f}x nearer {near} than {paired}"
             if ratio < 1e6 else f"is {ratio:.0e}x nearer {near} than {paired}")
    raise UnprovenPairingError(
        f"{ckpt.path}: {len(found)} EMA cop{'y sits' if len(found) == 1 else 'ies sit'} on "
        f"another weight than fit()'s build order pairs them with: the copy paired with "
        f"{paired} {where} (an average follows its own weight), so the optimizer was built "
        "in another order, as a custom training loop's first apply_gradients() may list the "
        "variables: state that order with --trainable NAMES --loop-order (Python: "
        "trainable=[...], loop_order=True); if fit() trained it, --fit-order (fit_order=True) "
        "states so",
        "--trainable NAMES --loop-order",
        {copy: (paired, near) for copy, paired, near, _r in found})
