"""Pairing is proven from what TensorFlow recorded, or refused (exit 6) naming the option that
decides: several EMA objects in one checkpoint, a .meta that contradicts the checkpoint, and
averages created under a variable scope. Each checkpoint is made here by real TensorFlow, and the
truth is ``ema.average(v)`` read at save time; values are compared bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import same_bits, tf1_contradicting_meta
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools import EmaError
from ckpt_tools.cli import app

runner = CliRunner()


def _refused_everywhere(path: str, tmp_path, *words: str, extra=()) -> None:
    """map, restore-ema and export exit 6 with ``words`` in the message and write nothing."""
    tmp_path = tmp_path / "refused"
    tmp_path.mkdir(exist_ok=True)
    for argv in (["map", path], ["restore-ema", path, "--out", str(tmp_path / "r")],
                 ["export", path, "--out", str(tmp_path / "w.npz")]):
        result = runner.invoke(app, [*argv, *extra])
        assert result.exit_code == 6, (argv, result.output)
        for word in words:
            assert word in result.output, (argv, word, result.output)
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "r").exists()


def _exported(path: str, tmp_path, *options: str) -> dict[str, np.ndarray]:
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", path, "--out", str(out), "--force", *options])
    assert result.exit_code == 0, result.output
    with np.load(out) as npz:
        return {k: npz[k] for k in npz.files}


def _restored(tf, path: str, tmp_path, *options: str) -> dict[str, np.ndarray]:
    out = tmp_path / "baked"
    result = runner.invoke(app, ["restore-ema", path, "--out", str(out), "--force", *options])
    assert result.exit_code == 0, result.output
    reader = tf.train.load_checkpoint(str(out))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


# -- two EMA objects ------------------------------------------------------------------------

def _tf1_two_emas(tf, directory, names=("fast", "slow"), meta=True) -> tuple[str, dict]:
    """TF1 graph: w and b, averaged by two ExponentialMovingAverage objects (decay 0.5 and 0.9)
    named ``names`` (None: TF's default name, the second silently ``…_1``). Returns the prefix
    and the truth: EMA object -> {variable: ema.average(v) at save time}, keyed by the name TF
    gave that EMA's shadows."""
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("w", [3], initializer=v1.zeros_initializer())
        b = v1.get_variable("b", [2], initializer=v1.ones_initializer())
        emas = [tf.train.ExponentialMovingAverage(d, **({"name": n} if n else {}))
                for d, n in zip((0.5, 0.9), names, strict=True)]
        update = tf.group(*[e.apply([w, b]) for e in emas])
        step = [v1.assign_add(w, tf.ones([3]) * 1.5), v1.assign_add(b, tf.ones([2]) * -2.0)]
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(update)
            prefix = v1.train.Saver().save(sess, str(directory / "model.ckpt"),
                                           write_meta_graph=meta)
            truth = {}
            for e in emas:
                suffix = e.average(w).op.name.rpartition("/")[2]
                truth[suffix] = {"w": sess.run(e.average(w)), "b": sess.run(e.average(b))}
    return prefix, truth


@pytest.mark.parametrize("meta", [True, False], ids=["meta", "no_meta"])
@pytest.mark.parametrize("names", [("fast", "slow"), (None, None)], ids=["named", "default"])
def test_tf1_two_ema_objects_are_refused_until_one_is_named(tf, tmp_path, names, meta):
    prefix, truth = _tf1_two_emas(tf, tmp_path, names, meta)
    suffixes = sorted(truth)
    if names == (None, None):
        assert suffixes == ["ExponentialMovingAverage", "ExponentialMovingAverage_1"]
    # two default-named EMAs are proven EMAs; names given to them are not (optimizers store
    # slots as <weight>/<name> too), so they are offered as the caller's statement, unless the
    # .meta's AssignMovingAvg ops prove them (review-14-attack-r27 F2)
    _refused_everywhere(prefix, tmp_path, "more than one average" if names == (None, None)
                        or meta else
                        "only if that is the name you gave an ExponentialMovingAverage",
                        "--ema-name", *[f"--ema-name {s}" for s in suffixes])
    with pytest.raises(EmaError, match="ema_name"):
        ckpt_tools.ema_map(prefix)
    listing = {v["name"]: v for v in json.loads(
        runner.invoke(app, ["list", prefix, "--json"]).stdout)["variables"]}
    for suffix in suffixes:  # every average is listed as one of w (or b): both are, where
        # their names are TF's default; names given to EMA objects are also how optimizers
        # name slots, so those stay open until --ema-name states them
        row = listing[f"w/{suffix}"]
        assert row["role"] == "ema", row
        proven = names == (None, None) or meta  # or by the .meta's AssignMovingAvg ops
        assert row["ema_of"] == ("w" if proven else None), row
        assert proven or row["ema_candidates"] == ["w"], row
    for suffix, want in truth.items():
        got = _exported(prefix, tmp_path, "--ema-name", suffix)
        assert set(got) == {"w", "b"}
        for var, value in want.items():
            assert same_bits(got[var], value), (suffix, var)
        baked = _restored(tf, prefix, tmp_path, "--ema-name", suffix)
        for var, value in want.items():
            assert same_bits(baked[var], value), (suffix, var)
        m = ckpt_tools.ema_map(prefix, ema_name=suffix)
        assert {s: t for s, t in m.mapping.items() if s != t} == {f"w/{suffix}": "w",
                                                                 f"b/{suffix}": "b"}
    if meta:
        _check_ema_saver_in_imported_graph(tf, prefix, truth)


def _check_ema_saver_in_imported_graph(tf, prefix: str, truth: dict, named=True) -> None:
    """The README's recipe in the graph imported from the training .meta: with ``named``,
    refused without ema_name, and with it each model variable holds that EMA's average
    (``truth``: ema name -> {variable: value}; key None: no ema_name needed)."""
    v1 = tf.compat.v1
    for suffix, want in [(None, None), *truth.items()] if named else truth.items():
        with tf.Graph().as_default():
            v1.train.import_meta_graph(prefix + ".meta")
            if suffix is None and named:
                with pytest.raises(EmaError, match="--ema-name"):
                    ckpt_tools.ema_saver(checkpoint=prefix)
                continue
            saver = ckpt_tools.ema_saver(checkpoint=prefix, ema_name=suffix)
            by_name = {v.op.name: v for v in v1.global_variables()}
            with v1.Session() as sess:
                saver.restore(sess, prefix)
                for var, value in want.items():
                    assert same_bits(sess.run(by_name[var]), value), (suffix, var)


@pytest.mark.parametrize("earlier", [0, 2])
def test_tf2_named_variable_with_two_lists_of_averages(tf, tmp_path, earlier):
    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.zeros([3]), name="w")
            self.b = tf.Variable(tf.ones([2]), name="b")

    for _ in range(earlier):  # averages of same-named variables made earlier in the process:
        # TF's counter then starts past 0 and no average is named plain ExponentialMovingAverage
        tf.train.ExponentialMovingAverage(0.5).apply([tf.Variable(tf.zeros([1]), name="w"),
                                                      tf.Variable(tf.zeros([1]), name="b")])
    m = M()
    fast, slow = tf.train.ExponentialMovingAverage(0.5), tf.train.ExponentialMovingAverage(0.9)
    for i in range(3):
        m.w.assign_add(tf.ones([3]) * (i + 1.5))
        m.b.assign_add(tf.ones([2]) * -(i + 0.5))
        fast.apply([m.w, m.b])
        slow.apply([m.w, m.b])
    prefix = tf.train.Checkpoint(model=m, fast=[fast.average(m.w), fast.average(m.b)],
                                 slow=[slow.average(m.w), slow.average(m.b)]).save(
        str(tmp_path / "ckpt"))
    # Both are default-named: TF numbers their averages w/ExponentialMovingAverage, …_1 with a
    # counter of the whole process, so only the attribute they were saved under tells them apart
    truth = {holder: {"model/w": e.average(m.w).numpy(), "model/b": e.average(m.b).numpy()}
             for holder, e in (("fast", fast), ("slow", slow))}
    _refused_everywhere(prefix, tmp_path, "more than one average", "fast/0", "slow/0",
                        "--ema-name fast or --ema-name slow")
    recorded = fast.average(m.w).name.split(":")[0].rpartition("/")[2]
    for name in ("ExponentialMovingAverage", recorded):  # a counter never picks one
        _refused_everywhere(prefix, tmp_path, "does not pick one", extra=("--ema-name", name))
    for holder, want in truth.items():
        got = _exported(prefix, tmp_path, "--ema-name", holder)
        for var, value in want.items():
            assert same_bits(got[var], value), (holder, var)
        model = M()
        ckpt_tools.apply_ema(model, prefix, ema_name=holder)
        assert same_bits(model.w.numpy(), want["model/w"])
        assert same_bits(model.b.numpy(), want["model/b"])
    with pytest.raises(EmaError, match="ema_name"):
        ckpt_tools.apply_ema(M(), prefix)


