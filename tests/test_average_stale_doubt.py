"""``average --force`` into an --out holding the graph an earlier average carried beside its
output (``model.ckpt-1.meta``, doubting a swapping run's names): the copy was kept, and a
plain run's average written there was then doubted by it, export refused, with nothing said
(review-26-attack-r90 F4). --force now removes such same-stem graphs that no checkpoint of
their own lies beside, with the publish, and says so; a checkpoint's own .meta and the
inputs are never touched. Truth: ``sess.run`` of ``ema.average(v)`` at each save."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from _sibling_runs import SCRIPT
from helpers import run_cli
from helpers_tf1 import run_tf1_script

NAMES = ("model/W", "model/V")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("average_stale_doubt")
    return out, run_tf1_script(SCRIPT, out)


def _average(run, out, *flags: str) -> tuple[int, str]:
    code, _, err = run_cli(["average", str(run / "model.ckpt-3"), str(run / "model.ckpt-2"),
                            "--out", str(out), *flags])
    return code, err


def test_force_replaces_an_earlier_averages_carried_graph(made, tmp_path):
    out, truth = made
    dest = tmp_path / "out"
    code, err = _average(out / "swap", dest)
    assert code == 0 and (dest / "model.ckpt-1.meta").exists(), err
    # an unrelated checkpoint of the stem beside it keeps its own graph
    for f in (out / "plain").iterdir():
        if f.name.startswith("model.ckpt-1."):
            shutil.copy(f, dest / f.name.replace("model.ckpt-1", "model.ckpt-0"))
    code, err = _average(out / "plain", dest, "--force")
    assert code == 0 and "removed model.ckpt-1.meta" in err, err
    assert sorted(os.listdir(dest)) == sorted(
        ["checkpoint", "model.ckpt-3.index", "model.ckpt-3.data-00000-of-00001",
         "model.ckpt-0.index", "model.ckpt-0.data-00000-of-00001", "model.ckpt-0.meta"])
    code, _, err = run_cli(["export", str(dest / "model.ckpt-3"), "--out",
                            str(tmp_path / "a.npz")])
    assert code == 0, err  # refused by the stale copy's doubt before
    with np.load(tmp_path / "a.npz") as z:
        for key in NAMES:
            mean = np.mean([truth[f"plain:{i}:avg:{key}"].astype(np.float64) for i in (2, 3)],
                           axis=0)
            np.testing.assert_allclose(z[key], mean, rtol=1e-6)
    # and a doubted average forced over it carries its own copy again
    code, err = _average(out / "swap", dest, "--force")
    assert code == 0 and "copied model.ckpt-1.meta" in err, err
    code, _, err = run_cli(["export", str(dest / "model.ckpt-3"), "--out",
                            str(tmp_path / "b.npz")])
    assert code == 6 and "model.ckpt-1.meta" in err, err


def test_force_keeps_the_graphs_another_stem_reads(made, tmp_path):
    """An earlier average under --name avg carried its copy as avg-<N>.meta: the forced
    output model.ckpt-3 does not read it, so it stays, and nothing is said."""
    out, _ = made
    dest = tmp_path / "out"
    code, err = _average(out / "swap", dest, "--name", "avg")
    assert code == 0, err
    carried = sorted(f for f in os.listdir(dest) if f.endswith(".meta"))
    assert carried and all(f.startswith("avg-") for f in carried), carried
    code, err = _average(out / "plain", dest, "--force")
    assert code == 0 and "removed" not in err, err
    assert sorted(f for f in os.listdir(dest) if f.endswith(".meta")) == carried
    code, _, err = run_cli(["export", str(dest / "model.ckpt-3"), "--out",
                            str(tmp_path / "a.npz")])
    assert code == 0, err
