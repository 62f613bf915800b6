"""Forged or corrupt ``_CKPT_TOOLS_RECORD`` marks (review-29-attack-r107 F5): deep JSON crashed
every command (RecursionError, exit 70), parts of other types crashed (TypeError, exit 70) or
were silently passed over; each is refused as a corrupt checkpoint (exit 4) naming the file.
The mark is written by a real TF1 Saver under that key (a Saver dict key)."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

K = {"kind": "ckpt_tools record", "version": 1}
CASES = {
    "deep": "[" * 200000 + "]" * 200000,
    "graphs_int": json.dumps({**K, "names_doubted": {"graphs": 5, "inputs": 7}}),
    "keys_int": json.dumps({**K, "stated": {"averages_only": {"keys": 5}}}),
    "stated_list": json.dumps({**K, "stated": ["averages_only"]}),
    "nd_string": json.dumps({**K, "names_doubted": "yes"}),
    "averages_only_true": json.dumps({**K, "stated": {"averages_only": True}}),
    # who made a carried statement, over which output (review-30-attack-r112 F1)
    "origins_str": json.dumps({**K, "stated": {"no_meta": True,
                                               "origins": {"no_meta": "ckpt average"}}}),
}
SCRIPT = '''
import json
cases = json.loads(sys.argv[2])
for case, val in cases.items():
    with tf.Graph().as_default():
        W = tf1.get_variable("W", [3, 2])
        ema = tf1.train.ExponentialMovingAverage(0.5)
        up = ema.apply([W])
        m = tf1.get_variable("mark", [], dtype=tf.string,
                             initializer=tf1.constant_initializer(val.encode(), dtype=tf.string))
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            s.run(up)
            vl = {x.op.name: x for x in tf1.global_variables() if x is not m}
            vl["_CKPT_TOOLS_RECORD"] = m
            tf1.train.Saver(vl).save(s, f"{out}/{case}/model.ckpt", global_step=1,
                                     write_meta_graph=False)
'''


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    out = tmp_path_factory.mktemp("forged_marks")
    run_tf1_script(SCRIPT, out, json.dumps(CASES))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_forged_mark_is_refused_as_corrupt(forged, case, tmp_path):
    ckpt = forged / case / "model.ckpt-1"
    for cmd in (["export", str(ckpt), "--out", str(tmp_path / "e.npz")],
                ["restore-ema", str(ckpt), "--out", str(tmp_path / "r")]):
        code, _, err = run_cli(cmd)
        assert code == 4 and "_CKPT_TOOLS_RECORD" in err and str(ckpt) in err, (cmd, err)
    assert not (tmp_path / "e.npz").exists() and not (tmp_path / "r").exists()
