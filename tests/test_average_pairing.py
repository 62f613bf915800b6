"""``ckpt average --ema --bake`` where the pairing needs an option: following the refusal's
advice (``--apply-order``, ``--ema-name``) gives the averages of the shadows TensorFlow recorded
for each variable. The pairing truth is what the library recorded at save time (the fixture
generator's ``expected.json``, or ``ema.average(v)`` in the test's own graph), never ours."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from _in_process import run_in_process
from helpers import FIXTURES, tf2_unnamed_list_run

from ckpt_tools import average_checkpoints


def _mean(values: list[np.ndarray]) -> np.ndarray:
    acc = np.zeros(values[0].shape, np.float64)
    for v in values:
        acc += v
    return (acc / len(values)).astype(values[0].dtype)


def _tf_values(tf, prefix: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(prefix))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


def _advice(stderr: str, option: str) -> str:
    """The first value the refusal tells the user to pass with ``option``."""
    found = re.search(rf"pass {re.escape(option)} ([\w.-]+)", stderr)
    assert found, stderr
    return found.group(1)


def _one_line_error(proc, code: int) -> None:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error:") and "Traceback" not in proc.stderr, proc.stderr


def test_tf2_object_bake_follows_the_refusal_to_apply_order(tmp_path, tf):
    expected = json.loads((FIXTURES / "tf2_object" / "expected.json").read_text())
    refused = run_in_process(["average", str(FIXTURES / "tf2_object"), "--last", "3", "--ema",
                              "--bake", "--out", str(tmp_path / "o")])
    _one_line_error(refused, 6)
    assert not (tmp_path / "o").exists()
    order = _advice(refused.stderr, "--apply-order")
    proc = run_in_process(["average", str(FIXTURES / "tf2_object"), "--last", "3", "--ema",
                           "--bake", "--apply-order", order, "--out", str(tmp_path / "o"),
                           "--json"])
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    inputs = [_tf_values(tf, FIXTURES / "tf2_object" / p) for p in expected["all_prefixes"]]
    out = _tf_values(tf, result["output"])
    assert expected["ema_of"]  # shadow key -> variable key, recorded by TF at save time
    for shadow, variable in expected["ema_of"].items():
        want = _mean([values[shadow] for values in inputs])
        np.testing.assert_array_equal(out[shadow], want, err_msg=shadow)
        np.testing.assert_array_equal(out[variable], want, err_msg=variable)
        assert result["baked"][variable] == shadow
    # The Python keyword the message names does the same.
    api = average_checkpoints([FIXTURES / "tf2_object" / p for p in expected["all_prefixes"]],
                              tmp_path / "api", ema=True, bake=True, apply_order=order)
    assert api.baked == result["baked"]


@pytest.fixture(scope="module")
def two_ema_run(tmp_path_factory, tf):
    """A TF1 run with two EMA objects (``ExponentialMovingAverage`` and ``avg``), two
    checkpoints; records each save's ``avg`` values per variable through ``ema.average(v)``."""
    v1 = tf.compat.v1
    run = tmp_path_factory.mktemp("two_ema")
    recorded: list[dict[str, np.ndarray]] = []
    with tf.Graph().as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("W", shape=[3, 2], initializer=v1.random_normal_initializer(seed=3))
        b = v1.get_variable("b", shape=[2], initializer=v1.zeros_initializer())
        loss = tf.reduce_sum(tf.square(tf.reduce_sum(w, 0) + b - 1.0))
        opt = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
        first = v1.train.ExponentialMovingAverage(0.9)
        avg = v1.train.ExponentialMovingAverage(0.5, name="avg")
        with tf.control_dependencies([opt]):
            train = tf.group(first.apply([w, b]), avg.apply([w, b]))
        saver = v1.train.Saver(max_to_keep=5)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for i in range(4):
                sess.run(train)
                if i % 2:  # two saves, two steps apart: the averages differ
                    saver.save(sess, str(run / "model.ckpt"), global_step=step)
                    recorded.append({v.op.name: sess.run(avg.average(v)) for v in (w, b)})
    return run, recorded


