"""``ckpt list`` counts a TF2 checkpoint's lookup tables (``DenseHashTable``,
``MutableHashTable``) apart from its parameters: their saved keys and values are lookup data,
not weights. Made by TensorFlow in a subprocess; the truth is what TF reports: the tensors
``tf.train.list_variables`` lists outside the tables, and each table's ``export()``.
"""

from __future__ import annotations

import json

import pytest
from helpers import run_cli, run_script

pytest.importorskip("tensorflow")

SCRIPT = r'''
import sys
import numpy as np, tensorflow as tf

out = sys.argv[1]


class M(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.ones([3, 3]), name="w")
        self.dense_table = tf.lookup.experimental.DenseHashTable(
            tf.int64, tf.float32, default_value=-1.0, empty_key=-1, deleted_key=-2,
            initial_num_buckets=8)
        self.dense_table.insert(tf.constant([1, 2], tf.int64), tf.constant([3.0, 4.0]))
        self.hash_table = tf.lookup.experimental.MutableHashTable(tf.string, tf.float32, 0.0)
        self.hash_table.insert(tf.constant(["a", "b", "c"]), tf.constant([1.0, 2.0, 3.0]))


m = M()
tf.train.Checkpoint(m=m).write(out + "/ckpt")
params = sum(int(np.prod(shape)) for key, shape in tf.train.list_variables(out + "/ckpt")
             if "/.ATTRIBUTES/table-" not in key)
entries = sum(len(t.export()[0]) for t in (m.dense_table, m.hash_table))
np.savez(out + "/truth.npz", parameters=params, entries=entries)
'''


def test_tables_are_counted_apart_from_parameters(tmp_path):
    truth = run_script(SCRIPT, tmp_path)
    params, entries = int(truth["parameters"]), int(truth["entries"])
    code, _, err = run_cli(["list", str(tmp_path / "ckpt")])
    assert code == 0, err
    summary = next(line for line in err.splitlines() if " variables, " in line)
    assert f" {params} parameters, 2 lookup tables ({entries} entries), " in summary, summary
    code, text, err = run_cli(["list", str(tmp_path / "ckpt"), "--json"])
    assert code == 0, err
    totals = json.loads(text)["totals"]
    assert (totals["parameters"], totals["tables"], totals["table_entries"]) == (
        params, 2, entries), totals
    # a filter that shows no table leaves the tables out of the line
    code, _, err = run_cli(["list", str(tmp_path / "ckpt"), "--role", "weight"])
    assert code == 0, err
    assert "lookup table" not in err and " 9 parameters, " in err, err
