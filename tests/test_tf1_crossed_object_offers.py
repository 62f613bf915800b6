"""Refusals of TF1 Savers whose keys hold another EMA object's averages say only what is so
(review-32-attack-r117 M3, M4): ``Saver({"model/W/fast": slow.average(W), "model/V/fast":
slow.average(V), ...})`` (slow's names not saved) was refused saying ``--ema-name slow`` is
refused, though it exports slow's averages through the save op. Made by real TensorFlow (graph
mode), truth read from the session at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = '''
def build(name, keys):
    # keys(w, v, fast, slow): the Saver's keys beside the global step
    for s, _, held, objects in wv_ema_saves(tf, f"{out}/{name}/model.ckpt", {
            "fast": (0.5, "WV"), "slow": (0.9, "WV")}, lambda w, v, o: keys(
            w, v, o["fast"], o["slow"]), (2,)):
        for k, x in held.items():
            truth[f"{name}:raw:model/{k}"] = s.run(x)
            for o in ("fast", "slow"):
                truth[f"{name}:{o}:model/{k}"] = s.run(objects[o].average(x))

build("only_fast_saved_cross", lambda w, v, fast, slow: {
    "model/W": w, "model/V": v,
    "model/W/fast": slow.average(w), "model/V/fast": slow.average(v)})
build("raw_holds_slow", lambda w, v, fast, slow: {
    "model/W": slow.average(w), "model/W/fast": fast.average(w),
    "model/V": v, "model/V/fast": fast.average(v), "model/V/slow": slow.average(v)})
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("crossed_object_offers")
    return out, run_tf1_script(SCRIPT, out)


def test_an_object_saved_under_anothers_names_is_offered(made, tmp_path):
    """M3: the refusal offers ``--ema-name slow``, which exports slow's averages (read under
    fast's names through the save op); fast's, not saved, is the one refused."""
    out, truth = made
    path = str(out / "only_fast_saved_cross/model.ckpt-2")
    code, _, err = run_cli(["export", path, "--out", str(tmp_path / "x.npz")])
    said = " ".join(err.split())
    assert code == 6 and "pass --ema-name slow" in said, err
    assert "--ema-name slow is refused" not in said and "or --ema-name slow" not in said, err
    code, _, err = run_cli(["export", path, "--ema-name", "slow", "--out",
                            str(tmp_path / "s.npz")])
    assert code == 0, err
    with np.load(tmp_path / "s.npz") as z:
        for key in ("model/W", "model/V"):
            np.testing.assert_array_equal(z[key], truth[f"only_fast_saved_cross:slow:{key}"])


def test_keys_mixing_objects_averages_and_raw_weights_say_what_they_hold(made, tmp_path, tf):
    """M4: ``model/W`` holding slow's average of W (W itself not saved) beside raw ``model/V``
    was refused saying the file "holds neither one set of averages nor one of raw weights":
    fast's and slow's averages of both are all saved. The refusal now says the update ops show
    two objects and ckpt pairs no one object's averages with such keys, and names the graph's
    own Saver, which restores each key into its variable (TensorFlow's truth)."""
    out, truth = made
    path = str(out / "raw_holds_slow/model.ckpt-2")
    for stated in ([], ["--ema-name", "fast"], ["--ema-name", "slow"]):
        code, _, err = run_cli(["export", path, *stated, "--out", str(tmp_path / "x.npz")])
        said = " ".join(err.split())
        assert code == 6 and "2 EMA objects (fast, slow)" in said, (stated, err)
        assert "neither one set of averages" not in said, err
    v1 = tf.compat.v1
    with tf.Graph().as_default(), v1.Session() as sess:
        v1.train.import_meta_graph(path + ".meta").restore(sess, path)
        shadows = {v.op.name: v for v in v1.global_variables()}
        for key in ("model/W", "model/V"):
            for name in ("fast", "slow"):
                np.testing.assert_array_equal(sess.run(shadows[f"{key}/{name}"]),
                                              truth[f"raw_holds_slow:{name}:{key}"])
