"""``--strip-scope`` / ``strip_scope=`` is a scope, never a bare string prefix
(review-17-attack-r36 F5): ``tower_0`` is read as ``tower_0/`` (``tower_0/w`` -> ``w``, never
``/w``), and a variable named as the scope itself (``w0``, whose shadow is
``w0/ExponentialMovingAverage``) would be left with the empty name: refused, exit 3, naming
it -- ``restore-ema`` died with an internal error (exit 70) and ``map`` showed empty names and
names starting with ``/`` with exit 0. Truth: ``sess.run(ema.average(v))`` recorded by
TensorFlow at save time."""

from __future__ import annotations

import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools

SCRIPT = r'''
with tf.Graph().as_default():
    with tf1.variable_scope("tower_0"):
        w = tf1.get_variable("w", [3], initializer=tf1.ones_initializer())
        b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer())
    w0 = tf1.get_variable("w0", [2], initializer=tf1.ones_initializer())
    loss = (tf.reduce_sum(tf.square(w - 3.0)) + tf.reduce_sum(tf.square(b + 1.0))
            + tf.reduce_sum(tf.square(w0 - 2.0)))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        step = ema.apply([w, b, w0])
    with trained(tf, step) as s:
        tf1.train.Saver().save(s, f"{out}/model.ckpt")
        for v in (w, b, w0):
            truth[v.op.name] = s.run(ema.average(v))
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("strip_scope_bounds")
    return str(out / "model.ckpt"), run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("prefix", ["w0", "w0/"])
@pytest.mark.parametrize("command", ["map", "restore-ema"])
def test_a_scope_that_is_a_variable_name_is_refused(made, tmp_path, command, prefix):
    ckpt, _ = made
    out = ["--out", str(tmp_path / "r" / "m.ckpt")] if command == "restore-ema" else []
    code, _, err = run_cli([command, ckpt, *out, "--strip-scope", prefix])
    assert code == 3, err
    assert "would leave w0 with an empty name" in err
    assert not (tmp_path / "r").exists()


def test_a_scope_without_its_slash_strips_whole_scopes(made, tmp_path, tf):
    ckpt, truth = made
    code, out, err = run_cli(["map", ckpt, "--strip-scope", "tower_0"])
    assert code == 0, err
    assert "/w" not in out.replace("tower_0/w", "")
    code, _, err = run_cli(["restore-ema", ckpt, "--out", str(tmp_path / "r" / "m.ckpt"),
                            "--strip-scope", "tower_0"])
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(tmp_path / "r" / "m.ckpt"))
    for name in ("w", "b"):
        assert reader.get_tensor(name).tobytes() == truth[f"tower_0/{name}"].tobytes(), name
    assert reader.get_tensor("w0").tobytes() == truth["w0"].tobytes()


def test_ema_saver_reads_the_scope_without_its_slash(made, tf):
    ckpt, truth = made
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        made_vars = {n: v1.get_variable(n, truth[f"tower_0/{n}"].shape) for n in ("w", "b")}
        saver = ckpt_tools.ema_saver(list(made_vars.values()), checkpoint=ckpt,
                                     strip_scope="tower_0")
        with v1.Session() as sess:
            saver.restore(sess, ckpt)
            for n, var in made_vars.items():
                assert sess.run(var).tobytes() == truth[f"tower_0/{n}"].tobytes(), n


def test_restore_ema_of_a_tf2_checkpoint_refuses_a_scope(tmp_path, tf):
    """A TF2 checkpoint's object graph names every key it restores: restore-ema wrote the keys
    re-scoped under the old object graph, exit 0, and tf.train.Checkpoint.read of the output
    failed (review-17-attack-r38 F7). Refused (exit 5), nothing written."""
    net = tf.Module()
    net.u = tf.Variable(tf.ones([2]), name="u")
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply([net.u])
    tf.train.Checkpoint(net=net, ema=[ema.average(net.u)]).write(str(tmp_path / "in" / "ckpt"))
    for option in (["--strip-scope", "net/"], ["--add-scope", "eval/"]):
        out = tmp_path / "out"
        code, _, err = run_cli(["restore-ema", str(tmp_path / "in" / "ckpt"), "--out", str(out),
                                *option])
        assert code == 5 and "TF2 checkpoint output" in err, err
        assert not out.exists()
    code, _, err = run_cli(["restore-ema", str(tmp_path / "in" / "ckpt"), "--out",
                            str(tmp_path / "ok")])
    assert code == 0, err
    restored = tf.Module()
    restored.u = tf.Variable(tf.zeros([2]), name="u")
    tf.train.Checkpoint(net=restored).read(tf.train.latest_checkpoint(str(tmp_path / "ok")))\
        .expect_partial()
    assert restored.u.numpy().tobytes() == ema.average(net.u).numpy().tobytes()


def test_map_and_ema_map_of_a_tf2_checkpoint_refuse_a_scope(tmp_path, tf):
    """``map --strip-scope model`` of a TF2 checkpoint showed ``ema/0 -> .ATTRIBUTES/
    VARIABLE_VALUE`` (the variable ``model`` left with no name), exit 0, and
    ``restore-ema --format h5 --strip-scope`` ignored the option, exit 0, while
    ``restore-ema`` refuses it (review-17-attack-r38 F7 remnant): refused alike (exit 5)."""
    v = tf.Variable([1.0, 2.0], name="w")
    net = tf.Module()
    net.u = tf.Variable([3.0], name="model/u")
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply([v, net.u])
    path = str(tmp_path / "in" / "ckpt")
    tf.train.Checkpoint(model=v, net=net, ema=[ema.average(v), ema.average(net.u)]).write(path)
    for option in (["--strip-scope", "model"], ["--strip-scope", "net/"],
                   ["--add-scope", "eval/"]):
        code, out, err = run_cli(["map", path, *option])
        assert code == 5 and "TF2 checkpoint" in err, (option, out, err)
        assert ".ATTRIBUTES" not in out, out
        h5 = tmp_path / "x.h5"
        code, _, err = run_cli(["restore-ema", path, "--format", "h5", "--out", str(h5),
                                *option])
        assert code == 5 and not h5.exists(), err
    with pytest.raises(ckpt_tools.UnsupportedFormatError, match="TF2 checkpoint"):
        ckpt_tools.ema_map(path, strip_scope="model")
    code, out, err = run_cli(["map", path])
    assert code == 0 and "ema/1\tnet/u" in out, (out, err)
