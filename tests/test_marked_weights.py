"""Outputs whose keys named as variables hold the averages say so (review-33-attack-r128 F1).

``ckpt restore-ema`` of a TF checkpoint (and ``ckpt average --ema --bake``) writes each
variable's average under its own name; nothing in the bundle said so. A plain ``ckpt
average`` of such an output with a raw checkpoint of the same run wrote mean(raw weight,
average) under the plain names, exit 0, and ``export --raw`` labelled the averages (or that
mixture) ``{"values": "raw"}``, warning that the file "has EMA shadows". The mark inside the
bundle (``_CKPT_TOOLS_RECORD``'s ``weights``) now says it: the mixed average is refused (exit
6, ``--ema --bake``), ``export --raw`` records ``weights_are_averages`` and ``list`` says it.
Truth: ``sess.run(ema.average(v))`` and ``sess.run(v)`` at each save of a real TF1 run
(``tf.compat.v1.train.Saver()`` of the variables and their averages)."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from _sibling_runs import RUN
from helpers import run_cli
from helpers_tf1 import run_tf1_script

NAMES = ("model/W", "model/V")


# two EMA objects over one weight, a plain Saver()
TWO = """
with tf.Graph().as_default():
    w = tf1.get_variable("two/W", initializer=[1.0, 2.0])
    fast = tf1.train.ExponentialMovingAverage(0.5, name="fast")
    slow = tf1.train.ExponentialMovingAverage(0.9, name="slow")
    with tf.control_dependencies([tf1.assign_add(w, [1.5, 1.5])]):
        step = tf.group(fast.apply([w]), slow.apply([w]))
    with trained(tf, step, 2) as s:
        tf1.train.Saver().save(s, f"{out}/two/model.ckpt", global_step=2)
        truth["two:fast"], truth["two:slow"] = s.run([fast.average(w), slow.average(w)])
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("marked_weights")
    truth = run_tf1_script(RUN + '\nrun("plain", False, every=True)\n' + TWO, out)
    for step, opts in ((3, []), (2, []), (3, ["--exclude", "model/V"])):
        dest = out / f"r{step}{'x' if opts else ''}"
        code, _, err = run_cli(["restore-ema", str(out / f"plain/model.ckpt-{step}"), *opts,
                                "--out", str(dest)])
        assert code == 0, err
    return out, truth


def _raw_export(ckpt, dest) -> tuple[dict, dict, str]:
    """``export --raw`` of ``ckpt``: (its record, its arrays, stderr)."""
    code, out, err = run_cli(["export", "--raw", str(ckpt), "--out", str(dest)])
    assert code == 0, err
    with zipfile.ZipFile(dest) as z:
        record = json.loads(z.comment)["ckpt_tools"]
    with np.load(dest) as z:
        return record, {k: z[k] for k in z.files}, out + err


def _listed(ckpt) -> tuple[str, dict]:
    code, text, err = run_cli(["list", str(ckpt)])
    assert code == 0, err
    said = " ".join((text + err).split())
    code, js, err = run_cli(["list", str(ckpt), "--json"])
    assert code == 0, err
    return said, json.loads(js)


def test_restored_output_says_its_plain_names_hold_the_averages(made, tmp_path):
    out, truth = made
    record, values, said = _raw_export(out / "r3/model.ckpt-3", tmp_path / "r.npz")
    assert record == {"values": "stored", "weights_are_averages": True}  # was "raw"
    for key in NAMES:
        np.testing.assert_array_equal(values[key], truth[f"plain:3:avg:{key}"])
    assert "although" not in said  # was: "... although the checkpoint has EMA shadows"
    assert "ckpt restore-ema wrote this file" in said, said
    text, doc = _listed(out / "r3/model.ckpt-3")
    assert "EMA: ckpt restore-ema wrote this file: its keys named as variables hold the " \
           "averages" in text, text
    assert doc["weights"] == {"averages": True, "by": "ckpt restore-ema"}
    # a raw checkpoint of the run says nothing of it
    record, values, _ = _raw_export(out / "plain/model.ckpt-3", tmp_path / "p.npz")
    assert record == {"values": "raw"}
    np.testing.assert_array_equal(values["model/W"], truth["plain:3:raw:model/W"])
    assert "weights" not in _listed(out / "plain/model.ckpt-3")[1]