# -- a .meta from another graph ---------------------------------------------------------------

def test_meta_from_another_graph_that_does_not_average_a_stored_average_is_refused(tf, tmp_path):
    """The checkpoint holds b's average; the .meta beside it (same names) comes from a graph
    where b is neither trainable nor averaged. Following it would restore b raw: refused, and
    --no-meta uses the stored averages."""
    prefix, recorded = tf1_contradicting_meta(tf, tmp_path)
    truth = {v: recorded["values"][a] for a, v in recorded["ema_of"].items()}
    _refused_everywhere(prefix, tmp_path, "does not average", "b/ExponentialMovingAverage",
                        "--no-meta")
    with pytest.raises(EmaError, match="use_meta=False"):
        ckpt_tools.ema_map(prefix)
    got = _exported(prefix, tmp_path, "--no-meta")
    baked = _restored(tf, prefix, tmp_path, "--no-meta")
    for var, value in truth.items():
        assert same_bits(got[var], value) and same_bits(baked[var], value), var
    m = ckpt_tools.ema_map(prefix, use_meta=False)
    assert {s: t for s, t in m.mapping.items() if s != t} == {
        "w/ExponentialMovingAverage": "w", "b/ExponentialMovingAverage": "b"}


# -- ema.apply() under a variable_scope -------------------------------------------------------

