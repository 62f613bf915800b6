"""TF1 ``ema.apply()`` called inside ``variable_scope("s")`` beside a variable ``s/W``
(review-12-attack-r19 F1, F2, F4, F5): TF names W's shadow ``s/W/ExponentialMovingAverage``,
the name ``s/W``'s own shadow would have at top level.

- ``ema.apply([W])`` alone: ``s/W`` is never averaged and must be refused as missing (exit 6,
  ``--allow-missing``), whichever variable was created first; it used to vanish from the map
  and be exported raw with exit 0 (F1), or be refused for a false reason (F2).
- ``ema.apply([W, s/W])``: the ``.meta``'s update ops prove each shadow's variable (W <-
  ``s/W/EMA``, s/W <- ``s/s/W/EMA``), as ``variables_to_restore()`` does; refused only
  without the ``.meta`` (F5).
- ``--strip-scope s/`` making ``W`` and ``s/W``'s average one name: refused everywhere (F4).

Truth: ``ema.average(v)`` (name and value), the raw values and ``variables_to_restore()``,
recorded by TensorFlow at save time in a subprocess."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import run_cli, run_script

import ckpt_tools
from ckpt_tools.errors import EmaError

SCRIPT = r'''
import json
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
# case: (variables in creation order, averaged, scope of ema.apply())
CASES = {"f": (("s/W", "W"), ("W",), "s"), "a": (("W", "s/W"), ("W",), "s"),
         "e": (("W", "s/W", "s/s/W"), ("s/W",), "s"), "g": (("W", "s/W"), ("W", "s/W"), "s"),
         "h": (("s/W", "W"), ("W", "s/W"), "s"), "c": (("W", "s/W"), ("s/W",), None)}
truth, vtr = {}, {}
for case, (names, averaged, scope) in CASES.items():
    with tf.Graph().as_default():
        step = tf1.train.get_or_create_global_step()
        made = {}
        for i, name in enumerate(names):
            made[name] = tf1.get_variable(
                name, [3, 2], initializer=tf1.random_normal_initializer(seed=i + 1))
        loss = sum(tf.reduce_sum(tf.square(v - i)) for i, v in enumerate(made.values()))
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            if scope:
                with tf1.variable_scope(scope):
                    update = ema.apply([made[n] for n in averaged])
            else:
                update = ema.apply([made[n] for n in averaged])
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(update)
            os.makedirs(f"{out}/{case}")
            tf1.train.Saver().save(s, f"{out}/{case}/model.ckpt")
            for name, var in made.items():
                truth[f"{case}:raw:{name}"] = s.run(var)
            for name in averaged:
                truth[f"{case}:ema:{name}"] = s.run(ema.average(made[name]))
                truth[f"{case}:name:{name}"] = np.array(ema.average(made[name]).op.name)
            vtr[case] = {k: v.op.name for k, v in ema.variables_to_restore().items()}
np.savez(f"{out}/truth.npz", vtr=np.array(json.dumps(vtr)), **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_scope_collisions")
    truth = run_script(SCRIPT, out)
    for case in ("g", "h"):  # the same checkpoint without its graph
        shutil.copytree(out / case, out / f"{case}_nometa")
        (out / f"{case}_nometa" / "model.ckpt.meta").unlink()
        (out / f"{case}_nometa" / "checkpoint").unlink()  # it names the original's path
    return out, truth


def _one_line(code: int, err: str, want: int, *words: str) -> str:
    assert code == want, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    line = " ".join(err.split())
    for word in words:
        assert word in line, (word, line)
    return line


UNAVERAGED = {"f": ("s/W",), "a": ("s/W",), "e": ("W", "s/s/W")}


@pytest.mark.parametrize("case", sorted(UNAVERAGED))
@pytest.mark.parametrize("command", ["map", "export", "restore-ema"])
def test_a_variable_whose_shadow_name_another_average_took_is_missing(made, tmp_path, case,
                                                                      command):
    out, _ = made
    target = tmp_path / ("w.npz" if command == "export" else "baked")
    args = [command, str(out / case)] + ([] if command == "map" else ["--out", str(target)])
    code, _, err = run_cli(args)
    line = _one_line(code, err, 6, "--allow-missing", *UNAVERAGED[case])
    assert "another graph" not in line and "is not in the checkpoint" not in line or (
        case == "e" and "'W/ExponentialMovingAverage' is not in the checkpoint" in line), line
    assert not target.exists()


@pytest.mark.parametrize("case", sorted(UNAVERAGED))
@pytest.mark.parametrize("no_meta", [False, True])
def test_allow_missing_exports_the_averages_and_the_left_out_raw(made, tmp_path, case, no_meta):
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--allow-missing", "--out", str(target)]
                           + (["--no-meta"] if no_meta else []))
    if no_meta:  # as without the .meta: only its update ops prove whose the scoped key is
        _one_line(code, err, 6, "may average", "there is none or --no-meta was given")
        assert not target.exists()
        return
    assert code == 0, err
    with np.load(target) as z:
        got = {k: z[k] for k in z.files if k != "global_step"}
    raw = {k.split(":", 2)[2] for k in truth if k.startswith(f"{case}:raw:")}
    assert sorted(got) == sorted(raw)
    for name in raw:
        kind = "raw" if name in UNAVERAGED[case] else "ema"
        assert got[name].tobytes() == truth[f"{case}:{kind}:{name}"].tobytes(), name


@pytest.mark.parametrize("case", ["g", "h"])
def test_the_update_ops_pair_both_scoped_averages(made, tmp_path, tf, case):
    out, truth = made
    vtr = json.loads(str(truth["vtr"]))[case]
    code, stdout, err = run_cli(["map", str(out / case), "--json"])
    assert code == 0, err
    assert json.loads(stdout) == vtr  # as variables_to_restore() pairs them
    assert {str(truth[f"{case}:name:{v}"]): v for v in ("W", "s/W")}.items() <= vtr.items()
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--out", str(target)])
    assert code == 0, err
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(out / case), "--out", str(baked)])
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(baked))
    with np.load(target) as z:
        for name in ("W", "s/W"):
            want = truth[f"{case}:ema:{name}"].tobytes()
            assert z[name].tobytes() == want and reader.get_tensor(name).tobytes() == want


@pytest.mark.parametrize("case", ["g_nometa", "h_nometa"])
def test_without_the_meta_the_scoped_averages_stay_refused(made, tmp_path, case):
    """Without the .meta s/W/ExponentialMovingAverage is W's average made in
    variable_scope("s") or s/W's made at the root: no option decides, and the refusal says
    so and why (review-23-attack-r72 F3: it said only "keep the .meta"; every statement was
    refused), naming --raw, which writes W and s/W raw bit for bit."""
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--out", str(target)])
    _one_line(code, err, 6, "s/W/ExponentialMovingAverage may average W or s/W",
              "without it no option of ckpt decides", "ckpt export --raw writes the raw")
    assert not target.exists()
    for stated in (["--ema-name", "ExponentialMovingAverage"],
                   ["--ema-name", "s/ExponentialMovingAverage"], ["--averages-only"],
                   ["--allow-missing"]):
        code, _, err = run_cli(["export", str(out / case), *stated, "--out", str(target)])
        assert code == 6 and not target.exists(), (stated, err)
    code, _, err = run_cli(["export", str(out / case), "--raw", "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for name in ("W", "s/W"):
            assert z[name].tobytes() == truth[f"{case[0]}:raw:{name}"].tobytes(), name


def _api(tf, out, case: str, how: str, **options) -> dict[str, np.ndarray]:
    """Restores ``case`` the README's way, in the graph imported from its training ``.meta``;
    returns W's and s/W's values."""
    tf1 = tf.compat.v1
    prefix = str(out / case / "model.ckpt")
    with tf.Graph().as_default():
        tf1.train.import_meta_graph(prefix + ".meta")
        with tf1.Session() as sess:
            if how == "restore_ema":
                ckpt_tools.restore_ema(sess, str(out / case), **options)
            else:
                ckpt_tools.ema_saver(checkpoint=str(out / case), **options).restore(sess, prefix)
            return {v.op.name: sess.run(v) for v in tf1.global_variables()
                    if v.op.name in ("W", "s/W")}


@pytest.mark.parametrize("how", ["restore_ema", "ema_saver"])
def test_python_api_refuses_the_left_out_variable_and_pairs_proven_ones(made, tf, how):
    out, truth = made
    with pytest.raises(EmaError, match="allow_missing") as info:
        _api(tf, out, "f", how)
    assert "s/W (no shadow of its own; s/W/ExponentialMovingAverage is W's average)" in str(
        info.value)
    got = _api(tf, out, "f", how, allow_missing=True)
    assert got["W"].tobytes() == truth["f:ema:W"].tobytes()
    assert got["s/W"].tobytes() == truth["f:raw:s/W"].tobytes()
    for case in ("g", "h"):
        got = _api(tf, out, case, how)
        for name in ("W", "s/W"):
            assert got[name].tobytes() == truth[f"{case}:ema:{name}"].tobytes(), (case, name)


@pytest.mark.parametrize("command", ["map", "restore-ema"])
def test_strip_scope_making_two_keys_one_name_is_refused(made, tmp_path, command):
    out, _ = made
    baked = tmp_path / "baked"
    code, _, err = run_cli([command, str(out / "c"), "--strip-scope", "s/", "--allow-missing"]
                           + (["--out", str(baked)] if command == "restore-ema" else []))
    _one_line(code, err, 6, str(out / "c"), "--strip-scope s/", "W and s/W",
              "into one variable, W")
    assert not baked.exists()


def test_strip_scope_clash_is_refused_by_the_python_api(made, tf):
    out, truth = made
    with pytest.raises(EmaError, match="--strip-scope s/"):
        ckpt_tools.ema_map(out / "c", strip_scope="s/", allow_missing=True)
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        w = tf1.get_variable("W", [3, 2])  # the eval graph: the model without its scope s/
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            with pytest.raises(EmaError, match="--strip-scope s/"):
                ckpt_tools.restore_ema(sess, str(out / "c"), strip_scope="s/",
                                       allow_missing=True)
            # leaving the raw W out takes s/W's average into W, as asked
            ckpt_tools.restore_ema(sess, str(out / "c"), strip_scope="s/", exclude=["W"],
                                   allow_missing=True)
            assert sess.run(w).tobytes() == truth["c:ema:s/W"].tobytes()
