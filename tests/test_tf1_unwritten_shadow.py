"""TF1 with its ``.meta``: in a graph that runs ``ema.apply()`` over other weights, a key no op
of the graph writes is no proven average (review-18-attack-r41 F1, CRITICAL).

A default EMA averages ``w1``; ``w0/ExponentialMovingAverage`` is a variable the user keeps as
``w0``'s gradient moment from Python (``Variable.load()``, which runs the variable's own
initializer with a feed: no writer in the graph). Read by its name alone it was exported as
``w0``'s average, exit 0 under ``--strict``. The graph cannot tell that key from a true average
stored beside a ``.meta`` of another graph (tests/helpers.py ``tf1_contradicting_meta``, where
the other graph's ``b`` is frozen), so both are refused (exit 6) with the options that decide:
``--no-meta`` pairs by the checkpoint's names (the user's statement), ``--allow-missing``
keeps ``w0`` raw (TF: ``ema.average(w0)`` is ``None``). With ``w0`` frozen the graph neither
trains nor averages it; it was the contradiction refusal's, which offered ``--no-meta`` alone
(the kept tensor as ``w0``'s average) and refused ``--allow-missing`` (TF's answer): now the
same refusal and options as for a trained ``w0`` (review-19-attack-r45 F8). A graph that
runs no ``apply()`` at all (an eval graph) keeps the name's reading
(tests/test_tf1_hand_written_shadows.py ``eval``).

Made by real TensorFlow in a subprocess; truth from the session at save time.
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
trainable = sys.argv[2] == "trained"
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]), trainable=trainable)
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
with tf1.variable_scope("w0"):
    mom = tf1.get_variable("ExponentialMovingAverage", initializer=tf.zeros([3, 2]),
                           trainable=False)
loss = tf.reduce_sum(tf.square(w0 - 1.5)) + tf.reduce_sum(tf.square(w1 + 2.0))
g0 = tf.gradients(loss, [w0])[0]
train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
ema = tf1.train.ExponentialMovingAverage(0.9)
with tf.control_dependencies([train]):
    upd = ema.apply([w1])
saver = tf1.train.Saver()
with tf1.Session() as s:
    s.run(tf1.global_variables_initializer())
    m = np.zeros([3, 2], np.float32)
    for _ in range(4):
        g = s.run(g0)
        s.run(upd)
        m = 0.9 * m + 0.1 * g
        mom.load(m, s)
    truth["ema:w1"] = s.run(ema.average(w1))
    truth["none:w0"] = np.asarray(ema.average(w0) is None)
    for v in tf1.global_variables():
        truth[f"raw:{v.op.name}"] = s.run(v)
    saver.save(s, f"{out}/model.ckpt")
'''

KEY = "w0/ExponentialMovingAverage"


@pytest.fixture(scope="module", params=["trained", "frozen"])
def made(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_unwritten") / request.param
    return request.param, out, run_tf1_script(SCRIPT, out, request.param)


def _roles(run, *options: str) -> dict[str, tuple[str, str | None]]:
    code, text, err = run_cli(["list", str(run), "--json", *options])
    assert code == 0, err
    return {v["name"]: (v["role"], v["ema_of"]) for v in json.loads(text)["variables"]}


def test_a_key_nothing_writes_beside_apply_of_others_is_refused_naming_what_decides(
        made, tmp_path):
    kind, run, truth = made
    dest, baked = tmp_path / "x.npz", tmp_path / "baked"
    assert bool(truth["none:w0"])  # TF: ema.average(w0) is None
    assert truth[f"raw:{KEY}"].tobytes() != truth["raw:w0"].tobytes()
    for stated in ([], ["--ema-name", "ExponentialMovingAverage"]):
        for argv in (["export", str(run), "--strict", "--out", str(dest)], ["map", str(run)],
                     ["restore-ema", str(run), "--out", str(baked)]):
            code, _, err = run_cli([*argv, *stated])
            assert code == 6, (argv, stated, err)
            assert "does not average" in err and KEY in err and "--no-meta" in err, err
            # the key may be kept from outside the graph (frozen w0 too: r45 F8)
            assert "no op of the graph writes" in err and "--allow-missing" in err, err
            assert ("in neither its trainable_variables" in err) == (kind == "frozen"), err
        assert not dest.exists() and not baked.exists()
    with pytest.raises(EmaError, match="use_meta=False"):
        ckpt_tools.ema_map(str(run))
    # --no-meta: the checkpoint's names, the caller's statement that the key is w0's average
    code, _, err = run_cli(["export", str(run), "--no-meta", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert got["w0"].tobytes() == truth[f"raw:{KEY}"].tobytes()
        assert got["w1"].tobytes() == truth["ema:w1"].tobytes()
    dest.unlink()
    assert _roles(run, "--no-meta")[KEY] == ("ema", "w0")
    code, _, err = run_cli(["export", str(run), "--strict", "--allow-missing",
                            "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert got["w0"].tobytes() == truth["raw:w0"].tobytes()
        assert got["w1"].tobytes() == truth["ema:w1"].tobytes()
    m = ckpt_tools.ema_map(str(run), allow_missing=True)
    assert m.mapping.get(KEY) != "w0" and m.mapping.get("w0") == "w0", m
    roles = _roles(run)  # with the .meta read: no proven average of w0
    assert roles[KEY] != ("ema", "w0") and roles["w1/ExponentialMovingAverage"] == ("ema", "w1")


@pytest.mark.parametrize("stated", [[], ["--ema-name", "ExponentialMovingAverage"]])
def test_excluding_the_unwritten_keys_weight_exports_the_others(made, stated, tmp_path):
    """--exclude w0 leaves the unwritten key's weight out: its refusal no longer fires for
    it, and the refusal offers that --exclude, with the stated --ema-name (note s28g F5)."""
    _kind, run, truth = made
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(run), "--out", str(dest), *stated])
    offer = " ".join([*stated, "--exclude 'w0'"])
    assert code == 6 and f"{offer} exports the other weights' averages" in err, err
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(dest), *stated,
                            "--exclude", "w0"])
    assert code == 0, err
    with np.load(dest) as got:
        assert sorted(got.files) == ["w1"]
        assert got["w1"].tobytes() == truth["ema:w1"].tobytes()
