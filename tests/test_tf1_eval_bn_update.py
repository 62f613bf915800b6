"""A TF1 evaluation graph whose batch norm runs in training mode, or a fine-tune of variables
named as batch norm statistics, re-saved with ``Saver(ema.variables_to_restore())``
(review-25-attack-r88 F1, F2), made here by TensorFlow (a subprocess; tf_slim does not import
with this TF, so its ``batch_norm(is_training=True)`` is built as it builds it, and Keras'
is ``tf.compat.v1.layers.batch_normalization`` of tf_keras), the truth read at save time:

* ``f2_slim``, ``f2_keras``: a plain Saver restores the training checkpoint's RAW weights, the
  batch norm's ``assign_moving_average`` updates run, the vtr Saver saves: every key named as an
  average holds a raw value. The updates made each key ``other`` by role and the map paired
  them by the ``.meta``'s collections with no check: export wrote the raw weights as the
  averages, exit 0 (F2). ``ok_slim``, ``ok_keras``: the same graph, the averages restored with
  the vtr Saver and nothing run: the file cannot tell them apart, so both are refused naming
  ``--averages-only`` and ``--raw --keys-are-raw``, and each statement writes what the keys
  held bit for bit.
* ``ft_stats``, ``ft_stats_vs``: the averages restored, then ``moving_mean`` and
  ``moving_variance`` (non-trainable, in ``moving_average_variables``) fine-tuned by a
  hand-written ``assign_sub`` of their gradients; saved with the vtr Saver of every variable,
  or of the statistics alone. A write of a variable named ``moving_mean`` was read as a batch
  norm statistic's update by its name, so ``export --allow-missing`` gave the fine-tuned raw
  statistics as their averages, exit 0 (F1): only what the graph proves a statistic's update
  (a running average toward a batch ``Mean``) is one.
* ``ev_stat``: an evaluation graph's hand-written statistic update (``assign(mm, 0.5 * mm +
  0.5 * mean)``, proven one) run after a plain Saver restored the raw values, saved with a vtr
  Saver of the statistics alone: its keys, ``other`` by role, were paired with no check, exit
  0; the evaluation graph's refusal now (``--averages-only`` decides).
* ``ev_frozen``, ``ev_metric``: an evaluation graph (batch norm in inference mode) that
  restored the averages with the vtr Saver and re-saved them with it; ``ev_metric`` also keeps
  a running average of its loss (``assign_moving_average``) in a LOCAL variable the Saver
  never writes, which read it as a training graph's: ``--raw --keys-are-raw`` then wrote the
  averages as raw weights, exit 0 (review-26-attack-r93 F1). Both read as the evaluation
  graph they are."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import raw_bytes, run_cli, run_script
from helpers_tf1 import PRELUDE

SCRIPT = 'import os\nos.environ["TF_USE_LEGACY_KERAS"] = "1"\n' + PRELUDE + r'''
from tensorflow.python.training import moving_averages

GK = tf1.GraphKeys
STATS = [GK.GLOBAL_VARIABLES, GK.MODEL_VARIABLES, GK.MOVING_AVERAGE_VARIABLES]


def model(bn):
    """fc -> batch norm. bn: "slim" (tf_slim's batch_norm(is_training=True) as it builds it:
    statistics in moving_average_variables, assign_moving_average of tf.nn.moments; tf_slim
    does not import with this TF), "keras" (tf.compat.v1.layers.batch_normalization(
    training=True), tf_keras), "frozen" (the statistics used, not updated: inference mode),
    "hand" (inference mode, and an eval graph's hand-written statistic assign)."""
    x = tf1.placeholder_with_default(tf.random.stateless_normal([8, 3], seed=[1, 2]),
                                     [None, 3], name="x")
    w = tf1.get_variable("fc/w", [3, 3], initializer=tf1.random_normal_initializer(seed=1))
    b = tf1.get_variable("fc/b", [3], initializer=tf1.random_normal_initializer(seed=2))
    h = tf.matmul(x, w) + b
    if bn == "keras":
        return tf.identity(tf1.layers.batch_normalization(h, training=True, name="bn"), name="y")
    with tf1.variable_scope("bn"):
        beta = tf1.get_variable("beta", [3], initializer=tf1.zeros_initializer())
        mm = tf1.get_variable("moving_mean", [3], initializer=tf1.zeros_initializer(),
                              trainable=False, collections=STATS)
        mv = tf1.get_variable("moving_variance", [3], initializer=tf1.ones_initializer(),
                              trainable=False, collections=STATS)
        if bn == "slim":
            mean, var = tf.nn.moments(h, [0])
            for u in (moving_averages.assign_moving_average(mm, mean, 0.9, zero_debias=False),
                      moving_averages.assign_moving_average(mv, var, 0.9, zero_debias=False)):
                tf1.add_to_collection(GK.UPDATE_OPS, u)
            return tf.identity(tf.nn.batch_normalization(h, mean, var, beta, None, 1e-3), "y")
        if bn == "hand":
            mean, var = tf.nn.moments(h, [0])
            for v, m in ((mm, mean), (mv, var)):
                tf1.add_to_collection(GK.UPDATE_OPS, tf1.assign(v, 0.5 * v + 0.5 * m))
        return tf.identity(tf.nn.batch_normalization(h, mm, mv, beta, None, 1e-3), "y")


def vtr_saver(**kw):
    return tf1.train.Saver(tf1.train.ExponentialMovingAverage(0.5).variables_to_restore(**kw))


def record(kind):
    for v in tf1.global_variables():
        truth[f"{kind}:{v.op.name}"] = s.run(v.read_value())


for bn in ("slim", "keras"):
    with tf.Graph().as_default():  # training: ema.apply() of the weights and statistics
        gs = tf1.train.get_or_create_global_step()
        loss = tf.reduce_sum(tf.square(model(bn)))
        with tf.control_dependencies(tf1.get_collection(GK.UPDATE_OPS)):
            step = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5, num_updates=gs)
        with tf.control_dependencies([step]):
            train_op = ema.apply(tf1.trainable_variables() + tf1.moving_average_variables())
        with trained(tf, train_op) as s:
            tf1.train.Saver().save(s, f"{out}/train_{bn}/model.ckpt", global_step=gs)
            for v in tf1.trainable_variables() + tf1.moving_average_variables():
                truth[f"{bn}_ema:{v.op.name}"] = s.run(ema.average(v).read_value())
    for kind in ("f2", "ok"):  # evaluation graph: its batch norm in training mode
        with tf.Graph().as_default():
            gs = tf1.train.get_or_create_global_step()
            model(bn)
            with tf1.Session() as s:
                if kind == "f2":  # the RAW weights restored, the statistics updated
                    tf1.train.Saver(tf1.global_variables()).restore(
                        s, tf.train.latest_checkpoint(f"{out}/train_{bn}"))
                    s.run(tf1.get_collection(GK.UPDATE_OPS))
                else:  # the averages restored, nothing run
                    vtr_saver().restore(s, tf.train.latest_checkpoint(f"{out}/train_{bn}"))
                vtr_saver().save(s, f"{out}/{kind}_{bn}/model.ckpt", global_step=gs)
                record(f"{kind}_{bn}")
