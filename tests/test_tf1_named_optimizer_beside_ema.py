"""TF1 with its ``.meta``: an ExponentialMovingAverage beside an optimizer given a name of its
own (``MomentumOptimizer(name="SGDM")`` writes ``W/SGDM`` beside ``W/ExponentialMovingAverage``)
was refused, "nothing recorded says" which is the average, and ``list --json`` gave the
momentum buffer role ``ema`` (review-14-attack-r25 F1). The ``.meta``'s update ops record it:
``SGDM/update_W/ResourceApplyMomentum`` takes ``W/SGDM`` as a slot, ``AssignMovingAvg`` updates
the average. Default-named and custom-named (``ema``) EMA; resource and ref variables. Made by
real TensorFlow in a subprocess; truth ``ema.average(v)`` at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools

SCRIPT = r'''
ema_name, ref = sys.argv[2], sys.argv[3] == "ref"
if ref:
    tf1.disable_resource_variables()
    tf1.disable_control_flow_v2()
with tf.Graph().as_default():
    gs = tf1.train.get_or_create_global_step()
    w = tf1.get_variable("W", [3, 3])
    b = tf1.get_variable("b", [3], initializer=tf1.ones_initializer())
    loss = tf.reduce_mean((tf.matmul(tf.random.normal([8, 3], seed=1), w) + b - 2.0) ** 2)
    train = tf1.train.MomentumOptimizer(0.1, 0.9, name="SGDM").minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5, **({} if ema_name == "default" else
                                                     {"name": ema_name}))
    with tf.control_dependencies([train]):
        step = ema.apply([w, b])
    with trained(tf, step, 4) as s:
        for v in (w, b):
            truth[v.op.name] = s.run(ema.average(v))
        tf1.train.Saver().save(s, f"{out}/model.ckpt", global_step=gs)
'''


@pytest.fixture(scope="module", params=[("default", "resource"), ("default", "ref"),
                                        ("ema", "resource")],
                ids=["default", "default_ref", "ema"])
def made(request, tmp_path_factory):
    name, kind = request.param
    out = tmp_path_factory.mktemp(f"sgdm_{name}_{kind}")
    return out, name, run_tf1_script(SCRIPT, out, name, kind)


def test_export_takes_the_averages_the_graph_proves(made, tmp_path):
    out, _, truth = made
    for args in (["export", str(out), "--out", str(tmp_path / "x.npz")],
                 ["export", str(out), "--strict", "--out", str(tmp_path / "y.npz")]):
        code, _, err = run_cli(args)
        assert code == 0, err
        with np.load(args[-1]) as z:
            assert sorted(z.files) == ["W", "b"]
            for k, v in truth.items():
                assert z[k].tobytes() == v.tobytes(), k


def test_list_gives_the_momentum_buffer_the_slot_role(made):
    out, name, _ = made
    suffix = "ExponentialMovingAverage" if name == "default" else name
    code, text, err = run_cli(["list", str(out), "--json"])
    assert code == 0, err
    rows = {v["name"]: v for v in json.loads(text)["variables"]}
    for w in ("W", "b"):
        assert rows[f"{w}/SGDM"]["role"] == "optimizer_slot", rows[f"{w}/SGDM"]
        assert rows[f"{w}/{suffix}"]["role"] == "ema", rows
        assert rows[f"{w}/{suffix}"]["ema_of"] == w, rows


def test_restore_ema_in_the_imported_graph(made, tf):
    out, _, truth = made
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        meta = next(out.glob("model.ckpt-*.meta"))
        tf.compat.v1.train.import_meta_graph(str(meta))
        ckpt_tools.restore_ema(sess, str(out))
        got = {v.op.name: sess.run(v) for v in tf.compat.v1.global_variables()}
    for k, v in truth.items():
        assert got[k].tobytes() == v.tobytes(), k
