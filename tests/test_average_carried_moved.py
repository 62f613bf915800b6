"""A ``ckpt average`` output of a swapping run's meta-less checkpoints, moved the usual way
(``cp out/model.ckpt-3.* dest/``): the copy takes ``model.ckpt-3.carried.json`` but not the
carried ``model.ckpt-1.meta``, and ``export`` then wrote the mean of the raw weights as the
averages, exit 0 (review-28-user-u30 F1). The record beside it now refuses the pairing by names
(exit 6, naming the record and ``--no-meta``) while the graph it names is gone or changed.
``export --raw --no-meta``, which writes the averages there, no longer says "drop --raw"
(review-28-user-u30 F5).
Truth: ``sess.run`` of ``ema.average(v)`` and ``v`` at each save of a real swapping Saver."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _sibling_runs import SCRIPT
from helpers import run_cli
from helpers_tf1 import run_tf1_script

NAMES = ("model/W", "model/V")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("average_carried_moved")
    truth = run_tf1_script(SCRIPT, out)
    code, _, err = run_cli(["average", str(out / "swap" / "model.ckpt-3"),
                            str(out / "swap" / "model.ckpt-2"), "--out", str(out / "avg")])
    assert code == 0 and (out / "avg" / "model.ckpt-1.meta").exists(), err
    return out, truth, err


def test_the_note_names_the_record(made, tmp_path):
    """F3: the note of the copied graph names the record and why it is there; --json lists it."""
    out, _, err = made
    said = " ".join(err.split())
    assert "its record model.ckpt-3.carried.json names the copy" in said, err
    assert "moved without it is refused" in said, err
    code, text, err = run_cli(["average", str(out / "swap" / "model.ckpt-3"),
                               str(out / "swap" / "model.ckpt-2"), "--out", str(tmp_path / "j"),
                               "--json"])
    assert code == 0, err
    assert json.loads(text)["records"] == [str(tmp_path / "j" / "model.ckpt-3.carried.json")]


def _mean(truth, kind: str, key: str) -> np.ndarray:
    return np.mean([truth[f"swap:{i}:{kind}:{key}"].astype(np.float64) for i in (2, 3)], axis=0)


def _moved(out, dest):
    dest.mkdir()
    for f in (out / "avg").glob("model.ckpt-3.*"):  # cp avg/model.ckpt-3.* dest/
        shutil.copy(f, dest / f.name)
    assert (dest / "model.ckpt-3.carried.json").exists()
    assert not (dest / "model.ckpt-1.meta").exists()
    return dest / "model.ckpt-3"


def test_moved_without_its_carried_graph_is_refused(made, tmp_path):
    out, truth, _ = made
    ckpt = _moved(out, tmp_path / "dest")
    for cmd in (["export", str(ckpt), "--out", str(tmp_path / "d.npz")],
                ["export", str(ckpt), "--raw", "--out", str(tmp_path / "r.npz")],
                ["restore-ema", str(ckpt), "--out", str(tmp_path / "ema")]):
        code, _, err = run_cli(cmd)
        assert code == 6, (cmd, err)  # was 0: the mean of the raw weights as the averages
        line = err.strip()
        assert "\n" not in line and "model.ckpt-3.carried.json" in line, err
        assert "model.ckpt-1.meta" in line and "is not beside it" in line and "--no-meta" in line
    assert not (tmp_path / "d.npz").exists() and not (tmp_path / "ema").exists()
    # --no-meta --raw, as the refusal says, writes the keys as stored: the averages
    code, _, err = run_cli(["export", str(ckpt), "--raw", "--no-meta",
                            "--out", str(tmp_path / "s.npz")])
    assert code == 0, err
    with np.load(tmp_path / "s.npz") as z:
        for key in NAMES:
            np.testing.assert_allclose(z[key], _mean(truth, "avg", key), rtol=1e-6)


def test_carried_graph_with_other_bytes_is_refused(made, tmp_path):
    out, _, _ = made
    ckpt = _moved(out, tmp_path / "dest")
    data = (out / "avg" / "model.ckpt-1.meta").read_bytes()
    (tmp_path / "dest" / "model.ckpt-1.meta").write_bytes(data + b"\0")
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "d.npz")])
    assert code == 6 and "has other bytes than recorded" in err and "--no-meta" in err, err


def test_carried_graph_put_back_doubts_as_in_place(made, tmp_path):
    out, truth, _ = made
    ckpt = _moved(out, tmp_path / "dest")
    shutil.copy(out / "avg" / "model.ckpt-1.meta", tmp_path / "dest")
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "d.npz")])
    assert code == 6 and "carried.json" not in err and "--not-swapped" in err, err
    code, _, err = run_cli(["export", str(out / "avg"), "--raw", "--no-meta",
                            "--out", str(tmp_path / "a.npz")])
    # F5: these are the averages, so no "drop --raw" (that would write the raw weights)
    said = " ".join(err.split())
    assert code == 0 and "drop --raw" not in said and "swapping Saver" in said, err
    with np.load(tmp_path / "a.npz") as z:
        for key in NAMES:
            np.testing.assert_allclose(z[key], _mean(truth, "avg", key), rtol=1e-6)


def test_symlinked_carried_graph_is_named_a_symlink(made, tmp_path):
    """review-28-attack-r105 F6: the carried graph beside the copy is a symlink to the very
    recorded bytes: refused (a symlink is not read through), saying so, not "has other bytes
    than recorded" (which sends the user hunting a corrupted graph)."""
    out, _, _ = made
    ckpt = _moved(out, tmp_path / "dest")
    (tmp_path / "dest" / "model.ckpt-1.meta").symlink_to(out / "avg" / "model.ckpt-1.meta")
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "d.npz")])
    said = " ".join(err.split())
    assert code == 6 and "is a symlink" in said and "other bytes" not in said, err
