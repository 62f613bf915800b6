"""A swapping Saver's sibling ``.meta`` whose save op reads the keys otherwise than their names in
ways a role comparison passed over (review-25-attack-r87 F1, r83 F12): an
``ExponentialMovingAverage(0.9, name="avg")`` applied inside ``variable_scope("model")`` (its
shadows ``model/model/<v>/avg``) and a Saver of the averages alone under the variables' names
(``{v.op.name: ema.average(v)}``), with or without the ``model/`` scope. The checkpoint saved
without its own ``.meta`` next to ``model.ckpt-1.meta`` of the same run: ``export --raw`` wrote
the averages as the raw weights, exit 0 (nothing paired by names, so nothing was refused).
Also per-epoch names (``model_epoch_3.ckpt`` beside ``model_epoch_1.ckpt.meta``), whose stems
differ only in their digits. Truth: ``sess.run`` of ``ema.average(v)`` and ``v`` at the last
save."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
def run(name, kind, epochs=False):
    d = f"{out}/{name}"
    os.makedirs(d)
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        with tf1.variable_scope("model"):
            w = tf1.get_variable("w", [3, 2])
            b = tf1.get_variable("b", [2], initializer=tf1.constant_initializer(0.3))
            loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([4, 3]), w) + b - 1.0))
            train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
            # "avg" applied in the scope: the shadows are model/model/<v>/avg (default: outside)
            ema = tf1.train.ExponentialMovingAverage(0.9, name="avg") if kind.startswith(
                ("swap_", "plain_avg")) else None
            if kind == "plain_avg":  # applied in the scope too: model/model/<v>/avg (r90 F5)
                with tf.control_dependencies([train]):
                    step = ema.apply(tf1.trainable_variables())
        if ema is None:
            ema = tf1.train.ExponentialMovingAverage(0.9)
        if kind != "plain_avg":
            with tf.control_dependencies([train]):
                step = ema.apply(tf1.trainable_variables())
        tv = tf1.trainable_variables()
        if kind == "swap_strip":  # the averages alone, under the names without model/
            keys = {v.op.name[len("model/"):]: ema.average(v) for v in tv}
        elif kind == "swap_avg":  # the averages alone, under the variables' names
            keys = {v.op.name: ema.average(v) for v in tv}
        elif kind == "swap":  # a default EMA's swapping Saver, both ways
            keys = {v.op.name: ema.average(v) for v in tv}
            keys.update({ema.average_name(v): v for v in tv})
        elif kind == "plain_avg":  # a default Saver() of every variable (r90 F5)
            keys = None
        else:  # plain_strip: every variable under its name without model/
            keys = {v.op.name[len("model/"):]: v for v in tf1.global_variables()
                    if v.op.name.startswith("model/")}
        if keys is not None:
            keys["global_step"] = gs
        saver = tf1.train.Saver(keys, max_to_keep=None)
        with trained(tf, step, 0) as s:
            for i in (1, 2, 3):
                s.run(step)
                if epochs:  # a Keras-style per-epoch name, the graph written once
                    saver.save(s, f"{d}/model_epoch_{i}.ckpt", write_meta_graph=i == 1)
                else:
                    saver.save(s, f"{d}/model.ckpt", global_step=i, write_meta_graph=i == 1)
                for v in tv:  # each save's averages and raw weights (average's truth)
                    truth[f"{name}:avg{i}:{v.op.name}"] = s.run(ema.average(v))
                    truth[f"{name}:raw{i}:{v.op.name}"] = s.run(v)
            for v in tv:
                truth[f"{name}:avg:{v.op.name}"] = s.run(ema.average(v))
                truth[f"{name}:raw:{v.op.name}"] = s.run(v)


run("swap_strip", "swap_strip")
run("swap_avg", "swap_avg")
run("plain_strip", "plain_strip")
run("plain_avg", "plain_avg")
run("swap_epochs", "swap", epochs=True)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("meta_sibling_scoped_swap")
    return out, run_tf1_script(SCRIPT, out)


def _values(made, path, name: str, kind: str) -> None:
    """Asserts the export at ``path`` holds ``name``'s ``kind`` values bit for bit, under the
    keys as stored (``w``, ``b``, with or without ``model/``)."""
    truth = made[1]
    other = "raw" if kind == "avg" else "avg"
    with np.load(path) as npz:
        for n in ("model/w", "model/b"):
            got = npz[n] if n in npz.files else npz[n[len("model/"):]]
            assert got.tobytes() == truth[f"{name}:{kind}:{n}"].tobytes(), n
            assert not np.array_equal(got, truth[f"{name}:{other}:{n}"]), n


@pytest.mark.parametrize("name", ["swap_strip", "swap_avg"])
def test_raw_beside_a_swapping_sibling_refuses(made, tmp_path, name):
    """F1 (swap_strip: a key w read from model/model/w/avg, after model/ is dropped, was taken
    as agreeing) and F12 (swap_avg: the doubt was seen, but nothing paired by names, so --raw
    went through): --raw exported the averages as the raw weights, exit 0. Refused naming the
    graph and --raw --no-meta, which writes the keys as stored (the averages, bit for bit).
    The default export's refusal said "the raw weights are usable as they are (ckpt export
    --raw writes them)" for swap_avg, and the usage error of --raw --not-swapped sent the user
    to "--raw alone", both refused here: each names --raw --no-meta (review-26-attack-r90 F3,
    F6)."""
    out, _ = made
    ckpt, npz = os.path.join(out, name, "model.ckpt-3"), tmp_path / "w.npz"
    code, _, err = run_cli(["export", ckpt, "--out", str(npz), "--raw"])
    assert code == 6, err
    assert "model.ckpt-1.meta" in err and "--raw" in err and "--no-meta" in err, err
    assert "--not-swapped" in err, err
    assert not npz.exists()
    code, _, err = run_cli(["export", ckpt, "--out", str(npz)])
    assert code == 6 and "model.ckpt-1.meta" in err, err
    assert "usable as they are" not in err and "--raw --no-meta" in err, err
    assert not npz.exists()
    code, _, err = run_cli(["export", ckpt, "--out", str(npz), "--raw", "--not-swapped"])
    assert code == 2 and "--raw --no-meta" in err, err
    assert not npz.exists()
    code, _, err = run_cli(["export", ckpt, "--out", str(npz), "--raw", "--no-meta"])
    assert code == 0, err
    _values(made, npz, name, "avg")


def test_a_plain_saver_stripping_the_scope_still_exports(made, tmp_path):
    """The nearest twin: a plain Saver keying every variable without model/ (w from model/w,
    w/ExponentialMovingAverage from model/w/ExponentialMovingAverage) agrees with the names:
    no note, the averages by names and --raw's raw weights, bit for bit."""
    out, _ = made
    ckpt, npz = os.path.join(out, "plain_strip", "model.ckpt-3"), tmp_path / "w.npz"
    code, _, err = run_cli(["export", ckpt, "--out", str(npz)])
    assert code == 0, err
    assert ".meta" not in err, err
    _values(made, npz, "plain_strip", "avg")
    code, _, err = run_cli(["export", ckpt, "--out", str(npz), "--raw", "--force"])
    assert code == 0, err
    _values(made, npz, "plain_strip", "raw")


