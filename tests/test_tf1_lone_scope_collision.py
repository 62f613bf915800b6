"""A TF1 Saver of the averages alone (``Saver({ema.average_name(v): ema.average(v)})``) of
``ema.apply([W, s/W])`` run inside ``variable_scope("s")`` (review-12-attack-r20 F2): TF names
W's shadow ``s/W/ExponentialMovingAverage`` and s/W's ``s/s/W/ExponentialMovingAverage``. By
name the first is ``s/W``'s average: ``list`` said so (exit 0) and ``--allow-missing`` wrote
W's average into ``s/W``. The ``.meta``'s update ops prove each shadow's variable, and its
save op that each key holds the shadow. Without the ``.meta`` the names are all there is:
refused unless ``--averages-only`` states them. Truth: ``ema.average(v)`` (name and value)
recorded by TensorFlow at save time in a subprocess."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
with tf.Graph().as_default():
    step = tf1.train.get_or_create_global_step()
    w = tf1.get_variable("W", [3, 2], initializer=tf1.random_normal_initializer(seed=1))
    sw = tf1.get_variable("s/W", [3, 2], initializer=tf1.random_normal_initializer(seed=2))
    loss = tf.reduce_sum(tf.square(w - 1.0)) + tf.reduce_sum(tf.square(sw + 1.0))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        with tf1.variable_scope("s"):
            update = ema.apply([w, sw])
    saver = tf1.train.Saver({ema.average_name(v): ema.average(v) for v in (w, sw)})
    with trained(tf, update) as s:
        saver.save(s, out + "/run/model.ckpt")
        for name, v in (("W", w), ("s/W", sw)):
            truth["avg:" + name] = s.run(ema.average(v))
            truth["key:" + name] = np.array(ema.average_name(v))
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("lone_scope_collision")
    truth = run_tf1_script(SCRIPT, out)
    shutil.copytree(out / "run", out / "nometa")
    (out / "nometa" / "model.ckpt.meta").unlink()
    (out / "nometa" / "checkpoint").unlink()
    return out, truth


def test_the_names_tf_gave_collide(made):
    _, truth = made
    assert str(truth["key:W"]) == "s/W/ExponentialMovingAverage"
    assert str(truth["key:s/W"]) == "s/s/W/ExponentialMovingAverage"


def test_list_and_map_pair_each_average_with_its_own_variable(made):
    out, truth = made
    code, text, err = run_cli(["list", str(out / "run"), "--json"])
    assert code == 0, err
    of = {v["name"]: v["ema_of"] for v in json.loads(text)["variables"]}
    assert of[str(truth["key:W"])] == "W" and of[str(truth["key:s/W"])] == "s/W", of
    code, text, err = run_cli(["map", str(out / "run"), "--json"])
    assert code == 0, err
    mapping = json.loads(text)
    assert mapping[str(truth["key:W"])] == "W" and mapping[str(truth["key:s/W"])] == "s/W"


@pytest.mark.parametrize("extra", [[], ["--allow-missing"]])
def test_export_writes_each_variables_own_average(made, tmp_path, extra):
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "run"), "--out", str(target), *extra])
    assert code == 0, err
    with np.load(target) as z:
        assert sorted(z.files) == ["W", "s/W"]
        for name in ("W", "s/W"):
            assert z[name].tobytes() == truth["avg:" + name].tobytes(), name


def test_without_the_meta_the_names_are_not_taken_unstated(made, tmp_path):
    out, _ = made
    code, _, err = run_cli(["export", str(out / "nometa"), "--out", str(tmp_path / "w.npz")])
    assert code == 6 and "--averages-only" in err, err


def test_raw_export_says_the_keys_are_named_as_averages(made, tmp_path):
    """--raw on a checkpoint of averages alone: exit 7 saying what it holds, never "only
    state such as a step counter" (review-12-attack-r20 F10)."""
    out, _ = made
    code, _, err = run_cli(["export", str(out / "run"), "--raw", "--out",
                            str(tmp_path / "w.npz")])
    assert code == 7 and "named as averages" in err and "step counter" not in err, err
    assert len(err.strip().splitlines()) == 1, err
