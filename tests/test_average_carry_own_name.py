"""The graph ``average`` carries beside its output (a swapping run's ``model.ckpt-1.meta``,
doubting the output's names) took the name of the own ``.meta`` of a checkpoint already in
--out: a plain ``Saver()`` run saved with ``write_meta_graph=False`` then read the swapping
graph as its own, which proved the swapped pairing of its plain keys: its raw weights
exported as the averages, exit 0, locally and on S3 (review-27-attack-r95 F3). A copy now
never takes ``<stem>.meta`` where a checkpoint of ``<stem>`` lies in --out (nor ``<name>-N.meta``
beside a meta-less ``<name>-N``). Truth: ``sess.run`` of ``ema.average(v)`` and ``v`` at each
save."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from _sibling_runs import NOMETA_SCRIPT, SCRIPT
from helpers import run_cli
from helpers_tf1 import run_tf1_script

NAMES = ("model/W", "model/V")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("average_carry_own_name")
    truth = run_tf1_script(SCRIPT, out)
    truth.update(run_tf1_script(NOMETA_SCRIPT, out))
    return out, truth


def _export(prefix: str, out, *flags: str) -> tuple[int, str]:
    code, _, err = run_cli(["export", prefix, "--out", str(out), *flags])
    return code, err


def _check_plain_step_1(npz, truth) -> None:
    with np.load(npz) as z:
        for key in NAMES:
            np.testing.assert_array_equal(z[key], truth[f"plainnm:1:avg:{key}"])
            assert not np.array_equal(z[key], truth[f"plainnm:1:raw:{key}"])


def _check_doubted_not_proven(prefix: str, tmp_path, truth) -> None:
    """The plain meta-less checkpoint beside the copy: doubted by it (never proven swapped,
    which exported its raw weights as the averages, exit 0); --not-swapped states the plain
    Saver: TF's averages, bit for bit."""
    code, err = _export(prefix, tmp_path / "a.npz")
    assert code == 6 and "--not-swapped" in err, err
    assert not (tmp_path / "a.npz").exists()
    code, err = _export(prefix, tmp_path / "n.npz", "--not-swapped")
    assert code == 0, err
    _check_plain_step_1(tmp_path / "n.npz", truth)


def test_a_copy_never_becomes_a_checkpoints_own_meta(made, tmp_path):
    out, truth = made
    dest = tmp_path / "P"
    shutil.copytree(out / "plainnm", dest)
    code, err = run_cli(["average", str(out / "swap" / "model.ckpt-3"),
                         str(out / "swap" / "model.ckpt-2"), "--out", str(dest), "--force"])[::2]
    assert code == 0, err
    assert not (dest / "model.ckpt-1.meta").exists(), sorted(os.listdir(dest))
    assert "model.ckpt-3-1.meta" in err, err
    _check_doubted_not_proven(str(dest / "model.ckpt-1"), tmp_path, truth)
    code, err = _export(str(dest / "model.ckpt-3"), tmp_path / "b.npz")
    assert code == 6, err  # the output is still doubted by its copy


def test_a_numbered_copy_skips_a_meta_less_checkpoint_of_its_name(made, tmp_path):
    """--name avg beside a meta-less ``avg-1`` (the plain run's step 1 under that name)."""
    out, truth = made
    dest = tmp_path / "P"
    dest.mkdir()
    for f in (out / "plainnm").iterdir():
        if f.name.startswith("model.ckpt-1."):
            shutil.copy(f, dest / f.name.replace("model.ckpt-1", "avg-1"))
    code, err = run_cli(["average", str(out / "swap" / "model.ckpt-3"),
                         str(out / "swap" / "model.ckpt-2"), "--out", str(dest),
                         "--name", "avg", "--force"])[::2]
    assert code == 0, err
    assert not (dest / "avg-1.meta").exists() and (dest / "avg-2.meta").exists(), \
        sorted(os.listdir(dest))
    _check_doubted_not_proven(str(dest / "avg-1"), tmp_path, truth)
    code, err = _export(str(dest / "avg"), tmp_path / "b.npz")
    assert code == 6, err


def test_an_s3_copy_never_becomes_a_checkpoints_own_meta(made, s3, tmp_path):
    from conftest import BUCKET
    from helpers import upload_dir

    out, truth = made
    upload_dir(s3["client"], out / "plainnm", BUCKET, "own/P")
    url = f"s3://{BUCKET}/own/P"
    code, err = run_cli(["average", str(out / "swap" / "model.ckpt-3"),
                         str(out / "swap" / "model.ckpt-2"), "--out", url, "--force"])[::2]
    assert code == 0, err
    listed = {o["Key"] for o in s3["client"].list_objects_v2(
        Bucket=BUCKET, Prefix="own/P/")["Contents"]}
    assert "own/P/model.ckpt-1.meta" not in listed, listed
    _check_doubted_not_proven(f"{url}/model.ckpt-1", tmp_path, truth)
    code, err = _export(f"{url}/model.ckpt-3", tmp_path / "b.npz")
    assert code == 6, err