def test_custom_ema_name_bake_follows_the_refusal_to_ema_name(two_ema_run, tmp_path, tf):
    run, recorded = two_ema_run
    refused = run_in_process(["average", str(run), "--last", "2", "--ema", "--bake", "--out",
                              str(tmp_path / "o")])
    _one_line_error(refused, 6)
    assert "--ema-name avg" in refused.stderr
    proc = run_in_process(["average", str(run), "--last", "2", "--ema", "--bake",
                           "--ema-name", "avg", "--out", str(tmp_path / "o"), "--json"])
    assert proc.returncode == 0, proc.stderr
    out = _tf_values(tf, json.loads(proc.stdout)["output"])
    for variable in ("W", "b"):
        want = _mean([r[variable] for r in recorded])
        assert not np.array_equal(recorded[0][variable], recorded[1][variable])
        np.testing.assert_array_equal(out[variable], want, err_msg=variable)
    # --no-meta (the map from the names alone) pairs the same here.
    proc = run_in_process(["average", str(run), "--last", "2", "--ema", "--bake",
                           "--ema-name", "avg", "--no-meta", "--out", str(tmp_path / "nm")])
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(_tf_values(tf, tmp_path / "nm" / "model.ckpt-4")["W"],
                                  out["W"])


def test_bake_summary_counts_each_shadow_once(tmp_path):
    """review-user-r4: the summary said "10 EMA shadows ..., 5 plain names hold them" for the
    5 shadows TensorFlow recorded (the baked plain names were counted as shadows too)."""
    shadows = len(json.loads((FIXTURES / "tf2_object" / "expected.json").read_text())["ema_of"])
    proc = run_in_process(["average", str(FIXTURES / "tf2_object"), "--last", "3", "--ema",
                           "--bake", "--apply-order", "trainable", "--out", str(tmp_path / "o")])
    assert proc.returncode == 0, proc.stderr
    assert f": {shadows} EMA shadows averaged over 3 checkpoints, {shadows} plain names hold " \
        "them," in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_pairing_options_need_bake(tmp_path):
    copy = tmp_path / "c"
    import shutil

    shutil.copytree(FIXTURES / "custom_ema_name", copy)
    for extra in (["--ema-name", "avg"], ["--apply-order", "trainable"], ["--no-meta"],
                  ["--ema", "--ema-name", "avg"]):
        proc = run_in_process(["average", str(FIXTURES / "custom_ema_name"), str(copy),
                               "--newest", str(copy), *extra, "--out", str(tmp_path / "x")])
        _one_line_error(proc, 2)
        assert "--bake" in proc.stderr
    proc = run_in_process(["average", str(FIXTURES / "custom_ema_name"), str(copy), "--newest",
                           str(copy), "--ema", "--bake", "--apply-order", "sideways", "--out",
                           str(tmp_path / "x")])
    _one_line_error(proc, 2)
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="bake"):
        average_checkpoints([FIXTURES / "custom_ema_name", copy], tmp_path / "x",
                            newest=copy, ema_name="avg")


def test_usage_error_names_the_argument_as_usage_does(tmp_path):
    proc = run_in_process(["average", str(FIXTURES / "tf2_object"), "--out", str(tmp_path / "x")])
    _one_line_error(proc, 2)
    assert "CKPT..." in proc.stderr and "PATHS" not in proc.stderr


def _named_options(stderr: str) -> set[str]:
    return set(re.findall(r"pass (--[a-z][a-z-]*)", stderr))


@pytest.fixture(scope="module")
def unnamed_list_run(tmp_path_factory, tf):
    """The issue's TF2 setup (``helpers.tf2_unnamed_list_run``), two saves."""
    run = tmp_path_factory.mktemp("unnamed_list")
    return run, tf2_unnamed_list_run(tf, run, saves=2)


def test_issue_tf2_unnamed_list_bake_equals_the_mean_of_ema_average(unnamed_list_run, tmp_path,
                                                                     tf):
    run, recorded = unnamed_list_run
    refused = run_in_process(["average", str(run), "--last", "2", "--ema", "--bake", "--out",
                              str(tmp_path / "o")])
    _one_line_error(refused, 6)
    named = _named_options(refused.stderr)
    assert "--apply-order" in named
    help_text = run_in_process(["average", "--help"]).stdout
    for option in named:  # every option the refusal names is one average takes
        assert option in help_text, option
    proc = run_in_process(["average", str(run), "--last", "2", "--ema", "--bake",
                           "--apply-order", _advice(refused.stderr, "--apply-order"),
                           "--out", str(tmp_path / "o"), "--json"])
    assert proc.returncode == 0, proc.stderr
    out = _tf_values(tf, json.loads(proc.stdout)["output"])
    assert len(recorded[0]) == 12
    for key in recorded[0]:
        want = _mean([r[key] for r in recorded])
        assert not np.array_equal(recorded[0][key], recorded[1][key])
        np.testing.assert_array_equal(out[key], want, err_msg=key)


