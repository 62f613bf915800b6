"""The benchmark (bench/) must not rot: its checkpoint generator and a --quick smoke run.

The benchmarks themselves are not unit tests; this only checks that ``bench/run.py`` still runs
end to end on a few-MB checkpoint and reports every row with sane numbers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ckpt_tools import open_checkpoint

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(name: str):
    """Imports ``bench/<name>.py`` under a private name (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


make_ckpt = _load("make_ckpt")
tasks = _load("tasks")

EXPECTED_ROWS = {
    ("list latency (whole process)", "inspect_checkpoint"),
    ("list latency (whole process)", "tf.train.list_variables"),
    ("list latency, human table", "inspect_checkpoint"),
    ("read throughput", "tf get_tensor()"),
    ("verified read, one pass (chunks)", "physical: mmap"),
    ("restore-ema (whole process)", "tf Saver restore+save"),
    ("peak RSS, list", "inspect_checkpoint"),
    ("peak RSS, restore-ema", "tf Saver restore+save"),
    ("restore-ema (whole process)", "plain cp of the same files"),
    # the same durability as restore-ema's fsynced output: cp, then sync of the copies
    ("restore-ema (whole process)", "cp, then sync of the copies"),
    ("cp, then sync of the copies", "plain cp of the same files"),
    ("ckpt stats (streamed, verified)", "verified read of the same bytes"),
    ("ckpt diff --ema (streamed, verified)", "verified read of the same bytes"),
    ("peak RSS, export npz", "largest tensor + 100 MB"),
    ("peak RSS, export safetensors", "largest tensor + 100 MB"),
    # A BERT-like model's repeated blocks: Keras loads an .h5 by layer position, which a TF
    # checkpoint does not record, so export refuses it (exit 5); the .h5 writer is measured on
    # the largest tensor's layer alone.
    ("peak RSS, export h5, largest tensor's layer (the whole model: exit 5, repeated blocks)",
     "largest tensor + 100 MB"),
    ("ckpt list -q (whole process)", "ckpt list (table)"),
}


def test_parse_size():
    assert make_ckpt.parse_size("1G") == 1 << 30
    assert make_ckpt.parse_size("200M") == 200 << 20
    assert make_ckpt.parse_size("512k") == 512 << 10
    assert make_ckpt.parse_size("1000") == 1000
    with pytest.raises(ValueError, match="invalid size"):
        make_ckpt.parse_size("lots")


@pytest.mark.parametrize("size", ["2M", "50M", "1G"])
def test_layout_keeps_the_variable_count(size):
    specs = make_ckpt.layout(make_ckpt.parse_size(size))
    assert len(specs) == 1003
    assert sum(s.role == "ema" for s in specs) == sum(s.role == "weight" for s in specs) == 334
    total = sum(s.nbytes for s in specs)
    assert 0.8 < total / make_ckpt.parse_size(size) < 1.1


def test_touch_does_not_depend_on_alignment():
    data = np.random.default_rng(1).integers(0, 256, 1001, dtype=np.uint8)
    whole = tasks.touch(data)
    assert whole == int(np.bitwise_xor.reduce(data))
    assert tasks.touch(data[3:]) ^ tasks.touch(data[:3]) == whole
    assert tasks.touch(memoryview(data.tobytes())[5:]) == tasks.touch(data[5:])


def test_crc_floor_reads_the_same_bytes_as_mmap(tmp_path):
    # The one-core floor row is only comparable if it touches exactly what mmap touches.
    data = np.random.default_rng(2).integers(0, 256, (3 << 20) + 7, dtype=np.uint8)
    path = tmp_path / "data"
    path.write_bytes(data.tobytes())
    expected = (data.size, int(np.bitwise_xor.reduce(data)))
    assert tasks.read_physical("mmap", [str(path)]) == expected
    assert tasks.read_physical("mmap-crc", [str(path)]) == expected


def test_generated_checkpoint_reads_in_tensorflow(tmp_path, tf):
    prefix = make_ckpt.write_checkpoint(str(tmp_path / "ckpt"), 2 << 20)
    assert all(os.path.getsize(p) > 0 for p in make_ckpt.data_files(prefix))
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    with open_checkpoint(prefix) as ckpt:
        assert ckpt.reader.num_shards == 2
        assert sorted(shapes) == ckpt.keys()
        for key in ckpt.keys():
            ours = ckpt.tensor(key)
            theirs = reader.get_tensor(key)
            assert list(shapes[key]) == list(ours.shape)
            assert theirs.dtype == ours.dtype
            np.testing.assert_array_equal(theirs, ours)
        assert ckpt.tensor("global_step") == 1000


def test_quick_run(tmp_path, capsys):
    out, md = tmp_path / "results.json", tmp_path / "results.md"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--quick", "--workdir", str(tmp_path / "work"),
         "--json", str(out), "--markdown", str(md)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    rows = results["rows"]
    assert EXPECTED_ROWS <= {(r["metric"], r["vs"]) for r in rows}
    assert {r["metric"] for r in rows if r["vs"].startswith("physical")} == {
        "read throughput", "read throughput, verify=False", "verified read, one pass (chunks)",
        "one-core floor of a verified read", "verified read, per CPU second (all threads)"}
    assert ("verified read, one pass (chunks)", "floor: mmap + CRC32C, one core") in {
        (r["metric"], r["vs"]) for r in rows}
    for r in rows:
        if r["unit"]:
            assert r["ours"] > 0 and r["baseline"] > 0 and r["ratio"] > 0, r
    identity = [r for r in rows if r["metric"] == "restore-ema output"]
    assert identity and all(r["met"] for r in identity)
    size = results["sizes"][0]
    h5 = size["export"]["h5"]
    assert "same names and shapes" in h5["refused"] and h5["subset"] == "embedding/*"
    assert h5["bytes"] > 0 and h5["maxrss_mb"] > 0
    assert size["bit_identity"]["identical"] and size["bit_identity"]["ema_applied"]
    # --quick: a checkpoint of about 100 tensors (1,003 take TensorFlow's .meta and bake a
    # minute); every one of them compared
    assert size["tensors"] == len(make_ckpt.layout(4 << 20, make_ckpt.layers_for(100))) == 103
    assert size["bit_identity"]["tensors"] == size["tensors"]
    assert results["machine"]["cores"] >= 1 and results["command"].startswith("python ")
    assert md.read_text().startswith("## Benchmarks")
    assert "(103 float32 tensors:" in md.read_text()
    assert not (tmp_path / "work" / "ckpt-4M").exists()
    _list_rows_alone_report(results, capsys)
    _stream_rows_alone_report(results, capsys)


def _stream_rows_alone_report(results: dict, capsys) -> None:
    """``--only stream`` results (the verified read and stats/diff alone): the stats, opt-in
    histogram and diff rows against the verified read, in the console and the markdown."""
    sys.path.insert(0, str(BENCH))
    try:
        import report
    finally:
        sys.path.remove(str(BENCH))
    size = results["sizes"][0]
    alone = dict(results, many=None, sizes=[{"label": size["label"], "only": "stream",
                                             "read": size["read"], "stream": size["stream"]}])
    alone["rows"] = report.rows(alone)
    assert {r["metric"] for r in alone["rows"]} == {
        f"{name}{suffix}" for name in ("ckpt stats", "ckpt stats --histogram", "ckpt diff --ema")
        for suffix in (" (streamed, verified)", ", CPU seconds (all threads)")} | {
        "verified read, one pass (chunks)"}  # the target, re-checkable in 15 s
    assert [r["met"] for r in alone["rows"] if "--histogram" in r["metric"]] == [None, None]
    capsys.readouterr()
    report.print_console(alone)
    assert "ckpt diff --ema (streamed, verified)" in capsys.readouterr().out
    assert "ckpt stats (streamed, verified)" in report.markdown(alone)


def _list_rows_alone_report(results: dict, capsys) -> None:
    """``--sizes ""`` measures only the list rows: the console and markdown reports of such a
    run (no size, so no import profile) print the list rows instead of failing."""
    sys.path.insert(0, str(BENCH))
    try:
        import report
    finally:
        sys.path.remove(str(BENCH))
    alone = dict(results, sizes=[])
    alone["rows"] = report.rows(alone)
    assert alone["rows"] and all("vars" in r["size"] for r in alone["rows"]), alone["rows"]
    capsys.readouterr()
    report.print_console(alone)
    printed = capsys.readouterr().out
    assert "list latency (whole process)" in printed
    assert "list latency (whole process)" in report.markdown(alone)
    # the import budget and the start-up floor come with the list rows alone too
    assert "Import budget, measured/budget ms" in printed
    assert "Import budget, measured/budget ms" in report.markdown(alone)
    metrics = {r["metric"] for r in alone["rows"]}
    assert {"interpreter start-up (python -c pass)",
            "interpreter start-up without site (-S)"} <= metrics


def test_show_full_rows(tmp_path):
    """``--only show-full``: ``ckpt show --full`` (and ``--json``) on one tensor written in the
    bench, each peak RSS beside the tensor's bytes with its target (s29g left no bench row
    for the streamed values)."""
    show_full = _load("show_full")
    sys.path.insert(0, str(BENCH))
    try:
        import report
    finally:
        sys.path.remove(str(BENCH))
    env = {**show_full.child_env(), "PYTHONPATH": str(BENCH.parent)}
    result = show_full.bench_show_full(64 << 10, str(tmp_path), env)
    assert result["values"] == 16_000 and result["tensor_bytes"] == 64_000
    for name in show_full.SHOWN:  # every value written: 5+ bytes of text each
        assert result[name]["out_bytes"] > 5 * 16_000 and result[name]["maxrss_mb"] > 0
    with open_checkpoint(str(tmp_path / "show-full" / "model.ckpt")) as ckpt:
        assert ckpt.tensor("model/w").shape == (16, 1000)
    rows = report.rows({"many": None, "sizes": [
        {"label": "64K", "only": "show-full", "show_full": result}]})
    assert [r["vs"] for r in rows] == ["the tensor's bytes"] * 2
    assert all(r["met"] is not None and r["ratio"] is not None for r in rows), rows
    assert [r["metric"].split(" (")[0] for r in rows] == [
        "peak RSS, ckpt show --full", "peak RSS, ckpt show --full --json"]


def test_vtr_list_rows():
    """``--only vtr-list``: ``ckpt list``/``map`` of a TF1 vtr checkpoint at N and N/4
    variables, each command's growth in CPU seconds against its target (4x the variables: at
    most 5x the time) and in wall time (info). Rows only: the checkpoints take TensorFlow
    minutes to write (``python bench/run.py --only vtr-list`` measures them)."""
    vtr_list = _load("vtr_list")
    sys.path.insert(0, str(BENCH))
    try:
        import report
    finally:
        sys.path.remove(str(BENCH))

    def timed(wall: float, cpu: float) -> dict:
        return {"wall_s": wall, "cpu_s": cpu, "runs": [(wall, cpu)]}

    result = {"variables": {
        "500": {"ckpt list --json": timed(1.0, 0.5), "ckpt map --json": timed(1.0, 0.5)},
        "2000": {"ckpt list --json": timed(4.0, 2.0), "ckpt map --json": timed(9.0, 8.0)}}}
    rows = report.rows({"many": None, "sizes": [
        {"label": "2,000 vars", "only": "vtr-list", "vtr_list": result}]})
    by = {r["metric"]: r for r in rows}
    assert by["ckpt list --json, CPU seconds"]["ratio"] == 4.0
    assert by["ckpt list --json, CPU seconds"]["met"] is True
    assert by["ckpt list --json, CPU seconds"]["target"] == \
        f"<= {vtr_list.GROWTH_TARGET:g}x for 4x the variables"
    assert by["ckpt map --json, CPU seconds"]["met"] is False  # 16x: quadratic
    assert by["ckpt map --json, wall seconds"]["met"] is None
    assert {r["vs"] for r in rows} == {"the same at 500 vars"}
    assert {r["size"] for r in rows} == {"2,000 vars (vtr, .meta)"}