for kind in ("ft_stats", "ft_stats_vs"):  # F1: the statistics fine-tuned by hand
    with tf.Graph().as_default():  # (assign_sub), not w, b; ft_stats_vs saved with a Saver
        gs = tf1.train.get_or_create_global_step()  # of variables_to_restore() over them
        loss = tf.reduce_sum(tf.square(model("frozen")))
        stats = tf1.moving_average_variables()
        step = tf.group(*[tf1.assign_sub(v, 0.05 * g)
                          for v, g in zip(stats, tf.gradients(loss, stats))])
        with tf1.Session() as s:
            vtr_saver().restore(s, tf.train.latest_checkpoint(f"{out}/train_slim"))
            for _ in range(3):
                s.run(step)
            vtr_saver(**({"moving_avg_variables": stats} if kind == "ft_stats_vs" else {})
                      ).save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
            record(kind)
with tf.Graph().as_default():  # an eval graph's hand statistic assign, run after a plain
    gs = tf1.train.get_or_create_global_step()  # Saver restored the raw values; a Saver of
    model("hand")  # variables_to_restore() over the statistics alone (weights by own names)
    with tf1.Session() as s:
        tf1.train.Saver(tf1.global_variables()).restore(
            s, tf.train.latest_checkpoint(f"{out}/train_slim"))
        s.run(tf1.get_collection(GK.UPDATE_OPS))
        vtr_saver(moving_avg_variables=tf1.moving_average_variables()).save(
            s, f"{out}/ev_stat/model.ckpt", global_step=gs)
        record("ev_stat")