def test_a_plain_run_averaging_in_the_scope_names_the_sibling(made, tmp_path):
    """A default Saver() run whose ExponentialMovingAverage(name='avg') is applied inside
    variable_scope('model') (shadows model/model/<v>/avg), model.ckpt-3 saved without a .meta
    beside model.ckpt-1.meta: the refusal said "keep the training .meta (model.ckpt.meta ...)
    beside the checkpoint" while model.ckpt-1.meta was there. It names that file as another
    checkpoint's graph, not read for this one; --raw writes the raw weights bit for bit
    (review-26-attack-r90 F5: the message made true; no pairing through the sibling)."""
    out, _ = made
    ckpt, npz = os.path.join(out, "plain_avg", "model.ckpt-3"), tmp_path / "w.npz"
    for args in ([], ["--ema-name", "avg"]):
        code, _, err = run_cli(["export", ckpt, "--out", str(npz), *args])
        assert code == 6 and "model.ckpt-1.meta beside it" in err, err
        assert "keep the training .meta" not in err, err
        assert not npz.exists()
    code, _, err = run_cli(["export", ckpt, "--out", str(npz), "--raw"])
    assert code == 0, err
    _values(made, npz, "plain_avg", "raw")


def test_per_epoch_names_are_siblings(made, tmp_path):
    """model_epoch_3.ckpt, saved without a .meta beside model_epoch_1.ckpt.meta of the same
    swapping run, was paired by names: the raw weights exported as the averages, exit 0.
    Stems differing only in their digits are read as siblings: refused, naming the graph; the
    keys as stored (--raw --no-meta) are the averages."""
    out, _ = made
    ckpt = os.path.join(out, "swap_epochs", "model_epoch_3.ckpt")
    npz = tmp_path / "w.npz"
    for raw in ([], ["--raw"]):
        code, _, err = run_cli(["export", ckpt, "--out", str(npz), *raw])
        assert code == 6 and "model_epoch_1.ckpt.meta" in err and "--no-meta" in err, err
        assert not npz.exists()
    code, _, err = run_cli(["export", ckpt, "--out", str(npz), "--raw", "--no-meta"])
    assert code == 0, err
    with np.load(npz) as got:
        for n in ("model/w", "model/b"):
            assert got[n].tobytes() == made[1][f"swap_epochs:avg:{n}"].tobytes(), n