def test_tf1_averages_made_under_a_variable_scope(tf, tmp_path):
    """ema.apply() inside variable_scope("ema_scope") names the shadows
    ema_scope/w/ExponentialMovingAverage. The training .meta proves the pairing (w is in
    moving_average_variables, the shadow is its only candidate); without it, refused."""
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("w", [3], initializer=v1.zeros_initializer())
        b = v1.get_variable("layer/b", [2], initializer=v1.zeros_initializer())
        ema = tf.train.ExponentialMovingAverage(0.5)
        with v1.variable_scope("ema_scope"):
            update = ema.apply([w, b])
        step = [v1.assign_add(w, tf.ones([3]) * 2.0), v1.assign_add(b, tf.ones([2]) * 5.0)]
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(update)
            prefix = v1.train.Saver().save(sess, str(tmp_path / "model.ckpt"))
            truth = {"w": sess.run(ema.average(w)), "layer/b": sess.run(ema.average(b))}
            shadows = {"w": ema.average(w).op.name, "layer/b": ema.average(b).op.name}
    assert shadows == {"w": "ema_scope/w/ExponentialMovingAverage",
                       "layer/b": "ema_scope/layer/b/ExponentialMovingAverage"}
    listing = {v["name"]: v for v in json.loads(
        runner.invoke(app, ["list", prefix, "--json"]).stdout)["variables"]}
    for var, shadow in shadows.items():
        assert listing[shadow]["role"] == "ema" and listing[shadow]["ema_of"] == var
    got = _exported(prefix, tmp_path)
    baked = _restored(tf, prefix, tmp_path)
    for var, value in truth.items():
        assert same_bits(got[var], value) and same_bits(baked[var], value), var
    _check_ema_saver_in_imported_graph(tf, prefix, {None: truth}, named=False)
    # Without the .meta the name could also be a tensor's average: refused, naming the shadows
    (tmp_path / "model.ckpt.meta").unlink()
    _refused_everywhere(prefix, tmp_path, "stored under a scope",
                        "ema_scope/w/ExponentialMovingAverage may average w", ".meta")
    listing = {v["name"]: v for v in json.loads(
        runner.invoke(app, ["list", prefix, "--json"]).stdout)["variables"]}
    for var, shadow in shadows.items():
        assert listing[shadow]["role"] == "ema" and listing[shadow]["ema_of"] is None
        assert listing[shadow]["ema_candidates"] == [var]


