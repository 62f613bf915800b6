"""``ckpt restore-ema`` / ``bake_ema``: the output loads with plain TensorFlow and holds EMAs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import DECIDE, FIXTURES, decide_args, expected, expected_values, prefix
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools import OutputError, bake_ema, open_checkpoint
from ckpt_tools.cli import app
from ckpt_tools.formats.bundle_writer import BundleWriter

runner = CliRunner()
BAKE_CASES = ["linear_v2", "linear_v1", "towers_bn", "partitioned", "sharded", "tf2_object",
              "custom_ema_name", "keras3_object", "model_garden_slot"]


def _digest(directory) -> dict[str, str]:
    return {p: hashlib.sha256(open(os.path.join(directory, p), "rb").read()).hexdigest()
            for p in sorted(os.listdir(directory))}


def _ema_pairs(case: str, ckpt) -> dict[str, str]:
    """target -> shadow, as ckpt_tools pairs them (with what the file cannot tell stated)."""
    chosen = {t: s for s, t in ckpt_tools.ema_map(ckpt, **DECIDE.get(case, {})).mapping.items()
              if s != t}
    exp = expected(case)["ema_of"]
    assert all(exp[s] == t for t, s in chosen.items())
    return chosen


@pytest.mark.parametrize("case", BAKE_CASES)
def test_baked_checkpoint_loads_with_tensorflow_and_holds_ema_values(case, tf, tmp_path):
    before = _digest(FIXTURES / case)
    out = tmp_path / "out"
    result = runner.invoke(app, ["restore-ema", str(FIXTURES / case), "--out", str(out),
                                 *decide_args(case)])
    assert result.exit_code == 0, result.output
    assert _digest(FIXTURES / case) == before  # input untouched
    values = expected_values(case)
    baked = tf.train.load_checkpoint(str(out))  # via the written 'checkpoint' state file
    original = tf.train.load_checkpoint(prefix(case))
    with open_checkpoint(FIXTURES / case) as ckpt:
        pairs = _ema_pairs(case, ckpt)
        assert pairs
        for target, shadow in pairs.items():
            got = baked.get_tensor(target)
            assert np.asarray(got).tobytes() == values[shadow].tobytes(), target
        for key, _ in tf.train.list_variables(prefix(case)):
            if key not in pairs:
                a, b = np.asarray(baked.get_tensor(key)), np.asarray(original.get_tensor(key))
                assert a.shape == b.shape and (a.dtype == object or a.tobytes() == b.tobytes())
    if (FIXTURES / case / (expected(case)["prefix"] + ".meta")).exists():
        assert (out / (expected(case)["prefix"] + ".meta")).exists()


def test_unmodified_eval_script_restores_ema_weights(tf, tmp_path):
    # The classic evaluation script: import the graph, restore with a plain Saver.
    out = tmp_path / "baked"
    bake_ema(FIXTURES / "partitioned", out)
    values = expected_values("partitioned")
    with tf.Graph().as_default():
        saver = tf.compat.v1.train.import_meta_graph(str(out / "model.ckpt.meta"))
        with tf.compat.v1.Session() as sess:
            saver.restore(sess, tf.train.latest_checkpoint(str(out)))
            parts = [sess.run(f"emb/part_{i}:0") for i in range(3)]
            kernel = sess.run("out/kernel:0")
    assert np.array_equal(np.concatenate(parts), values["emb/ExponentialMovingAverage"])
    assert np.array_equal(kernel, values["out/kernel/ExponentialMovingAverage"])


def test_dry_run_writes_nothing(tmp_path):
    out = tmp_path / "x"
    result = runner.invoke(app, ["restore-ema", str(FIXTURES / "linear_v2"), "--out", str(out),
                                 "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["map"]["W/ExponentialMovingAverage"] == "W"
    assert not out.exists()


def test_refuses_to_write_into_the_input_directory(fixture_copy):
    d = fixture_copy("linear_v2")
    before = _digest(d)
    result = runner.invoke(app, ["restore-ema", str(d), "--out", str(d)])
    assert result.exit_code == OutputError.exit_code
    assert _digest(d) == before


def test_a_corrupt_average_is_named_as_export_names_it(fixture_copy, tmp_path):
    """restore-ema's checksum error names the key whose bytes failed (the average it copies,
    not the variable it writes) with both CRCs, the line export gives (review-20-user-u22 F1)."""
    from helpers import one_line_error

    d = fixture_copy("linear_v2")  # TF wrote it: W, b and their ExponentialMovingAverage
    with open_checkpoint(d) as ckpt:
        at = ckpt.entry("W/ExponentialMovingAverage").offset
    data = d / "model.ckpt.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[at] ^= 0x10
    data.write_bytes(bytes(raw))
    said = []
    for command, out in (("restore-ema", tmp_path / "o"), ("export", tmp_path / "x.npz")):
        result = runner.invoke(app, [command, str(d), "--out", str(out)])
        one_line_error(result, 4, "tensor 'W/ExponentialMovingAverage' (stored 0x",
                       ", computed 0x", "the data file is corrupt")
        said.append(result.stderr)
        assert not out.exists()
    assert said[0] == said[1]


def test_refuses_to_overwrite_unless_forced(tmp_path):
    out = tmp_path / "o"
    bake_ema(FIXTURES / "linear_v2", out)
    with pytest.raises(OutputError, match="already exists"):
        bake_ema(FIXTURES / "linear_v2", out)
    bake_ema(FIXTURES / "linear_v2", out, overwrite=True)


def test_trainable_only_checkpoint_fails_with_a_teaching_message(tmp_path):
    result = runner.invoke(app, ["restore-ema", str(FIXTURES / "linear_trainable_only"),
                                 "--out", str(tmp_path / "o")])
    assert result.exit_code == 6
    assert not (tmp_path / "o" / "model.ckpt.index").exists()


def test_failed_write_leaves_no_partial_checkpoint(tmp_path):
    with pytest.raises(RuntimeError):
        with BundleWriter(str(tmp_path / "m")) as w:
            w.add_array("a", np.ones(3, np.float32))
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []


def test_writer_round_trips_every_dtype_through_tensorflow(tf, tmp_path):
    with open_checkpoint(FIXTURES / "dtypes") as ckpt, BundleWriter(str(tmp_path / "c")) as w:
        for key in ckpt.keys():
            w.add_array(key, ckpt.tensor(key))
    reader = tf.train.load_checkpoint(str(tmp_path / "c"))
    original = tf.train.load_checkpoint(prefix("dtypes"))
    for key, _ in tf.train.list_variables(prefix("dtypes")):
        a, b = np.asarray(reader.get_tensor(key)), np.asarray(original.get_tensor(key))
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tolist() == b.tolist() if a.dtype.kind in "OS" else a.tobytes() == b.tobytes()


def test_baked_bytes_equal_the_shadow_bytes(tmp_path):
    result = bake_ema(FIXTURES / "towers_bn", tmp_path / "o")
    with open_checkpoint(FIXTURES / "towers_bn") as src, open_checkpoint(result.prefix) as out:
        for target, shadow in result.replaced.items():
            assert out.entry(target).crc32c == src.entry(shadow).crc32c
            assert out.tensor(target).tobytes() == src.tensor(shadow).tobytes()


def test_restore_ema_never_imports_numpy(tmp_path):
    """A TensorFlow checkpoint's stored bytes are copied as they are: restore-ema has no use
    for NumPy (~30 ms of every run, ~8% of a 1 GB restore-ema), nor for the export writers."""
    code = ("import sys; from ckpt_tools.cli import main\n"
            "try:\n    main(['restore-ema', sys.argv[1], '--out', sys.argv[2], '--json'])\n"
            "except SystemExit as exc:\n    code = exc.code\n"
            "bad = [m for m in sys.modules if m.split('.')[0] == 'numpy' or\n"
            "       m.startswith('ckpt_tools.export')]\n"
            "print('IMPORTED', bad, file=sys.stderr); sys.exit(1 if bad or code else 0)")
    proc = subprocess.run([sys.executable, "-c", code, str(FIXTURES / "towers_bn"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["replaced"]