def test_plain_average_with_a_raw_checkpoint_is_refused_and_the_bake_is_right(made, tmp_path):
    out, truth = made
    inputs = [str(out / "plain/model.ckpt-2"), str(out / "r3/model.ckpt-3")]
    code, _, err = run_cli(["average", *inputs, "--out", str(tmp_path / "mix")])
    line = " ".join(err.split())
    assert code == 6, err  # was 0: mean(raw W at step 2, average of W at step 3) as "raw"
    assert "r3/model.ckpt-3" in line and "plain/model.ckpt-2" in line, line
    assert "--ema --bake" in line, line
    assert not (tmp_path / "mix").exists()
    code, _, err = run_cli(["average", *inputs, "--ema", "--bake", "--out", str(tmp_path / "b")])
    assert code == 0, err  # the option offered: both inputs' averages, averaged
    record, values, _ = _raw_export(tmp_path / "b/model.ckpt-3", tmp_path / "b.npz")
    assert record == {"values": "stored", "weights_are_averages": True}
    for key in NAMES:
        want = (truth[f"plain:2:avg:{key}"].astype(np.float64)
                + truth[f"plain:3:avg:{key}"]) / 2
        np.testing.assert_allclose(values[key], want, rtol=1e-6)
    assert _listed(tmp_path / "b/model.ckpt-3")[1]["weights"]["by"] == "ckpt average"


def test_average_of_restored_outputs_holds_averages(made, tmp_path):
    out, truth = made
    code, _, err = run_cli(["average", str(out / "r2/model.ckpt-2"), str(out / "r3/model.ckpt-3"),
                            "--out", str(tmp_path / "a")])
    assert code == 0, err
    record, values, _ = _raw_export(tmp_path / "a/model.ckpt-3", tmp_path / "a.npz")
    assert record == {"values": "stored", "weights_are_averages": True}
    for key in NAMES:
        want = (truth[f"plain:2:avg:{key}"].astype(np.float64)
                + truth[f"plain:3:avg:{key}"]) / 2
        np.testing.assert_allclose(values[key], want, rtol=1e-6)
    # --ema alone keeps the newest input's plain names: a raw newest says nothing
    code, _, err = run_cli(["average", str(out / "r2/model.ckpt-2"),
                            str(out / "plain/model.ckpt-3"), "--ema", "--out", str(tmp_path / "e")])
    assert code == 0, err
    record, values, _ = _raw_export(tmp_path / "e/model.ckpt-3", tmp_path / "e.npz")
    assert record == {"values": "raw"}
    np.testing.assert_array_equal(values["model/W"], truth["plain:3:raw:model/W"])


def test_a_weight_left_raw_by_exclude_is_recorded(made, tmp_path):
    out, truth = made
    record, values, _ = _raw_export(out / "r3x/model.ckpt-3", tmp_path / "x.npz")
    assert record == {"values": "mixed", "raw": ["model/V"]}
    np.testing.assert_array_equal(values["model/V"], truth["plain:3:raw:model/V"])
    np.testing.assert_array_equal(values["model/W"], truth["plain:3:avg:model/W"])
    assert _listed(out / "r3x/model.ckpt-3")[1]["weights"]["raw"] == ["model/V"]
    code, _, err = run_cli(["average", str(out / "r3x/model.ckpt-3"),
                            str(out / "r2/model.ckpt-2"), "--newest", str(out / "r3x/model.ckpt-3"),
                            "--out", str(tmp_path / "m")])
    assert code == 6 and "'model/V'" in err and "--ema --bake" in err, err


def test_two_ema_objects_outputs_are_not_averaged_together(made, tmp_path):
    """restore-ema --ema-name fast and --ema-name slow of one save, averaged: the mean of two
    objects' averages under the plain names, labelled raw (r128 F1, two objects)."""
    out, truth = made
    outs = []
    for name in ("fast", "slow"):
        outs.append(str(tmp_path / name / "model.ckpt-2"))
        code, _, err = run_cli(["restore-ema", str(out / "two/model.ckpt-2"), "--ema-name",
                                name, "--out", str(tmp_path / name)])
        assert code == 0, err
        _, values, _ = _raw_export(outs[-1], tmp_path / f"{name}.npz")
        np.testing.assert_array_equal(values["two/W"], truth[f"two:{name}"])
    code, _, err = run_cli(["average", *outs, "--newest", outs[0], "--out", str(tmp_path / "m")])
    line = " ".join(err.split())
    assert code == 6 and "'fast'" in line and "'slow'" in line, err  # was 0
