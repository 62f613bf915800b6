"""One EMA object applied twice whose decay is a tensor or a variable: exported under
``--ema-name`` where the ``.meta`` shows each ``apply()`` reading its decay from the very
same node (a v2 ``tf.cond``'s branch function reading it as the argument the graph passes it
as, review-28-attack-r104 F2); two objects' decay nodes, or one read through a v1
``tf.cond``'s ``Switch``, stay refused (review-27-attack-r100 F1; task s28b item 1).

c4785b8 counted every decay the ``.meta`` gives as no constant as its own object, so one
``ExponentialMovingAverage(tf.constant(0.5), name="fast")`` applied to ``[w, b]`` and then to
``[c]`` was refused under ``--ema-name fast`` as if two objects. Truth: ``sess.run(
ema.average(v))`` at save time (TensorFlow, through the fork server)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
for case in sys.argv[2:]:
    if case.endswith("cond1"):
        tf1.disable_control_flow_v2()
    with tf.Graph().as_default():
        (w, b, c), step, upd = nudged_wbc(tf)
        kind = case.split("_")[1]

        def decay(value, n):
            if kind == "mix" and n == 0:
                return value  # a float: apply() builds its decay constant itself
            if kind in ("const", "mix"):
                return tf.constant(value, name=f"dc{n}")
            if kind in ("ph", "cond1", "cond2"):
                return tf1.placeholder_with_default(value, [], name=f"ph{n}")
            if kind == "var":
                return tf1.get_variable(f"decay{n}", initializer=value, trainable=False)
            if kind == "refvar":
                return tf1.get_variable(f"decay{n}", initializer=value, trainable=False,
                                        use_resource=False)
            return tf1.train.exponential_decay(value, step, 10, 0.9)  # sched

        e1 = tf1.train.ExponentialMovingAverage(decay(0.5, 0), name="fast")
        # one object applied twice, or a second object of the same name with its own decay
        e2 = e1 if case.startswith("one") else tf1.train.ExponentialMovingAverage(
            decay(0.9, 1), name="fast")
        with tf.control_dependencies(upd):
            op1 = e1.apply([w, b])
            if kind.startswith("cond"):
                op2 = tf.cond(step >= 0, lambda: tf.group(e2.apply([c])), lambda: tf.no_op())
            else:
                op2 = e2.apply([c])
        train = tf.group(op1, op2, tf1.assign_add(step, 1))
        with saved_trained(tf, train, os.path.join(out, case, "model.ckpt")) as (s, _):
            for v, e in ((w, e1), (b, e1), (c, e2)):
                truth[f"{case}:{v.op.name}"] = s.run(e.average(v))
    if case.endswith("cond1"):
        tf1.enable_control_flow_v2()
'''

# one_cond2: the second apply() in a control-flow-v2 tf.cond's branch function, which is
# passed ph0 as an argument: read as the graph's node passed in (review-28-attack-r104 F2)
ONE = ["one_const", "one_ph", "one_var", "one_refvar", "one_sched", "one_cond2"]
REFUSED = ["two_const", "two_ph", "two_var", "two_sched", "two_mix", "one_cond1"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("decay_node")
    return out, run_tf1_script(SCRIPT, out, *ONE, *REFUSED)


@pytest.mark.parametrize("case", ONE)
def test_one_object_with_one_decay_node_exports_its_averages(made, case, tmp_path):
    out, truth = made
    dest = tmp_path / "o.npz"
    code, _, err = run_cli(["export", str(out / case), "--ema-name", "fast", "--out",
                            str(dest)])
    assert code == 0, err
    with np.load(dest) as z:
        got = {k: z[k] for k in z.files}
    assert {"b", "c", "w"} <= set(got) <= {"b", "c", "w", "decay0"}, sorted(got)
    for k in ("b", "c", "w"):  # each the one object's average, bit for bit
        assert got[k].tobytes() == truth[f"{case}:{k}"].tobytes(), k
    # the default export still wants the name stated: a decay tensor is no proof of an EMA
    code, _, err = run_cli(["export", str(out / case), "--out", str(tmp_path / "d.npz")])
    assert code == 6 and "--ema-name fast" in err, err
    assert not (tmp_path / "d.npz").exists()


@pytest.mark.parametrize("case", REFUSED)
def test_decay_nodes_not_shown_one_are_refused(made, case, tmp_path):
    out, _truth = made
    code, _, err = run_cli(["export", str(out / case), "--ema-name", "fast", "--out",
                            str(tmp_path / "o.npz")])
    assert code == 6, err
    assert not (tmp_path / "o.npz").exists()
    assert "not proven one EMA object's" in err and "one decay tensor or variable" in err, err
    if case == "two_var":
        assert "decay variable 'decay0'" in err and "decay variable 'decay1'" in err, err
    if case == "one_cond1":  # the cond reads the placeholder through its Switch: another node
        assert "decay tensor 'ph0'" in err and "Switch" in err, err


def test_constant_beside_tensor_decay_refusal_says_what_the_graph_shows(made, tmp_path):
    """The default export's refusal of 0.5 (a float) beside a tf.constant(0.9) object said the
    graph "shows no AssignMovingAvg op writing any of these tensors" though it shows one
    writing each (review-27-attack-r100 F1 side note; task s28b item 2)."""
    out, _truth = made
    code, _, err = run_cli(["export", str(out / "two_mix"), "--out", str(tmp_path / "o.npz")])
    assert code == 6, err
    assert not (tmp_path / "o.npz").exists()
    assert "no AssignMovingAvg op" not in err, err
    assert "AssignMovingAvg ops in ExponentialMovingAverage.apply()'s form writing b/fast, " \
        "c/fast, w/fast, but the decay of those writing c/fast is not one apply() builds " \
        "itself" in err, err
