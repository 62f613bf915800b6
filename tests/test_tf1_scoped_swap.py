"""A swapping Saver (``{v.op.name: ema.average(v), ema.average_name(v): v}``) of averages
that ``ema.apply()`` made under a ``variable_scope``: key ``s/W/ExponentialMovingAverage`` holds
``W`` raw and key ``W`` its average; with ``model/dense/kernel`` beside ``dense/kernel`` under
scope ``model``, key ``model/dense/kernel/ExponentialMovingAverage`` holds ``dense/kernel``
raw. The save op and the update ops prove every key, but the keys holding the weights were
exported under their shadows' names, which are no weights: ``export`` refused with "it holds
no model weights" (exit 7; s14e). ``.meta`` and TF1 SavedModel alike. Truth:
``sess.run(ema.average(v))`` and ``sess.run(v)`` at save time, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
for case in ("scoped", "collision"):
    with tf.Graph().as_default():
        if case == "scoped":
            ks = [tf1.get_variable("W", [4, 4], initializer=tf1.ones_initializer()),
                  tf1.get_variable("b", [4], initializer=tf1.zeros_initializer())]
            scope = "s"
        else:
            ks = [tf1.get_variable("model/dense/kernel", [4, 4],
                                   initializer=tf1.ones_initializer()),
                  tf1.get_variable("dense/kernel", [4, 4], initializer=tf1.zeros_initializer())]
            scope = "model"
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        ema = tf1.train.ExponentialMovingAverage(0.5)
        step = tf.group(tf1.assign_add(ks[0], tf.ones_like(ks[0])),
                        tf1.assign_add(ks[1], 2 * tf.ones_like(ks[1])))
        with tf.control_dependencies([step]), tf1.variable_scope(scope):
            update = ema.apply(ks)
        with trained(tf, update) as s:
            for k in ks:
                truth[f"{case}:{k.op.name}"] = s.run(ema.average(k))
                truth[f"{case}:raw:{k.op.name}"] = s.run(k)
                truth[f"{case}:key:{k.op.name}"] = np.array(ema.average_name(k))
            saver = tf1.train.Saver({**{k.op.name: ema.average(k) for k in ks},
                                     **{ema.average_name(k): k for k in ks}})
            saver.save(s, f"{out}/{case}_meta/model.ckpt")
            b = tf1.saved_model.Builder(f"{out}/{case}_sm")
            b.add_meta_graph_and_variables(s, ["serve"], saver=saver)
            b.save()
'''
VARS = {"scoped": ("W", "b"), "collision": ("model/dense/kernel", "dense/kernel")}
CASES = [(c, f) for c in VARS for f in ("meta", "sm")]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_scoped_swap")
    return out, run_tf1_script(SCRIPT, out)


def _path(out, case, form):
    return out / f"{case}_{form}" / ("model.ckpt" if form == "meta" else "")


@pytest.mark.parametrize(("case", "form"), CASES)
@pytest.mark.parametrize("raw", [False, True], ids=["ema", "raw"])
def test_scoped_swapping_saver_exports_each_variables_values(made, tmp_path, case, form, raw):
    out, truth = made
    # the keys holding the raw weights are the shadows' names, not <var>/ExponentialMovingAverage
    assert str(truth[f"{case}:key:{VARS[case][1]}"]) != f"{VARS[case][1]}/ExponentialMovingAverage"
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(_path(out, case, form)), *(["--raw"] if raw else []),
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        assert sorted(z.files) == sorted(VARS[case])
        for var in VARS[case]:
            want = truth[f"{case}:{'raw:' if raw else ''}{var}"]
            assert z[var].tobytes() == want.tobytes(), var


@pytest.mark.parametrize("case", list(VARS))
def test_scoped_swapping_saver_restore_ema(made, tmp_path, case, tf):
    out, truth = made
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(_path(out, case, "meta")), "--out", str(baked)])
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(baked / "model.ckpt"))
    for var in VARS[case]:  # a plain Saver().restore reads each variable's own key
        assert reader.get_tensor(var).tobytes() == truth[f"{case}:{var}"].tobytes(), var
