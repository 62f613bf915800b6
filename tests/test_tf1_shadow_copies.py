"""TF1 with its ``.meta``: writes that copy a value into ``ema.apply()``'s own shadow leave it
``ema.average(W)`` (review-18-attack-r41 F2, MAJOR).

The writer rule (review-17-attack-r38 F9) read a key as ``W``'s average only where nothing but
``apply()``'s ``AssignMovingAvg`` update from ``W`` writes it, so common graphs were refused
(exit 6, "a tensor kept by hand") with only ``--raw``/``--allow-missing`` offered:

- a reset of the averages to the weights, ``tf1.assign(ema.average(w), w)``;
- swap-for-eval ops (``W <- shadow``, ``shadow <- W``, run and run back), directly or through a
  backup variable (``tmp <- W; W <- shadow; shadow <- tmp``);
- a tf_slim warm start of every variable, the shadows too: ``assign_from_checkpoint`` assigns
  each from a ``Placeholder`` fed with the stored value (``assign_from_checkpoint_fn`` restores
  through a Saver, which was read as a restore already).

These pair now, ref and resource variables, with TF's values. A copy the graph cannot prove
(a fed value or a copy of ``W`` into a key no ``apply()`` update averages ``W`` into) is still
refused, naming ``--no-meta``, which reads it by its name; a gradient's moment assigned into
``apply()``'s shadow is still a tensor kept by hand (no ``--no-meta`` offered). ``ema_saver``
honours ``use_meta=False``.

Made by real TensorFlow (and tf_slim) in a subprocess; truth ``sess.run(ema.average(v))`` and
every variable's value at save time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import EmaError

SCRIPT = r'''
case = sys.argv[2]
E = tf1.train.ExponentialMovingAverage
res = not case.startswith("ref")
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]), use_resource=res)
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]), use_resource=res)
step = tf1.assign_add(w0, tf.ones([3, 2]) * 0.7), tf1.assign_add(w1, tf.ones([2]) * 1.3)
ema = E(0.9)
feed = None
if case in ("fed", "copied"):  # w0/<EMA> kept by hand from a feed or a copy of w0; apply([w1])
    with tf1.variable_scope("w0"):
        m = tf1.get_variable(E.__name__, initializer=tf.zeros([3, 2]), trainable=False,
                             use_resource=res)
    feed = tf1.placeholder(tf.float32, [3, 2])
    with tf.control_dependencies(step):
        upd = tf.group(ema.apply([w1]), tf1.assign(m, feed if case == "fed" else w0))
else:
    with tf.control_dependencies(step):
        upd = ema.apply([w0, w1])
pair = [(w, ema.average(w)) for w in (w0, w1) if ema.average(w) is not None]
extra = None
if case.endswith("reset"):  # (a) the averages reset to the weights
    extra = tf.group(*[tf1.assign(s, w) for w, s in pair])
elif case.endswith("swap"):  # (b) W <-> its shadow for eval, run twice
    vals = [(w.read_value() if res else tf.identity(w), s.read_value() if res else tf.identity(s))
            for w, s in pair]
    with tf.control_dependencies([t for p in vals for t in p]):
        extra = tf.group(*[op for (w, s), (vw, vs) in zip(pair, vals)
                           for op in (tf1.assign(w, vs), tf1.assign(s, vw))])
elif case.endswith("tmp"):  # (b) through a backup variable: tmp <- W; W <- S; S <- tmp
    ops = []
    for w, s in pair:
        tmp = tf1.get_variable(f"swap/{w.op.name}", initializer=tf.zeros(w.shape),
                               trainable=False, use_resource=res)
        a = tf1.assign(tmp, w)
        with tf.control_dependencies([a]):
            b = tf1.assign(w, s)
        with tf.control_dependencies([b]):
            ops.append(tf1.assign(s, tmp))
    extra = tf.group(*ops)
elif case == "hand":  # a gradient's moment assigned into apply()'s shadow of w0
    g0 = tf.gradients(tf.reduce_sum(tf.square(w0)), [w0])[0]
    s0 = ema.average(w0)
    extra = tf1.assign(s0, 0.9 * s0 + 0.1 * g0)
saver = tf1.train.Saver()
if "slim" in case:  # (c) a warm start of every variable, the shadows too
    import tf_slim as slim
    os.makedirs(f"{out}/first")
    first = f"{out}/first/model.ckpt"
    if case == "slim_fn":
        warm = slim.assign_from_checkpoint_fn(first, tf1.global_variables())
with tf1.Session() as s:
    s.run(tf1.variables_initializer([w0, w1]))
    s.run(tf1.global_variables_initializer())
    for i in range(3):
        s.run(upd, {feed: np.full([3, 2], 2.5 + i, np.float32)} if feed is not None else None)
    if extra is not None:
        s.run(extra)
        if case.endswith(("swap", "tmp")):
            s.run(extra)  # swapped back after eval
        s.run(upd)
    if "slim" in case:
        saver.save(s, first)
        s.run(tf1.global_variables_initializer())
        if case == "slim_fn":
            warm(s)
        else:
            op, fed = slim.assign_from_checkpoint(first, tf1.global_variables())
            s.run(op, fed)
        s.run(upd)
    for w, _s in pair:
        truth[f"ema:{w.op.name}"] = s.run(ema.average(w))
    for v in tf1.global_variables():
        truth[f"raw:{v.op.name}"] = s.run(v)
    saver.save(s, f"{out}/model.ckpt")
'''

E = "ExponentialMovingAverage"
KEPT = ("reset", "ref_reset", "swap", "ref_swap", "tmp", "ref_tmp", "slim", "ref_slim",
        "slim_fn")
UNPROVEN = ("fed", "copied")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_shadow_copies")
    return out, {c: run_tf1_script(SCRIPT, out / c, c) for c in (*KEPT, *UNPROVEN, "hand")}


@pytest.mark.parametrize("case", KEPT)
def test_a_copy_into_apply_s_shadow_leaves_it_the_average(made, tmp_path, tf, case):
    out, truths = made
    truth, run, dest = truths[case], out / case, tmp_path / "x.npz"
    for n in ("w0", "w1"):  # TF's average is the shadow, and no raw weight
        assert truth[f"ema:{n}"].tobytes() == truth[f"raw:{n}/{E}"].tobytes(), n
        assert truth[f"ema:{n}"].tobytes() != truth[f"raw:{n}"].tobytes(), n
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        for n in ("w0", "w1"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
    code, text, err = run_cli(["list", str(run), "--json"])
    assert code == 0, err
    rows = {v["key"]: v for v in json.loads(text)["variables"]}
    assert rows[f"w0/{E}"]["ema_of"] == "w0" and rows[f"w1/{E}"]["ema_of"] == "w1", rows
    m = ckpt_tools.ema_map(str(run))
    assert not m.missing and m.mapping[f"w0/{E}"] == "w0", m
    code, _, err = run_cli(["restore-ema", str(run), "--out", str(tmp_path / "r")])
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(tmp_path / "r"))
    for n in ("w0", "w1"):
        assert reader.get_tensor(n).tobytes() == truth[f"ema:{n}"].tobytes(), n


@pytest.mark.parametrize("case", UNPROVEN)
def test_an_unproven_copy_is_refused_naming_no_meta(made, tmp_path, case):
    """A fed value (or a copy of ``w0``) written into ``w0/ExponentialMovingAverage``, which no
    ``apply()`` update averages ``w0`` into: TF's ``ema.average(w0)`` is ``None``, and the
    graph cannot tell what the key holds. The refusal names ``--no-meta``, which reads the key
    by its name."""
    out, truths = made
    truth, run, dest = truths[case], out / case, tmp_path / "x.npz"
    assert "ema:w0" not in truth and "ema:w1" in truth
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(dest)])
    assert code == 6, err
    assert f"w0/{E} is no proven average of w0" in err and "--no-meta" in err, err
    assert "kept by hand" not in err, err
    assert not dest.exists()
    code, _, err = run_cli(["export", str(run), "--strict", "--no-meta", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:  # the name's reading, as the refusal said
        assert got["w0"].tobytes() == truth[f"raw:w0/{E}"].tobytes()
        assert got["w1"].tobytes() == truth["ema:w1"].tobytes()


def test_a_moment_kept_by_hand_in_apply_s_shadow_is_still_refused(made, tmp_path):
    """``apply()`` averages ``w0`` into its shadow, and a gradient's moment is assigned into it
    too (``s = 0.9 * s + 0.1 * grad``): a tensor kept by hand, no copy; ``--no-meta`` is not
    offered."""
    out, truths = made
    run, dest = out / "hand", tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(dest)])
    assert code == 6, err
    assert f"w0/{E} is no proven average of w0" in err and "kept by hand" in err, err
    assert "--no-meta" not in err and "--allow-missing" in err, err
    assert not dest.exists()


@pytest.mark.parametrize("case", ["fed", "slim"])
def test_ema_saver_honours_use_meta(made, tf, case):
    """``ema_saver(checkpoint=, use_meta=False)`` pairs by the keys (it was passed on to
    ``Saver`` and failed); with the ``.meta`` read, the unproven copy is refused and the copies
    into ``apply()``'s shadows restore TF's averages."""
    out, truths = made
    truth, prefix = truths[case], str(out / case / "model.ckpt")
    v1 = tf.compat.v1
    want = {"w0": truth.get("ema:w0", truth[f"raw:w0/{E}"]), "w1": truth["ema:w1"]}
    for use_meta in (True, False):
        with tf.Graph().as_default():
            v1.train.import_meta_graph(prefix + ".meta")
            by_name = {v.op.name: v for v in v1.global_variables()}
            if case == "fed" and use_meta:
                with pytest.raises(EmaError, match="use_meta=False") as refused:
                    ckpt_tools.ema_saver(checkpoint=prefix, use_meta=use_meta)
                assert f"w0/{E} is no proven average of w0" in str(refused.value)
                continue
            saver = ckpt_tools.ema_saver(checkpoint=prefix, use_meta=use_meta)
            with v1.Session() as sess:
                saver.restore(sess, prefix)
                for n, value in want.items():
                    assert sess.run(by_name[n]).tobytes() == value.tobytes(), (n, use_meta)
