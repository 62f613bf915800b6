"""``export --raw`` and ``--tensor-averages`` of a TF1 checkpoint read without a ``.meta``,
where keys are named as averages of variables the checkpoint does not store
(review-22-attack-r66 F1, F7; review-22-attack-r64 F5).

A training ``Saver(ema.variables_to_restore())`` writes each averaged variable ``v`` RAW under
``ema.average_name(v)`` (``w/ExponentialMovingAverage``, ``w/avg`` for an EMA named ``avg``)
and stores no ``w``; every other global variable keeps its own name, a second EMA object's
average of ``w`` too (``w/slow``; ``w/ema/slow`` for an object named ``ema/slow``; ``s/w/slow``
for one applied in ``variable_scope("s")``). A suffix after each key (``{k + "/x": v}``) writes
``w/ExponentialMovingAverage/x``. The keys alone cannot tell those raw values from averages (a
Saver of the averages alone, or ``ema.apply()`` of tensors, writes the same names), nor a
second object's average from a weight: ``--raw`` wrote slow's average as the only raw weight
and ``--tensor-averages`` wrote the raw ``w/avg`` as an EMA value, exit 0. Only the
``.meta``'s save op tells which key holds what, so both are refused where the fingerprint is
found. The fingerprint, kept as narrow as the evidence allows:

* a key read as a TF1 average of a variable not stored (``w/ExponentialMovingAverage``, no
  ``w``), not a scalar (a loss tensor's average under the default name): a plain
  ``Saver()`` stores every variable it averages beside its average, so such a key means a
  Saver that left ``w`` out or wrote ``w`` under it; the default export refuses it likewise
  (:func:`~ckpt_tools.raw_shadows.settle_lone_averages`);
* a key under ``ExponentialMovingAverage`` whose head is not stored, with a tail after it
  (``w/ExponentialMovingAverage/x``): TF names no variable so, a suffixing Saver does;
* a key read as a tensor's average under a head not stored: by the EMA's name alone
  (``w/avg``: TF1's loss-average name, no evidence of a tensor, as
  ``w/ExponentialMovingAverage`` is none), or by a head naming a loss where no model weight
  is stored at all or a stored key runs through that head (``w/slow``, ``s/w/slow``: a
  tensor's op name heads no variable, a variable's name does); then every key under that
  EMA name (one name, one Saver). A loss tensor's average beside the model's stored weights
  (``ema.apply([loss])`` in a plain ``Saver()``) is not it, nor one TF zero-debiased
  (``<key>/biased`` beside it: TF debiases tensors' averages only).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import roles as R
from .checkpoint import Checkpoint
from .errors import EmaError
from .formats.objgraph import readable_name

# averages and their state: none of them is a weight running through a tensor's name
_AVERAGE_ROLES = (R.EMA, R.EMA_DEBIAS, R.LOSS_AVERAGE, R.TENSOR_AVERAGE)


def unstored_head_keys(ckpt: Checkpoint, variables: Mapping) -> tuple[dict, dict]:
    """Returns ({key read as a TF1 average of a variable not stored: that variable},
    {key read as a tensor's average that may be a variable's raw value: its head}), each
    sorted by key, as the module docstring says; both empty with a ``.meta`` (its save op
    tells) or in a TF2/Keras file."""
    if ckpt.meta is not None or ckpt.objects is not None:
        return {}, {}
    stored = {readable_name(k) for k in variables}
    # a scalar's is left out: ema.apply([loss]) under the default name writes a loss tensor's
    # average as xent/ExponentialMovingAverage (the CIFAR-10 recipe without name="avg"),
    # where model weights, whose raw values a vtr Saver writes so, are not scalars
    # (review-23-attack-r72 F6)
    lone = {k: readable_name(v.ema_of) for k, v in variables.items() if v.role == R.EMA
            and v.ema_style == "tf1" and v.ema_of and tuple(v.shape) != ()
            and readable_name(v.ema_of) not in stored}
    for key, v in variables.items():  # <v>/ExponentialMovingAverage/<tail>, no <v>
        parts = readable_name(key).split("/")
        if v.role == R.EMA_DEBIAS or key in lone:
            continue
        for i in range(1, len(parts) - 1):
            if R.ema_suffix(parts[i], {R.DEFAULT_EMA_NAME}) and "/".join(
                    parts[:i]) not in stored and "/".join(parts[:i + 1]) not in stored:
                lone[key] = "/".join(parts[:i])
                break
    lone = dict(sorted(lone.items()))
    entries = ckpt.entries()
    tensors = {k: readable_name(k).rpartition("/")[0] for k, v in variables.items()
               if v.role == R.TENSOR_AVERAGE and readable_name(k).rpartition("/")[0] not in stored
               and not R.zero_debias_pair(f"{k}/biased", entries)}
    if not tensors or not any(v.role == R.WEIGHT for v in variables.values()):
        return lone, dict(sorted(tensors.items()))
    # read as a tensor's by the EMA's name alone (w/avg): no evidence of a tensor
    through = {h for h in tensors.values() if "loss" not in h.lower()}
    heads = set(tensors.values()) - through
    for k, v in variables.items():  # heads a stored key (no average) runs through: w/slow
        if v.role in _AVERAGE_ROLES or not heads:
            continue
        parts = readable_name(k).split("/")
        through.update(h for i in range(len(parts)) for j in range(i + 1, len(parts))
                       if (h := "/".join(parts[i:j])) in heads)
    # one EMA name, one Saver: every key under the name of one found is in question
    names = {readable_name(k).rpartition("/")[2] for k, h in tensors.items() if h in through}
    return lone, {k: h for k, h in sorted(tensors.items())
                  if readable_name(k).rpartition("/")[2] in names}


def refuse_unstored_heads(ckpt: Checkpoint, variables: Mapping, *, raw: bool,
                          tensor_averages: bool) -> None:
    """Refuses ``export --raw`` (``raw``) or ``--tensor-averages`` (``tensor_averages``) of a
    TF1 checkpoint read without a ``.meta`` whose keys are named as averages of variables it
    does not store (:func:`unstored_head_keys`): which keys hold raw weights, and which
    averages, only the ``.meta``'s save op tells.

    Raises:
        EmaError: (exit 6) such keys are found, naming them, the ``.meta`` (keep it, or drop
            ``--no-meta``) and, where the keys are read as variables' averages, the default
            export's ``--averages-only``, which states that they hold averages.
    """
    lone, tensors = unstored_head_keys(ckpt, variables)
    heads = {**lone, **tensors} if raw else tensors
    if not heads or not (raw or tensor_averages):
        return
    keys = list(heads)
    key = keys[0]
    head = heads[key]
    cannot = " and ".join([*(["--raw cannot say which keys hold the raw weights"] if raw else []),
                           *([f"--tensor-averages cannot say that {', '.join(list(tensors)[:2])} "
                              "hold averages"] if tensors and tensor_averages else [])])
    why = "--no-meta leaves no .meta" if ckpt.meta_unread else "it has no .meta"
    fix = ("drop --no-meta (the .meta's save op tells which key holds what)"
           if ckpt.meta_unread else
           "keep the training .meta (model.ckpt.meta, written by saver.save) beside it")
    stated = (", or, if you know those keys hold averages, ckpt export --averages-only "
              "(without --raw; Python: open_checkpoint(path, averages_only=True)) exports "
              "them as the averages" if raw and not ckpt.averages_only
              and any(variables[k].role == R.EMA for k in lone) else "")
    raise EmaError(
        f"{ckpt.path}: {len(keys)} key(s) are named as averages of variables it does not "
        f"store (e.g. {key}, and no {head}): a training Saver(ema.variables_to_restore()) "
        "writes the variables' RAW values under such names, whatever the EMA's name, and a "
        "second EMA object's averages beside them under names read as weights, where a Saver "
        "of the averages alone, or ema.apply() of tensors, writes averages there; "
        f"{why} to tell which, so {cannot}: {fix}{stated}")