for kind in ("ev_frozen", "ev_metric"):  # evaluation graphs: inference only, the averages
    with tf.Graph().as_default():  # restored and re-saved with the vtr Saver; ev_metric also
        gs = tf1.train.get_or_create_global_step()  # keeps its loss's running average in a
        y = model("frozen")  # LOCAL variable no key is written from (review-26-attack-r93 F1)
        metric = []
        if kind == "ev_metric":
            acc = tf1.get_variable("eval/loss_avg", [], initializer=tf1.zeros_initializer(),
                                   trainable=False, collections=[GK.LOCAL_VARIABLES])
            metric = [moving_averages.assign_moving_average(
                acc, tf.reduce_mean(tf.square(y)), 0.9, zero_debias=False)]
        with tf1.Session() as s:
            s.run(tf1.local_variables_initializer())
            vtr_saver().restore(s, tf.train.latest_checkpoint(f"{out}/train_slim"))
            s.run([y, *metric])
            vtr_saver().save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
            record(kind)
''' + '\nnp.savez(f"{out}/truth.npz", **truth)\n'

E = "ExponentialMovingAverage"
STATS = ("bn/moving_mean", "bn/moving_variance")
# each case: the variables saved under their averages' names
NAMED = {"slim": ("bn/beta", *STATS, "fc/b", "fc/w"), "keras": ("bn/beta", "bn/gamma", "fc/b",
                                                                  "fc/w")}
CASES = {"f2_slim": NAMED["slim"], "f2_keras": NAMED["keras"], "ok_slim": NAMED["slim"],
         "ok_keras": NAMED["keras"], "ft_stats": NAMED["slim"], "ft_stats_vs": STATS}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_eval_bn_update")
    return out, run_script(SCRIPT, out)


def _export(out, case: str, *options: str, dst) -> tuple[int, str]:
    code, _, err = run_cli(["export", *options, str(out / case), "--out", str(dst)])
    return code, " ".join(err.split())


@pytest.mark.parametrize("case", sorted(CASES))
def test_vtr_resave_of_a_training_mode_graph_refused(made, case, tmp_path):
    """Every command refuses (exit 6), naming both statements and what the graph shows."""
    import ckpt_tools as C

    out, truth = made
    if not case.startswith("ok"):  # what the keys hold is no average: raw, or fine-tuned
        probe = "bn/moving_mean" if case.startswith("ft") else "fc/w"
        ema = "keras_ema" if case.endswith("keras") else "slim_ema"
        assert not np.array_equal(truth[f"{case}:{probe}"], truth[f"{ema}:{probe}"])
    dst = tmp_path / "e.npz"
    for extra in ([], ["--allow-missing"]):
        code, err = _export(out, case, *extra, dst=dst)
        assert code == 6 and not dst.exists(), err
        assert "--averages-only" in err and "--raw --keys-are-raw" in err, err
        assert ("an op training bn/moving_" if case.startswith("ft") else
                "assign_moving_average update of bn/moving_mean") in err, err
    for command in (["map"], ["restore-ema", "--out", str(tmp_path / "baked")]):
        code, _, err = run_cli([*command, "--allow-missing", str(out / case)])
        assert code == 6 and "--averages-only" in err, err
    assert not (tmp_path / "baked").exists()
    with pytest.raises(C.UnprovenPairingError):
        C.ema_map(str(out / case), allow_missing=True)
    code, text, err = run_cli(["list", "--json", str(out / case)])
    assert code == 0, err
    assert json.loads(text)["raw_named"] == {f"{n}/{E}": n for n in CASES[case]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_statement_writes_what_the_keys_held(made, case, tmp_path):
    """--raw --keys-are-raw and --averages-only each write what the keys held at save, bit
    for bit (the raw weights where a plain Saver restored them or a step trained them, the
    averages where the vtr Saver restored them)."""
    out, truth = made
    dst = tmp_path / "e.npz"
    for stated in (["--raw", "--keys-are-raw"], ["--averages-only", "--allow-missing"]):
        code, err = _export(out, case, *stated, dst=dst)
        assert code == 0, err
        with np.load(dst) as z:
            for n in CASES[case]:
                assert raw_bytes(z[n]) == raw_bytes(truth[f"{case}:{n}"]), (stated, n)
        dst.unlink()
    if case.startswith("ok"):  # the averages the training graph kept, restored
        bn = case.partition("_")[2]
        for n in CASES[case]:
            assert raw_bytes(truth[f"{case}:{n}"]) == raw_bytes(truth[f"{bn}_ema:{n}"]), n


def test_evaluation_graph_statistic_keys_of_role_other_refused(made, tmp_path):
    """ev_stat: its statistic keys, 'other' by role, get the evaluation graph's refusal;
    --averages-only states them (the raw values restored there, as the file cannot show)."""
    out, truth = made
    dst = tmp_path / "e.npz"
    code, err = _export(out, "ev_stat", "--allow-missing", dst=dst)
    assert code == 6 and not dst.exists(), err
    assert "evaluation graph" in err and "--averages-only" in err, err
    code, err = _export(out, "ev_stat", "--allow-missing", "--averages-only", dst=dst)
    assert code == 0, err
    with np.load(dst) as z:
        for n in STATS:
            assert raw_bytes(z[n]) == raw_bytes(truth[f"ev_stat:{n}"]), n


@pytest.mark.parametrize("case", ["ev_frozen", "ev_metric"])
def test_a_local_metric_average_leaves_an_evaluation_graph_one(made, case, tmp_path):
    """ev_metric reads exactly as ev_frozen: the evaluation graph's refusal naming
    --averages-only (no training graph's reading), --raw refused whatever is stated, and
    --averages-only writes the averages restored, bit for bit (review-26-attack-r93 F1)."""
    out, truth = made
    dst = tmp_path / "e.npz"
    said = {}
    for stated in ([], ["--allow-missing"], ["--raw", "--keys-are-raw"]):
        code, err = _export(out, case, *stated, dst=dst)
        assert code == 6 and not dst.exists(), (stated, err)
        assert "evaluation graph" in err and "assign_moving_average" not in err, err
        assert "loss_avg" not in err and "training graph" not in err, err
        said[" ".join(stated)] = err.replace(case, "CASE")
    assert "--averages-only" in said[""] and "whatever is stated" in said["--raw --keys-are-raw"]
    code, err = _export(out, case, "--averages-only", "--allow-missing", dst=dst)
    assert code == 0, err
    with np.load(dst) as z:
        for n in NAMED["slim"]:
            assert raw_bytes(z[n]) == raw_bytes(truth[f"slim_ema:{n}"]) == raw_bytes(
                truth[f"{case}:{n}"]), n
    if case == "ev_metric":  # word for word ev_frozen's
        for stated, err in said.items():
            code, other = _export(out, "ev_frozen", *stated.split(), dst=dst)
            assert code == 6 and other.replace("ev_frozen", "CASE") == err, stated
