"""A second local writer into a NEW ``--out`` directory that another process is staging (a
live, locked ``.<out>.tmp-*`` sibling) is refused before it reads any tensor (exit 7, naming
the live writer's pid), with or without ``--force``: only an existing ``--out`` has a lock of
its own, so it used to run to the end and then replace the first's output or fail."""

from __future__ import annotations

import shutil

import pytest
from helpers import FIXTURES, run_cli, start_paused


def _hidden(d):
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("second", [["average", "--last", "2"], ["restore-ema"]])
def test_a_second_writer_into_a_new_out_being_staged_is_refused(tmp_path, second,
                                                                 no_tensor_reads):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "towers_bn", run)
    out = tmp_path / "cc"
    first, what = start_paused(["average", str(run), "--last", "2", "--out", str(out), "-q"],
                               1, tmp_path / "flag")
    assert what is not None and ".cc.tmp-" in what, what
    try:
        stage = _hidden(tmp_path)
        assert len(stage) == 1 and not out.exists(), stage
        for force in ([], ["--force"]):
            code, _, err = run_cli([second[0], str(run), *second[1:], "--out", str(out),
                                    *force])
            assert code == 7, err
            lines = [line for line in err.splitlines() if line.startswith("error:")]
            assert len(lines) == 1, err
            assert f"{out}: another process is writing it (pid {first.pid})" in lines[0]
            assert ".tmp-" not in lines[0], lines[0]  # errors name your path
        assert _hidden(tmp_path) == stage  # the live stage is untouched
    finally:
        (tmp_path / "flag").unlink()
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert _hidden(tmp_path) == []
    code, _, err = run_cli(["verify", str(out)])
    assert code == 0, err