def test_issue_tf2_unnamed_list_plain_average_is_refused(unnamed_list_run, tmp_path, tf):
    """review-32-attack-r121 F3: every average is named Variable/ExponentialMovingAverage[_N]
    after a name 12 variables share; nothing in the files proves which variable's average a key
    holds in each save (a resume may apply them in another order), so key-by-key averaging
    is refused, saying so; --ema --bake --apply-order decides (the test above)."""
    run, _ = unnamed_list_run
    proc = run_in_process(["average", str(run), "--last", "2", "--out", str(tmp_path / "o")])
    _one_line_error(proc, 6)
    assert "named after 'Variable', a name 12 variables share" in proc.stderr, proc.stderr
    assert "--apply-order true of every input" in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()
    # session 33: the option it offers for the weights alone, run: every average left out,
    # every weight the mean of what TensorFlow reads in each input
    assert "--drop-unproven-averages" in " ".join(proc.stderr.split()), proc.stderr
    proc = run_in_process(["average", str(run), "--last", "2", "--out", str(tmp_path / "o"),
                           "--drop-unproven-averages", "--json"])
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    inputs = [_tf_values(tf, p) for p in result["inputs"]]
    out = _tf_values(tf, result["output"])
    assert len(result["dropped"]) == 12 and not set(result["dropped"]) & set(out)
    assert sorted(result["averaged"]) == sorted(k for k in out if k not in (
        *result["copied"], "_CHECKPOINTABLE_OBJECT_GRAPH"))
    for key in result["averaged"]:
        np.testing.assert_array_equal(out[key], _mean([i[key] for i in inputs]), err_msg=key)


def test_tf2_object_plain_average_by_the_dict_keys_that_name_the_weights(tmp_path, tf):
    """Session 33 (note32 Open item 2): tf2_object keeps its averages in a dict keyed by the
    weights' paths (ema/dense.Sbias beside model/dense/bias); two Dense biases share the name
    'bias', so 5fbecbc refused every plain average of it. The dict key names the weight
    whatever order ema.apply() got: averaged now, each average key (TF's ema_of, recorded at
    save time) the mean of what TensorFlow reads there in each input."""
    expected = json.loads((FIXTURES / "tf2_object" / "expected.json").read_text())
    proc = run_in_process(["average", str(FIXTURES / "tf2_object"), "--last", "3", "--out",
                           str(tmp_path / "o"), "--json"])
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert "dropped" not in result
    inputs = [_tf_values(tf, FIXTURES / "tf2_object" / p) for p in expected["all_prefixes"]]
    out = _tf_values(tf, result["output"])
    for shadow in expected["ema_of"]:
        assert shadow in result["averaged"], shadow
        np.testing.assert_array_equal(out[shadow], _mean([i[shadow] for i in inputs]))


def test_bake_with_an_unaveraged_weight_follows_the_refusal_to_allow_missing(tmp_path, tf):
    """TF1: ``net/scale`` is left out of ``ema.apply``; the refusal names --allow-missing,
    which average takes: the averaged plain names get the mean of ``ema.average(v)``, the
    unaveraged one keeps the newest checkpoint's raw value."""
    v1 = tf.compat.v1
    run = tmp_path / "run"
    recorded: list[dict[str, np.ndarray]] = []
    with tf.Graph().as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", [3, 2], initializer=v1.random_normal_initializer(seed=2))
        s = v1.get_variable("scale", [2], initializer=v1.ones_initializer())
        loss = tf.reduce_sum(tf.square(tf.reduce_sum(w, 0) * s - 1.0))
        opt = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
        ema = v1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([opt]):
            train = ema.apply([w])
        saver = v1.train.Saver(max_to_keep=5)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for i in range(4):
                sess.run(train)
                if i % 2:
                    saver.save(sess, str(run / "model.ckpt"), global_step=step)
                    recorded.append({"w": sess.run(ema.average(w)), "scale": sess.run(s)})
    refused = run_in_process(["average", str(run), "--last", "2", "--ema", "--bake", "--out",
                              str(tmp_path / "o")])
    _one_line_error(refused, 6)
    assert "--allow-missing" in _named_options(refused.stderr) | set(
        re.findall(r"\((--allow-missing)\)", refused.stderr))
    assert not (tmp_path / "o").exists()
    proc = run_in_process(["average", str(run), "--last", "2", "--ema", "--bake",
                           "--allow-missing", "--out", str(tmp_path / "o"), "--json"])
    assert proc.returncode == 0, proc.stderr
    out = _tf_values(tf, json.loads(proc.stdout)["output"])
    np.testing.assert_array_equal(out["w"], _mean([r["w"] for r in recorded]))
    np.testing.assert_array_equal(out["scale"], recorded[-1]["scale"])
    assert not np.array_equal(recorded[0]["scale"], recorded[1]["scale"])
    proc = run_in_process(["average", str(run), "--last", "2", "--allow-missing", "--out",
                           str(tmp_path / "x")])
    _one_line_error(proc, 2)
