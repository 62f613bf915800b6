"""The README's commands and evaluation example run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_readme_opens_with_the_two_setup_commands():
    first = re.search(r"```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert first[0] == "pip install -e . && ckpt list fixtures/towers_bn"
    assert first[1].startswith('pip install -e ".[test]" "tensorflow-cpu==')
    assert first[1].endswith("&& python -m pytest -q")
    ci = (ROOT / ".ci" / "run").read_text()
    assert first[1] in ci


def test_readme_evaluation_example_runs():
    block = next(b for b in re.findall(r"```python\n(.*?)```", README, re.S)
                 if "restore_ema" in b)
    proc = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "'W': 'W/ExponentialMovingAverage'" in proc.stdout


def test_readme_list_example_matches_the_tool():
    from typer.testing import CliRunner

    from ckpt_tools.cli import app

    result = CliRunner().invoke(app, ["list", "fixtures/towers_bn", "--role", "weight",
                                      "--role", "bn_stat"],
                                 env={"COLUMNS": "160", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert result.exit_code == 0
    for line in result.stdout.splitlines()[2:8]:
        assert line.rstrip() in README, line
