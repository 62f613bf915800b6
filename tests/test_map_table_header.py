"""``ckpt map``'s table was headed ``checkpoint_key`` but showed TF2 and Keras keys by the names
``ckpt list`` shows (``ema/0`` for ``ema/0/.ATTRIBUTES/VARIABLE_VALUE``), which are not in the
file (review-27-user-u29 F1). It is now headed ``restored from`` and, where a name is not the
key, a summary line says so and where the keys are (``--json``). Checkpoints: the committed
fixtures written by TensorFlow / Keras (fixtures/make_fixtures.py)."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, decide_args, run_cli, set_terminal

SAID = "names as ckpt list shows them, not as stored: --json gives the keys"


@pytest.mark.parametrize("case", ["tf2_object", "keras3_object", "linear_v2"])
def test_the_map_table_heads_what_it_shows(case, monkeypatch, tf):
    path = str(FIXTURES / case)
    code, stdout, stderr = run_cli(["map", path, *decide_args(case)])
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[1] == "restored_from\trestores_into", stdout
    shown = [line.split("\t")[0] for line in lines[2:] if "\t" in line]
    code, doc, _ = run_cli(["map", path, *decide_args(case), "--json"])
    keys = set(json.loads(doc))
    # What the file holds (TensorFlow's own reader), not our listing.
    stored = set(tf.train.load_checkpoint(path).get_variable_to_shape_map())
    assert keys <= stored
    if case == "linear_v2":  # TF1 keys are shown as stored: no summary line
        assert set(shown) == keys and SAID not in stdout + stderr
    else:
        assert not set(shown) & stored and SAID in stdout + stderr, (shown, stored)
    set_terminal(monkeypatch, 80)
    code, stdout, _ = run_cli(["map", path, *decide_args(case)])
    header = [line for line in stdout.splitlines() if "restores into" in line]
    assert code == 0 and len(header) == 1 and header[0].startswith("restored from "), stdout
    assert all(len(line) <= 80 for line in stdout.splitlines()), stdout
