"""A TF1 ``ExponentialMovingAverage(name="Momentum")`` beside a ``MomentumOptimizer``, over
resource and reference variables (review-11-attack-r16 F5): TF stores ``w/Momentum`` and
``w/Momentum_1``, the EMA's average and the momentum buffer in the order the two were built.
``--ema-name Momentum`` paired the momentum buffers as averages (exit 0) and the default refusal
said no shadow was saved. With the ``.meta`` its update ops (``AssignMovingAvg`` vs
``(Resource)ApplyMomentum``) decide; without it a stated name whose ``_N`` sibling is also stored
is refused, naming the ``.meta``. Truth: ``ema.average(v)`` (name and value) and
``opt.get_slot(v, "momentum")``, recorded by TensorFlow at save time in a subprocess."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import copies_without_meta, run_cli, run_script

from ckpt_tools import ema_map

SCRIPT = r'''
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {}
for case in ("ema_first", "opt_first", "ema_first_ref", "opt_first_ref"):
    with tf.Graph().as_default():
        resource = not case.endswith("_ref")  # RefVariables: AssignSub, ApplyMomentum
        w = tf1.get_variable("w", [3, 2], use_resource=resource)
        b = tf1.get_variable("b", [2], use_resource=resource)
        loss = tf.reduce_sum(tf.square(w - 1)) + tf.reduce_sum(b * b)
        ema = tf1.train.ExponentialMovingAverage(0.5, name="Momentum")
        opt = tf1.train.MomentumOptimizer(0.1, 0.9)
        if case.startswith("ema_first"):
            average = ema.apply([w, b])
            with tf.control_dependencies([average]):
                step = opt.minimize(loss)
        else:
            train = opt.minimize(loss)
            with tf.control_dependencies([train]):
                step = ema.apply([w, b])
        saver = tf1.train.Saver()
        with tf1.Session() as s:
            # the model's variables first: a reference variable's shadow reads it at init
            s.run(tf1.variables_initializer([w, b]))
            s.run(tf1.variables_initializer(
                [v for v in tf1.global_variables() if v.op.name not in ("w", "b")]))
            for _ in range(3):
                s.run(step)
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt")
            for var in (w, b):
                name = var.op.name
                truth[f"{case}:avg:{name}"] = s.run(ema.average(var).read_value())
                truth[f"{case}:avgname:{name}"] = np.array(ema.average(var).op.name)
                truth[f"{case}:slot:{name}"] = s.run(opt.get_slot(var, "momentum").read_value())
                truth[f"{case}:slotname:{name}"] = np.array(opt.get_slot(var, "momentum").op.name)
np.savez(f"{out}/truth.npz", **truth)
'''

CASES = ("ema_first", "opt_first", "ema_first_ref", "opt_first_ref")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("ema_named_momentum")
    truth = run_script(SCRIPT, out)
    copies_without_meta(out, CASES)
    return out, truth


def _names(truth, case: str, kind: str) -> dict[str, str]:
    return {str(truth[f"{case}:{kind}:{v}"]): v for v in ("w", "b")}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("extra", [[], ["--ema-name", "Momentum"]])
def test_the_graphs_update_ops_pair_the_emas_averages(made, tmp_path, case, extra):
    out, truth = made
    code, stdout, err = run_cli(["map", str(out / case), *extra, "--non-averaged", "drop",
                                 "--json"])
    assert code == 0, err
    assert json.loads(stdout) == _names(truth, case, "avgname")  # never the slots
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), *extra, "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for var in ("w", "b"):
            assert z[var].tobytes() == truth[f"{case}:avg:{var}"].tobytes(), var
            assert z[var].tobytes() != truth[f"{case}:slot:{var}"].tobytes(), var


@pytest.mark.parametrize("case", CASES)
def test_list_shows_the_emas_averages_and_the_slots(made, case):
    out, truth = made
    code, stdout, err = run_cli(["list", str(out / case), "--json"])
    assert code == 0, err
    rows = {v["name"]: v for v in json.loads(stdout)["variables"]}
    for shadow, var in _names(truth, case, "avgname").items():
        assert rows[shadow]["role"] == "ema" and rows[shadow]["ema_of"] == var, rows[shadow]
    for slot in _names(truth, case, "slotname"):
        assert rows[slot]["role"] == "optimizer_slot", rows[slot]


def test_python_api_pairs_the_emas_averages(made):
    out, truth = made
    for case in CASES:
        m = ema_map(str(out / case), ema_name="Momentum", non_averaged="drop")
        assert m.mapping == _names(truth, case, "avgname"), case


@pytest.mark.parametrize("case", ["ema_first", "ema_first_ref"])
def test_a_stated_name_of_the_optimizers_slot_is_refused(made, tmp_path, case):
    out, truth = made
    # EMA built first: its averages are w/Momentum, the optimizer's slots w/Momentum_1
    slot = next(iter(_names(truth, case, "slotname"))).rpartition("/")[2]
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--ema-name", slot, "--out",
                            str(target)])
    assert code == 6 and not target.exists(), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    text = " ".join(err.split())
    assert "optimizer's slot" in text and "ApplyMomentum" in text, err
    assert "--ema-name Momentum " in text, err


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["Momentum", "Momentum_1"])
@pytest.mark.parametrize("where", ["nometa", "no-meta option"])
def test_without_the_graph_a_name_with_a_sibling_is_refused(made, tmp_path, case, name,
                                                           where):
    out, _ = made
    path = out / f"{case}_nometa" if where == "nometa" else out / case
    extra = ["--no-meta"] if where != "nometa" else []
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(path), "--ema-name", name, *extra, "--out",
                            str(target)])
    assert code == 6 and not target.exists(), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    text = " ".join(err.split())
    assert ".meta" in text and "Momentum_1" in text and "no EMA shadow" not in text, err


API_SCRIPT = r'''
import sys

import numpy as np
import tensorflow as tf

from ckpt_tools import ema_saver, restore_ema

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out, src, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
got = {}
for case in cases:
    for how in ("ema_saver", "restore_ema"):
        with tf.Graph().as_default():  # the training graph, imported as the README shows
            tf1.train.import_meta_graph(f"{src}/{case}/model.ckpt.meta")
            with tf1.Session() as s:
                if how == "ema_saver":
                    ema_saver(checkpoint=f"{src}/{case}").restore(s, f"{src}/{case}/model.ckpt")
                else:
                    restore_ema(s, f"{src}/{case}", ema_name="Momentum")
                for var in tf1.global_variables():
                    if var.op.name in ("w", "b"):
                        got[f"{case}:{how}:{var.op.name}"] = s.run(var)
np.savez(f"{out}/truth.npz", **got)
'''


def test_ema_saver_and_restore_ema_in_the_imported_graph(made, tmp_path):
    out, truth = made
    got = run_script(API_SCRIPT, tmp_path, str(out), *CASES)
    for case in CASES:
        for how in ("ema_saver", "restore_ema"):
            for var in ("w", "b"):
                assert got[f"{case}:{how}:{var}"].tobytes() == \
                    truth[f"{case}:avg:{var}"].tobytes(), (case, how, var)