def test_scoped_refusal_with_the_meta_does_not_ask_for_the_meta(tf, tmp_path):
    """model/dense/kernel and dense/kernel averaged inside variable_scope("model"): by name the
    shadow model/dense/kernel/ExponentialMovingAverage may be either's. The training .meta's
    update ops prove each one's variable, as ema.average(v) says (review-12-attack-r19 F5); a
    .meta that records the averaged variables but no update op (an eval graph's) does not
    settle it: refused without asking to keep a .meta that is there (review-11-attack-r8
    m1)."""
    v1 = tf.compat.v1
    names = ("model/dense/kernel", "dense/kernel")
    with tf.Graph().as_default():
        k1 = v1.get_variable(names[0], [4, 4], initializer=v1.ones_initializer())
        k2 = v1.get_variable(names[1], [4, 4], initializer=v1.zeros_initializer())
        ema = tf.train.ExponentialMovingAverage(0.5)
        with v1.variable_scope("model"):
            update = ema.apply([k1, k2])
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            sess.run([v1.assign_add(k1, tf.ones([4, 4])), v1.assign_add(k2, tf.ones([4, 4]))])
            sess.run(update)
            prefix = v1.train.Saver().save(sess, str(tmp_path / "model.ckpt"))
            shadows = {k.op.name: ema.average(k).op.name for k in (k1, k2)}
            truth = {k.op.name: sess.run(ema.average(k)) for k in (k1, k2)}
    result = runner.invoke(app, ["map", prefix, "--non-averaged", "drop", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {s: v for v, s in shadows.items()}
    got = _exported(prefix, tmp_path)
    for var, value in truth.items():
        assert same_bits(got[var], value), var
    with tf.Graph().as_default():  # the same variables and collection, no update op
        made = [v1.get_variable(n, [4, 4]) for n in names]
        for var in made:
            v1.add_to_collection(v1.GraphKeys.MOVING_AVERAGE_VARIABLES, var)
        for shadow in shadows.values():
            v1.get_variable(shadow, [4, 4], trainable=False)
        v1.train.Saver().export_meta_graph(prefix + ".meta")
    result = runner.invoke(app, ["map", prefix])
    assert result.exit_code == 6, result.output
    assert "the .meta graph does not settle it" in result.output, result.output
    assert "keep the training .meta" not in result.output, result.output


@pytest.mark.parametrize("meta", [True, False], ids=["meta", "no_meta"])
def test_a_scoped_shadow_named_like_another_variable_is_never_read_by_name(tf, tmp_path,
                                                                            meta):
    """ema.apply([W]) inside variable_scope("model") beside a stored model/W: TF names W's
    shadow model/W/ExponentialMovingAverage, which reads by name as model/W's. The .meta's
    moving_average_variables (W only) proves it is W's; without it both readings stay open
    and every command refuses (review-11-attack-r9 F1)."""
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("W", [3], initializer=v1.zeros_initializer())
        v1.get_variable("model/W", [3], initializer=v1.ones_initializer(), trainable=False)
        ema = tf.train.ExponentialMovingAverage(0.5)
        with v1.variable_scope("model"):
            update = ema.apply([w])
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(v1.assign_add(w, tf.ones([3]) * 2.0))
                sess.run(update)
            prefix = v1.train.Saver().save(sess, str(tmp_path / "model.ckpt"),
                                           write_meta_graph=meta)
            assert ema.average(w).op.name == "model/W/ExponentialMovingAverage"
            truth = sess.run(ema.average(w))
    if meta:
        got = _exported(prefix, tmp_path)
        assert same_bits(got["W"], truth)
        assert "model/W" not in got or not same_bits(got["model/W"], truth)
    else:
        _refused_everywhere(prefix, tmp_path, "may average W or model/W")


def test_an_average_under_another_ema_name_is_not_called_missing(tf, tmp_path):
    """W averaged by an EMA named wavg, b by a default-named one: --ema-name wavg leaves b
    without a wavg average, and the refusal says b's average is stored under the other name
    instead of that b was left out of ema.apply() (review-11-attack-r9 F5)."""
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("W", [3], initializer=v1.zeros_initializer())
        b = v1.get_variable("b", [2], initializer=v1.zeros_initializer())
        update = tf.group(tf.train.ExponentialMovingAverage(0.5, name="wavg").apply([w]),
                          tf.train.ExponentialMovingAverage(0.7).apply([b]))
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            sess.run([v1.assign_add(w, tf.ones([3])), v1.assign_add(b, tf.ones([2]))])
            sess.run(update)
            prefix = v1.train.Saver().save(sess, str(tmp_path / "model.ckpt"))
    result = runner.invoke(app, ["export", prefix, "--ema-name", "wavg", "--out",
                                 str(tmp_path / "w.npz")])
    assert result.exit_code == 6, result.output
    assert "b has b/ExponentialMovingAverage" in result.output, result.output
    assert "left out of its var_list" not in result.output, result.output


def test_a_scoped_variable_named_like_a_top_level_one_both_averaged(tf, tmp_path):
    """TF1 `W` and `tower_0/W` (same shape), one default-named EMA over both outside any
    scope: `tower_0/W/ExponentialMovingAverage` reads as `tower_0/W`'s or as `W`'s second
    average made under `variable_scope("tower_0")`. The .meta settles it: both variables are
    in moving_average_variables, `W` has its own shadow, and no graph variable but this one can
    be `tower_0/W`'s (review-11-attack-r10 F20: refused with no option that decides)."""
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("W", [3, 3])
        with v1.variable_scope("tower_0"):
            w0 = v1.get_variable("W", [3, 3])
        ema = tf.train.ExponentialMovingAverage(0.5)
        update = ema.apply([w, w0])
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for i in range(3):
                sess.run([v1.assign_add(w, tf.fill([3, 3], 1.0 + i)),
                          v1.assign_add(w0, tf.fill([3, 3], -2.0 - i))])
                sess.run(update)
            truth = {"W": sess.run(ema.average(w)), "tower_0/W": sess.run(ema.average(w0))}
            prefix = v1.train.Saver().save(sess, str(tmp_path / "model.ckpt"))
    got = _exported(prefix, tmp_path)
    assert sorted(got) == sorted(truth)
    for name, value in truth.items():
        assert same_bits(got[name], value), name
