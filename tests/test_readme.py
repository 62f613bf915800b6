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
    assert first[1].endswith("&& python -m pytest -q -n auto --maxprocesses 4 --dist loadfile")
    ci = (ROOT / ".ci" / "run").read_text()
    assert first[1] in ci


def test_readme_evaluation_example_runs():
    block = next(b for b in re.findall(r"```python\n(.*?)```", README, re.S)
                 if "restore_ema" in b)
    # its own process, forked from the tests' TensorFlow fork server (as test_readme_examples
    # runs the Keras and TF2 examples): the ~6 CPU s import is shared
    from _tf_runner import run_python

    proc = run_python(["-c", block], cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "'W': 'W/ExponentialMovingAverage'" in proc.stdout


def _run_in_terminal(argv: list[str], columns: int = 80, cwd: Path = ROOT,
                     env: dict[str, str] | None = None) -> tuple[int, str]:
    """Runs ``argv`` in ``cwd`` with stdout and stderr on one pseudo-terminal ``columns`` wide
    (no ``COLUMNS``, no colours; ``env`` added to the environment), and returns its exit code
    and the text the terminal got."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env_added = env
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "LINES", "TTY_COMPATIBLE")}
    env["NO_COLOR"] = "1"
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                            env={**env, **(env_added or {})})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the process closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode().replace("\r\n", "\n")


def test_readme_list_example_is_what_an_80_column_terminal_shows():
    command = "ckpt list fixtures/towers_bn --role weight --role bn_stat"
    head = f"```console\n$ {command}\n"
    shown = README.split(head, 1)[1].split("```", 1)[0]
    code, text = _run_in_terminal([sys.executable, "-m", "ckpt_tools", *command.split()[1:]])
    assert code == 0
    assert text == shown
    assert all(len(line) <= 80 for line in text.splitlines())


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a document's headings (outside code blocks)."""
    found, fence = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return found


def test_readme_is_an_overview_and_its_docs_links_resolve():
    """The reference lives in docs/*.md (review-13-user-u14 F8): README keeps the overview,
    and every link between README.md and docs/ names a file and heading that exist."""
    assert len(README.splitlines()) < 1300
    docs = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}
    moved = {"setups.md", "remote.md", "averaging.md", "trainer.md", "benchmarks.md"}
    assert moved <= set(docs), sorted(docs)
    links = [("README.md", t) for t in re.findall(r"\]\((docs/[^)]+)\)", README)]
    links += [(name, t) for name, text in docs.items()
              for t in re.findall(r"\]\(([^)#:]*\.md(?:#[^)]*)?)\)", text)]
    assert links
    for source, target in links:
        base = ROOT if source == "README.md" else ROOT / "docs"
        path, _, anchor = target.partition("#")
        file = (base / path).resolve()
        assert file.is_file(), (source, target)
        if anchor:
            assert anchor in _anchors(file.read_text()), (source, target)


def test_readme_contents_name_every_section_and_links_resolve():
    """review-13-user-u15 F8: a table of contents at the top names every ``##`` section, and
    every in-page link of the README goes to a heading it has."""
    anchors = _anchors(README)
    contents = README.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    assert README.index("\n## Contents\n") < README.index("\n## Why\n")
    sections = [line[3:] for line in README.split("\n## Contents\n", 1)[1].splitlines()
                if line.startswith("## ")]
    assert len(sections) > 10, sections
    for title in sections:
        anchor = next(iter(_anchors(f"## {title}")))
        assert f"](#{anchor})" in contents, title
    for target in re.findall(r"\]\(#([^)]+)\)", README):
        assert target in anchors, target


def test_readme_list_json_contract_shows_every_field_list_emits():
    """review-21-user-u23 F6: the ``list --json`` contract (a format others parse) showed
    neither the variables' ``key`` nor the top-level ``saved_model`` that every output carries:
    each field ``ckpt list --json`` emits for a plain checkpoint is in the example, and
    ``key`` and ``saved_model`` have a row in the field table."""
    import json

    contract = README.split("### `ckpt list --json`", 1)[1].split("\n## ", 1)[0]
    example = contract.split("```json\n", 1)[1].split("```", 1)[0]
    shown = set(re.findall(r'"(\w+)":', example))
    proc = subprocess.run([sys.executable, "-m", "ckpt_tools", "list", "fixtures/towers_bn",
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    emitted = set(doc) | set(doc["variables"][0]) | set(doc["totals"]) | set(doc["shards"][0])
    assert emitted <= shown, sorted(emitted - shown)
    for field in ("key", "saved_model"):
        assert re.search(rf"^\| `{field}`( \(variable\))? \|", contract, re.M), field


def test_readme_says_which_groups_the_keras_order_values_leave_unchecked():
    """review-21-user-u23 F4: the README said two traded copies are refused, while groups of
    fewer than ``MIN_SIZE`` elements are never compared (two Dense(8) biases a loop traded went
    out exit 0): its fit_order paragraph states the limit and the note's word for it."""
    from ckpt_tools.keras_order_values import MIN_SIZE

    paragraph = " ".join(README.split("- `fit_order`: EMA copies", 1)[1]
                         .split("\n- `not_swapped`", 1)[0].split())
    assert f"groups of weights of {MIN_SIZE} elements or more" in paragraph
    assert f"`unchecked (under {MIN_SIZE} elements)`" in paragraph
    # every reason keras_order_values.unchecked() gives, and what the note shows of the
    # groups after the first: a count, not names (review-22-attack-r61 F4)
    for why in ("noise-level values", "not float"):
        assert f"`unchecked ({why})`" in paragraph, why
    assert "(2 unchecked)`), by the same three reasons, without naming them" in paragraph


def test_readme_tf_keras_bullet_leaves_out_weights_only_h5():
    """review-26-user-u28 F2: the tf_keras bullet said "legacy `.h5`: ckpt export PATH", which
    a user of ModelCheckpoint(save_weights_only=True) to ".h5" read as covering that file; it
    holds no optimizer state, and export refuses it (exit 6: tests/test_keras_tfk_apply.py,
    made by tf_keras). The bullet names only model.save()'s .h5 and says the other has none."""
    bullet = README.split("- **tf_keras (Keras 2)**", 1)[1].split("\n- ", 1)[0]
    said = " ".join(bullet.split())
    assert 'written by `model.save("m.h5")` (with the optimizer)' in said, said
    assert "`ModelCheckpoint(\"x.h5\", save_weights_only=True)`) holds no optimizer state" \
        in said, said


def test_readme_explains_the_records_beside_an_output():
    """review-28-user-u30 F2: the records restore-ema and average write beside an output are
    explained where the output is, --saver-def-wrote is in the options table, and the README
    no longer says a baked output cannot record what its bake rested on."""
    said = " ".join(README.split())
    assert "**Records beside an output.**" in said
    assert "`<name>.restored.json`" in said and "`<name>.carried.json`" in said
    assert "| `--saver-def-wrote` |" in README
    assert "does not record what its bake rested on: no weight file format" not in said


def test_readme_explains_the_record_inside_an_output():
    """review-28-attack-r105 F1-F5 (054bec1): outputs of doubted or stated runs carry their
    record in the bundle; the README names the key, says TensorFlow ignores it and what a copy
    without the sidecars does."""
    said = " ".join(README.split())
    assert "**Records inside an output.**" in said
    assert "`_CKPT_TOOLS_RECORD`" in said and "TensorFlow ignores it" in said
    assert "read without the `--averages-only` caveat" not in said
