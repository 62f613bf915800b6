"""TF1 with its ``.meta``: ``ema.apply()`` under ``tf.distribute.MirroredStrategy`` in a graph
(multi-GPU TF1 code) is ``apply()``'s update, proven as in a plain graph
(review-18-attack-r39 F9, MAJOR; a regression of 293a9f0's writer rule).

The strategy's ``extended.update`` runs each shadow's update once per device, under
``ExponentialMovingAverage/AssignMovingAvg/update_<N>/AssignSubVariableOp``, not a bare
``AssignMovingAvg`` op: the writer rule read it as a hand writer, every average was refused and
only ``--raw`` was offered. The same proof holds there: the value subtracted is ``shadow - W``
times ``1 - <scope>/decay``.

Batch-norm statistics as Keras' ``BatchNormalization`` creates them under the strategy
(``synchronization=ON_READ``, ``aggregation=MEAN``: one value per replica), one averaged
(``bn/moving_mean``) and one not (``bn/moving_variance``; in ``2-bn_raw`` neither is), are
saved by a plain ``Saver()`` as ``save/truediv = AddN(read v, read v/replica_1) / 2``, the
variable's own value (what TF's restore assigns to every replica): read as written from that
variable they pair as without the strategy, in the CLI and restored by ``restore_ema`` /
``ema_saver`` into the graph imported from the ``.meta`` (review-21-attack-r54 F6: the CLI
refused them as a ``Saver(var_list=dict)``'s keys, and in ``2-bn_raw`` the Python restore
refused the statistics as "not in the checkpoint").

Made by real TensorFlow in a subprocess (one CPU device, and two logical CPU devices so each
shadow has a ``replica_1`` copy); truth ``sess.run(ema.average(v))`` at save time, and
``sess.run(v)`` (the replicas' mean) for the statistic not averaged.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools

SCRIPT = r'''
devices = int(sys.argv[2])
averaged_stats = 1 if sys.argv[3] == "bn_averaged" else 0  # else none (r54 F6 variant)
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
with tf.Graph().as_default():
    st = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(devices)])
    with st.scope():
        w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
        w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
        stats = [tf1.get_variable(  # as Keras' BatchNormalization makes them (r54 F6)
            f"bn/moving_{n}", initializer=tf.zeros([2]), trainable=False,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.MEAN) for n in ("mean", "variance")]
        opt = tf1.train.GradientDescentOptimizer(0.1)
        ema = tf1.train.ExponentialMovingAverage(0.5)

    def step():
        loss = tf.reduce_sum(tf.square(w0 - 3.0)) + tf.reduce_sum(tf.square(w1 - 2.0))
        rid = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        ups = [tf1.assign(m, 0.5 * m + w1 + rid + i) for i, m in enumerate(stats)]
        with tf.control_dependencies(ups):  # each replica its own statistics
            return opt.minimize(loss)

    with st.scope():
        train = st.extended.call_for_each_replica(step)
        with tf.control_dependencies(st.experimental_local_results(train)):
            upd = ema.apply([w0, w1, *stats[:averaged_stats]])
    s = tf1.Session()
    s.run(tf1.global_variables_initializer())
    for _ in range(3):
        s.run(upd)
    names = [o.name for o in s.graph.get_operations()]
    assert "ExponentialMovingAverage/AssignMovingAvg/update_0/AssignSubVariableOp" in names
    for v in (w0, w1, *stats):
        name = v.name[:-2]  # a SyncOnRead variable's op is its read
        averaged = v in (w0, w1, *stats[:averaged_stats])
        truth[f"ema:{name}"] = s.run(ema.average(v)) if averaged else s.run(v)
        truth[f"raw:{name}"] = s.run(v)
    saver = tf1.train.Saver()
    saver.save(s, f"{out}/model.ckpt")
    if devices == 2:  # a text .meta keeps no constant's value: the mean's divisor is unread
        saver.save(s, f"{out}/text/model.ckpt", write_meta_graph=False)
        tf1.train.export_meta_graph(f"{out}/text/model.ckpt.meta", as_text=True,
                                    saver_def=saver.saver_def)

import ckpt_tools  # noqa: E402

for how in ("restore_ema", "ema_saver"):  # into the graph imported from the .meta
    with tf.Graph().as_default(), tf1.Session() as s:
        tf1.train.import_meta_graph(f"{out}/model.ckpt.meta")
        try:
            if how == "restore_ema":
                ckpt_tools.restore_ema(s, f"{out}/model.ckpt")
            else:
                saver = ckpt_tools.ema_saver(checkpoint=f"{out}/model.ckpt")
                saver.restore(s, f"{out}/model.ckpt")
        except Exception as exc:  # the test says what
            truth[f"{how}:raised"] = np.array(f"{type(exc).__name__}: {exc}")
            continue
        for v in tf1.global_variables():  # the shadows are left unrestored
            if "ExponentialMovingAverage" not in v.op.name:
                truth[f"{how}:{v.op.name}"] = s.run(v)
'''


STATS = ("bn/moving_mean", "bn/moving_variance")
# devices-which statistics ema.apply() averages (bn/moving_mean, or neither)
RUNS = ("1-bn_averaged", "2-bn_averaged", "2-bn_raw")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_mirrored")
    return out, {run: run_tf1_script(SCRIPT, out / run, *run.split("-"))
                 for run in RUNS}


@pytest.mark.parametrize("run", RUNS)
def test_apply_under_mirrored_strategy_is_proven(made, tmp_path, run):
    out, truths = made
    truth, run, dest = truths[run], out / run, tmp_path / "w.npz"
    assert truth["ema:w0"].tobytes() != truth["raw:w0"].tobytes()
    for stated in ([], ["--ema-name", "ExponentialMovingAverage"]):
        code, _, err = run_cli(["export", str(run), "--strict", *stated, "--out", str(dest)])
        assert code == 0, (stated, err)
        with np.load(dest) as z:
            assert sorted(z.files) == [*STATS, "w0", "w1"], z.files
            for var in z.files:
                assert z[var].tobytes() == truth[f"ema:{var}"].tobytes(), (stated, var)
        dest.unlink()
    m = ckpt_tools.ema_map(str(run))
    assert m.source == "meta" and not m.missing, m
    assert dict(m.pairs)["w0/ExponentialMovingAverage"] == "w0", m
    if run.name.endswith("bn_averaged"):
        assert dict(m.pairs)["bn/moving_mean/ExponentialMovingAverage"] == "bn/moving_mean", m
        assert truth["raw:bn/moving_mean"].tobytes() != truth["ema:bn/moving_mean"].tobytes()
    code, _, err = run_cli(["restore-ema", str(run), "--out", str(tmp_path / "r")])
    assert code == 0, err
    with ckpt_tools.open_checkpoint(str(tmp_path / "r")) as c:
        for var in (*STATS, "w0", "w1"):
            assert c.tensor(var).tobytes() == truth[f"ema:{var}"].tobytes(), var


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("how", ["restore_ema", "ema_saver"])
def test_restored_into_the_imported_graph(made, run, how):
    """What the generator's restore_ema / ema_saver(checkpoint=) restored into the graph
    imported from the .meta: every variable, the statistic not averaged too (r54 F6)."""
    _, truths = made
    truth = truths[run]
    got = {k.split(":", 1)[1]: v for k, v in truth.items() if k.startswith(how + ":")}
    assert "raised" not in got, str(got.get("raised"))
    for var in (*STATS, "w0", "w1"):
        assert got[var].tobytes() == truth[f"ema:{var}"].tobytes(), var


def test_unproven_aggregate_refused_naming_no_meta(made, tmp_path):
    """Where the graph file cannot prove the replicas' mean (a text .meta), the refusal says
    what the key holds and names --no-meta, which pairs by the keys' names (r54 F6)."""
    out, truths = made
    truth, run, dest = truths["2-bn_averaged"], out / "2-bn_averaged" / "text", tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(run), "--out", str(dest)])
    assert code == 6 and "--no-meta" in err and "SyncOnRead" in err, err
    assert "Saver(var_list=dict)" not in err, err
    # the statistic not averaged: no name shows it frozen, --allow-missing keeps it as stored
    code, _, err = run_cli(["export", str(run), "--no-meta", "--allow-missing",
                            "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as z:
        assert sorted(z.files) == [*STATS, "w0", "w1"], z.files
        for var in z.files:
            assert z[var].tobytes() == truth[f"ema:{var}"].tobytes(), var
