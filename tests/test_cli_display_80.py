"""review-13-user-u14 F2: ``ckpt list`` at 80 columns keeps what tells rows apart.

- The ema column's ``of X`` never elides the part of X that says which variable it is
  (``of …/kernel`` for ``dense_1/kernel`` beside ``dense/kernel``): every target reads as
  exactly one variable.
- A column is never narrowed below its own floor because another is already narrower than
  its (the TF1 table's collections column was cut to 8 under an 11-wide header, so the ema
  marks sat under "collections"): the header and its cells line up, or the column is hidden.
- An open pairing's cell (``of ? (12 candidates)``) is short enough never to be cut
  mid-word; the summary line says 'ckpt map' lists the candidates.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from _corpus import run_cli
from helpers import FIXTURES, set_terminal

from ckpt_tools.cli._layout import Column, fit_columns
from ckpt_tools.cli._shorten import ELLIPSIS


def _reads_as(cell: str, names: list[str]) -> list[str]:
    """The names ``cell`` can stand for: each ``…`` is one or more whole ``/`` segments."""
    pattern = "".join("[^/]+(?:/[^/]+)*" if part == ELLIPSIS else re.escape(part)
                      for part in re.split(f"({ELLIPSIS})", cell))
    return [n for n in names if re.fullmatch(pattern, n)]


def test_ema_targets_read_as_one_variable_at_80_columns(capsys, monkeypatch):
    path = str(FIXTURES / "keras_ema" / "adam.keras")  # seq/dense/kernel, seq/dense_1/kernel
    code, doc, _ = run_cli(["list", path, "--json"], capsys)
    assert code == 0
    variables = json.loads(doc)["variables"]
    names = [v["path"] or v["name"] for v in variables]
    by_key = {v["key"]: v["path"] or v["name"] for v in variables}
    truth = {v["path"] or v["name"]: by_key[v["ema_of"]] for v in variables if v["ema_of"]}
    assert len(truth) == 6
    set_terminal(monkeypatch)
    code, out, _ = run_cli(["list", path, "--role", "ema"], capsys)
    assert code == 0
    rows = [re.split(r" {2,}", line.strip()) for line in out.splitlines()[2:] if line.strip()]
    rows = [r for r in rows if r[-1].startswith("of ")]
    assert len(rows) == 6, out
    for row in rows:
        (target,) = _reads_as(row[-1][3:], names)  # one variable, never two
        # a name the table marks '?' (its pairing by fit()'s order, unproven) is the --json
        # path without the mark (90773e2)
        (shadow,) = _reads_as(row[0].removesuffix("?"), list(truth))
        assert truth[shadow] == target, (row, out)
    assert all(len(line) <= 80 for line in out.splitlines()), out


def test_a_column_is_not_narrowed_below_its_floor_for_another():
    # name (natural 26, min 32), collections (natural 27, min 12), ema (natural 4, min 14):
    # the ones already below their minimum have negative room, which must not push
    # collections below 12 (it was cut to 8 under its 11-wide header)
    columns = [Column("name", shrink="middle", min_width=32, floor=24),
               Column("dtype", hide=1), Column("shape"), Column("size", "right", hide=2),
               Column("role"), Column("collections", shrink="end", min_width=12, hide=3),
               Column("ema", shrink="middle", min_width=14, floor=10, lead="of ")]
    natural = [26, 7, 5, 4, 14, 27, 4]
    shown, widths = fit_columns(columns, natural, 80, 2)
    for i in shown:
        assert widths[i] >= len(columns[i].name), (columns[i].name, widths)
        if columns[i].shrink:
            assert widths[i] >= min(columns[i].min_width, natural[i]), (columns[i].name, widths)
    assert sum(widths[i] for i in shown) + 2 * (len(shown) - 1) <= 80


def test_tf1_table_header_lines_up_with_its_cells(tmp_path, capsys, monkeypatch):
    tf = pytest.importorskip("tensorflow")
    import numpy as np

    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        x = tf1.placeholder(tf.float32, [None, 4])
        w = tf1.get_variable("W", [4, 2])
        b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer())
        step = tf1.train.get_or_create_global_step()
        train = tf1.train.MomentumOptimizer(0.1, 0.9).minimize(
            tf.reduce_mean(tf.matmul(x, w) + b), global_step=step)
        ema = tf1.train.ExponentialMovingAverage(0.9, step)
        with tf.control_dependencies([train]):
            top = ema.apply(tf1.trainable_variables())
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            s.run(top, {x: np.ones((2, 4))})
            tf1.train.Saver().save(s, str(tmp_path / "model.ckpt"), global_step=step)
    set_terminal(monkeypatch)
    code, out, _ = run_cli(["list", str(tmp_path)], capsys)
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("name "))
    at = header.index(" ema") + 1
    marks = [line for line in lines if line.rstrip().endswith(("✓", "of W", "of b"))]
    assert len(marks) == 4, out
    for line in marks:
        assert line[at:at + 1] in ("✓", "o"), (at, line, out)
    # the checkpoint's path is printed whole on its own line (copied from there, never folded),
    # so it alone may pass 80 columns: pytest-xdist's tmp paths are long
    path = str(tmp_path / "model.ckpt-1")
    assert all(len(line) <= 80 for line in lines if line != path), out


def test_open_pairing_cell_is_whole(capsys, monkeypatch, tmp_path):
    set_terminal(monkeypatch)
    # without its .meta (whose AssignMovingAvg ops prove W/avg an average) W/avg stays open
    for f in (FIXTURES / "custom_ema_name").glob("*"):
        if f.suffix != ".meta":
            shutil.copy(f, tmp_path / f.name)
    code, out, err = run_cli(["list", str(tmp_path)], capsys)
    assert code == 0, err
    # one candidate is named, unproven (u33 F3: 'of ? (1 candidate)')
    assert "? (3 averages)" in out and "of ? (W)" in out and "1 candidate" not in out, out
    assert "ckpt…" not in out and "see 'ckpt map'" not in out, out
    assert "'ckpt map' lists the candidates" in " ".join(out.split()), out
