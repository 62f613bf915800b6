"""Two EMA objects named ``fast`` whose decays the ``.meta`` gives as no constant
(review-27-attack-r100 F1, F3).

9601057 refuses averages of one name whose ``apply()`` calls use different constant decays,
but skipped an ``apply()`` whose decay it could not read: decays given as tensors
(``tensor``), or the second object's ``apply()`` inside ``tf.cond`` (``cond``), passed as one
object, and the offered (or default) export wrote ``c`` from the 0.9 object beside ``w``,
``b`` from the 0.5 one, exit 0. An unread decay proves nothing equal: refused, and each offer
the refusal makes exports one object's averages alone. Truth: the session's values at save
time (TensorFlow, a subprocess)."""

from __future__ import annotations

import re
import shlex

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
for case in sys.argv[2:]:
    with tf.Graph().as_default():
        (w, b, c), step, upd = nudged_wbc(tf)
        if case == "tensor":
            e1 = tf1.train.ExponentialMovingAverage(tf.constant(0.5), name="fast")
            e2 = tf1.train.ExponentialMovingAverage(tf.constant(0.9), name="fast")
        else:
            e1 = tf1.train.ExponentialMovingAverage(0.5, name="fast")
            e2 = tf1.train.ExponentialMovingAverage(0.9, name="fast")
        with tf.control_dependencies(upd):
            op1 = e1.apply([w, b])
            if case == "tensor":
                op2 = e2.apply([c])
            else:  # the second object's only apply() runs inside the cond
                op2 = tf.cond(step >= 0, lambda: tf.group(e2.apply([c])), lambda: tf.no_op())
        train = tf.group(op1, op2, tf1.assign_add(step, 1))
        with saved_trained(tf, train, os.path.join(out, case, "model.ckpt")) as (s, _):
            truth.update({f"{case}:o0:w": s.run(e1.average(w)),
                          f"{case}:o0:b": s.run(e1.average(b)),
                          f"{case}:o1:c": s.run(e2.average(c))})
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("decay_unread")
    truth = run_tf1_script(SCRIPT, out, "tensor")
    # each graph in its own process, as a user's run: the cond's name (and what the .meta
    # shows of the apply() inside it) depends on what the process built before
    return out, {**truth, **run_tf1_script(SCRIPT, out, "cond")}


@pytest.mark.parametrize("case", ["tensor", "cond"])
def test_two_objects_of_unread_decays_are_refused_and_offers_take_one(made, case, tmp_path):
    out, truth = made
    for extra in ([], ["--ema-name", "fast"]):
        code, _, err = run_cli(["export", str(out / case), "--out", str(tmp_path / "o.npz"),
                                *extra])
        assert code == 6, (extra, err)
        assert not (tmp_path / "o.npz").exists()
    code, _, err = run_cli(["export", str(out / case), "--ema-name", "fast", "--out",
                            str(tmp_path / "o.npz")])
    assert "one EMA object's" in err and "ckpt export --raw" in err, err
    if case == "tensor":
        # two tf.constant nodes, which might hold one value: not shown one decay
        assert "not proven one EMA object's" in err, err
        assert len(set(re.findall(r"decay tensor '(Const[_0-9]*)'", err))) == 2, err
    offers = re.findall(r"--ema-name \S+(?: --exclude '[^']+')+(?: --allow-missing)?", err)
    assert offers, err
    for n, offer in enumerate(offers):
        dest = tmp_path / f"offer{n}.npz"
        code, _, said = run_cli(["export", str(out / case), *shlex.split(offer), "--out",
                                 str(dest)])
        assert code == 0, (offer, said)
        with np.load(dest) as z:
            got = {k: z[k] for k in z.files}
        objects = {k: [o for o in ("o0", "o1") if got[k].tobytes() == truth.get(
            f"{case}:{o}:{k}", np.zeros(0)).tobytes()] for k in got}
        assert got and all(len(v) == 1 for v in objects.values()), (offer, objects)
        assert len({tuple(v) for v in objects.values()}) == 1, (offer, objects)


def test_an_unread_decay_is_a_typed_record_of_its_apply(made):
    """note27 "Sentinel string": apply_decays marked an unread decay with the string prefix
    "unread:"; it keys each decay by a Decay record now: the constant, the node a tensor
    decay is read from (task s28b: the graph's objects, 0.5 over w, b and 0.9 over c, both
    given as tf.constant tensors, read two nodes), or None with the apply() it is of, so two
    unread decays stay two."""
    from ckpt_tools import open_checkpoint
    from ckpt_tools.ema_decays import Decay, apply_decays

    out, _ = made
    pairs = [("w/fast", "w"), ("b/fast", "b"), ("c/fast", "c")]
    with open_checkpoint(out / "tensor") as ckpt:
        groups = apply_decays(ckpt, pairs, use_meta=True)
    assert list(groups) == ["fast"], groups
    decays = groups["fast"]
    assert len(decays) == 2 and not any(d.constant for d in decays), decays
    for decay in decays:
        assert re.fullmatch(r"tensor 'Const(_\d+)?'", decay.value or "") and \
            decay.unread_of == "", decay
    taken = sorted(sorted(w for w, _a in t) for _label, t in decays.values())
    assert taken == [["b", "w"], ["c"]], taken
    unread = Decay.of(None, "fast in cond_true_3")
    assert unread == Decay(None, "fast in cond_true_3") and unread != Decay(None, "fast")
    assert unread.said() == "a decay the .meta does not show" and not unread.constant
    assert Decay("0.5").constant and Decay("0.5").said() == "decay 0.5"
    assert sorted([Decay(None, "a"), Decay("0.9"), Decay("0.5")]) == \
        [Decay("0.5"), Decay("0.9"), Decay(None, "a")]  # read ones first, as the refusal lists