@pytest.mark.parametrize("name, stem, graph", [
    ("swap_strip", "model.ckpt-", "model.ckpt-1.meta"),
    ("swap_epochs", "model_epoch_", "model_epoch_1.ckpt.meta")])
@pytest.mark.parametrize("out_name", [None, "averaged"])
def test_average_carries_the_doubt(made, tmp_path, name, stem, graph, out_name):
    """review-25-attack-r87 F3: a swapping run's meta-less checkpoints could not be averaged at
    all. The plain average now copies the doubting graph beside its output, under a name read
    as another checkpoint's of the output's prefix (its own, or <name>-N.meta under --name), so
    the output is doubted as its inputs: export by names and --raw are refused naming the copy,
    and --raw --no-meta writes the keys as stored, the mean of the averages TF held at steps 2
    and 3. --ema (the keys named as shadows) stays refused, writing nothing."""
    out, truth = made
    suffix = ".ckpt" if name == "swap_epochs" else ""
    inputs = [os.path.join(out, name, f"{stem}{i}{suffix}") for i in (3, 2)]
    avg = tmp_path / "avg"
    named = ["--name", out_name] if out_name else []
    code, _, err = run_cli(["average", *inputs, "--out", str(tmp_path / "ema"), "--ema"])
    assert code == 6 and graph in err, err
    assert not (tmp_path / "ema").exists()
    code, _, err = run_cli(["average", *inputs, "--out", str(avg), *named])
    assert code == 0, err
    copy = f"{out_name}-1.meta" if out_name else graph
    assert copy in err and (avg / copy).is_file(), (err, sorted(os.listdir(avg)))
    prefix = str(avg / (out_name or os.path.basename(inputs[0])))
    npz = tmp_path / "w.npz"
    for raw in ([], ["--raw"]):
        code, _, err = run_cli(["export", prefix, "--out", str(npz), *raw])
        assert code == 6 and copy in err, err
        assert "--no-meta" in err or not raw and name == "swap_strip", err  # no shadow named
        assert not npz.exists()
    code, _, err = run_cli(["export", prefix, "--out", str(npz), "--raw", "--no-meta"])
    assert code == 0, err
    with np.load(npz) as got:
        for n in ("model/w", "model/b"):
            key = n if n in got.files else n[len("model/"):]
            want = np.mean([truth[f"{name}:avg{i}:{n}"].astype(np.float64) for i in (2, 3)], 0)
            raw = np.mean([truth[f"{name}:raw{i}:{n}"].astype(np.float64) for i in (2, 3)], 0)
            np.testing.assert_allclose(got[key], want, rtol=1e-6, atol=0)
            assert not np.allclose(got[key], raw, rtol=1e-6, atol=0), n
