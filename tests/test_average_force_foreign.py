"""``average --force`` may replace its own outputs only: it removed every same-stem ``.meta``
in --out without a checkpoint beside it as "an earlier average's copy" -- a swapping run's
only graph in a partial copy (F1), a V1 sharded checkpoint's own ``.meta`` (F2), the user's
``export_meta_graph`` file (F5) -- and the run's meta-less checkpoints then exported their raw
weights as the averages, exit 0 (review-27-attack-r95). Now it removes only the copies the
record of the output it replaces names, with the recorded bytes, read by no other checkpoint.
Truth: ``sess.run`` of ``ema.average(v)`` and ``v`` at each save."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from _sibling_runs import SCRIPT, V1_SCRIPT
from helpers import run_cli
from helpers_tf1 import run_tf1_script

NAMES = ("model/W", "model/V")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("average_force_foreign")
    truth = run_tf1_script(SCRIPT, out)
    truth.update(run_tf1_script(V1_SCRIPT, out))
    return out, truth


def _average(run, out, *flags: str) -> tuple[int, str]:
    code, _, err = run_cli(["average", str(run / "model.ckpt-3"), str(run / "model.ckpt-2"),
                            "--out", str(out), *flags])
    return code, err


def _export(prefix, out) -> tuple[int, str]:
    code, _, err = run_cli(["export", str(prefix), "--out", str(out)])
    return code, err


def _values(npz) -> dict[str, np.ndarray]:
    with np.load(npz) as z:
        return {k: z[k] for k in NAMES}


def test_a_swapping_runs_graph_in_out_is_kept(made, tmp_path):
    """F1: a partial copy of the swapping run (its graph at step 1, meta-less steps 2, 3)."""
    out, _ = made
    dest = tmp_path / "E"
    dest.mkdir()
    for f in (out / "swap").iterdir():
        if not f.name.startswith("model.ckpt-1.") or f.name.endswith(".meta"):
            shutil.copy(f, dest / f.name)
    assert _export(dest / "model.ckpt-3", tmp_path / "b.npz")[0] == 6
    code, err = _average(out / "plain", dest, "--name", "model.ckpt-10", "--force")
    assert code == 0 and "removed" not in err, err
    assert (dest / "model.ckpt-1.meta").read_bytes() == \
        (out / "swap" / "model.ckpt-1.meta").read_bytes()
    code, err = _export(dest / "model.ckpt-3", tmp_path / "a.npz")
    assert code == 6 and "model.ckpt-1.meta" in err, err  # gave the raw weights, exit 0
    assert not (tmp_path / "a.npz").exists()


def test_a_v1_sharded_checkpoints_own_meta_is_kept(made, tmp_path):
    """F2: model.ckpt-1.meta is the own graph of model.ckpt-1-00000-of-00001."""
    out, truth = made
    dest = tmp_path / "D"
    shutil.copytree(out / "v1swap", dest)
    code, err = _export(dest / "model.ckpt-1", tmp_path / "one.npz")
    assert code == 0, err
    code, err = _average(out / "plain", dest, "--name", "model.ckpt-9", "--force")
    assert code == 0 and "removed" not in err, err
    assert (dest / "model.ckpt-1.meta").exists()
    code, err = _export(dest / "model.ckpt-1", tmp_path / "a.npz")
    assert code == 0, err  # its own graph still proves the swap: TF's averages
    for key, value in _values(tmp_path / "a.npz").items():
        np.testing.assert_array_equal(value, truth[f"v1swap:1:avg:{key}"])
    code, err = _export(dest / "model.ckpt-3", tmp_path / "b.npz")
    assert code == 6, err  # gave the raw weights, exit 0


def test_the_users_graph_file_is_kept(made, tmp_path):
    """F5: model.ckpt.meta written by the user (a TF graph), and nothing to replace."""
    out, _ = made
    dest = tmp_path / "E"
    dest.mkdir()
    graph = (out / "swap" / "model.ckpt-1.meta").read_bytes()
    (dest / "model.ckpt.meta").write_bytes(graph)
    (dest / "README.txt").write_text("mine\n")
    code, err = _average(out / "plain", dest, "--force")
    assert code == 0 and "removed" not in err, err
    assert (dest / "model.ckpt.meta").read_bytes() == graph


def test_only_the_recorded_copies_of_the_replaced_output_go(made, tmp_path):
    """The copies an average carried are named in its record: --force replacing another
    output keeps them (they doubt the earlier output, which would export the mean of the raw
    weights as the averages without them); replacing that output removes them, but not a
    copy whose bytes were replaced since, nor one another meta-less checkpoint reads."""
    out, truth = made
    dest = tmp_path / "out"
    code, err = _average(out / "swap", dest)
    assert code == 0 and (dest / "model.ckpt-3.carried.json").exists(), err
    code, err = _average(out / "plain", dest, "--name", "model.ckpt-4", "--force")
    assert code == 0 and "removed" not in err, err
    code, err = _export(dest / "model.ckpt-3", tmp_path / "a.npz")
    assert code == 6 and "model.ckpt-1.meta" in err, err
    # replacing model.ckpt-3 itself removes its copy (model.ckpt-4 is doubted by it too:
    # kept while a meta-less checkpoint reads it)
    os.remove(dest / "model.ckpt-4.index")
    for f in os.listdir(dest):
        if f.startswith("model.ckpt-4."):
            os.remove(dest / f)
    code, err = _average(out / "plain", dest, "--force")
    assert code == 0 and "removed model.ckpt-1.meta" in err, err
    assert not (dest / "model.ckpt-1.meta").exists()
    assert not (dest / "model.ckpt-3.carried.json").exists()
    code, err = _export(dest / "model.ckpt-3", tmp_path / "p.npz")
    assert code == 0, err
    for key, value in _values(tmp_path / "p.npz").items():
        mean = np.mean([truth[f"plain:{i}:avg:{key}"].astype(np.float64) for i in (2, 3)],
                       axis=0)
        np.testing.assert_allclose(value, mean, rtol=1e-6)
    # a recorded name whose bytes are another file's now: kept
    code, err = _average(out / "swap", dest, "--force")
    assert code == 0 and "copied model.ckpt-1.meta" in err, err
    (dest / "model.ckpt-1.meta").write_bytes((out / "plain" / "model.ckpt-1.meta").read_bytes())
    code, err = _average(out / "plain", dest, "--force")
    assert code == 0 and "removed" not in err, err
    assert (dest / "model.ckpt-1.meta").exists()
