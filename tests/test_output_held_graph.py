"""A second output written into the same ``--out`` with ``--force`` took as its own
``<name>.meta`` the graph ``ckpt average`` had carried beside another output (the swapping
run's ``model.ckpt-1.meta``, doubting the average ``model.ckpt-3``), replacing it or deleting
it; the first average then exported the swapping run's raw weights as the averages, exit 0
(review-28-attack-r102 F3: ``average --name model.ckpt-1``, ``restore-ema`` of a
``model.ckpt-1`` by default, a partial copy's lone graph). Such a name is refused (exit 7),
locally and on ``s3://``; the first output stays doubted (exit 6). Checkpoints: the real TF1
runs of :mod:`_sibling_runs` (graph written at the first save only)."""

from __future__ import annotations

import shutil

import pytest
from _sibling_runs import SCRIPT
from conftest import BUCKET
from helpers import error_line, run_cli, upload_dir
from helpers_tf1 import run_tf1_script


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("held_graph")
    run_tf1_script(SCRIPT, out)
    return out


def _swap_average(made, out: str) -> None:
    code, _, err = run_cli(["average", str(made / "swap/model.ckpt-2"),
                            str(made / "swap/model.ckpt-3"), "--out", out])
    assert code == 0, err


def _doubted(out: str, tmp_path) -> None:
    code, _, err = run_cli(["export", f"{out}/model.ckpt-3", "--out", str(tmp_path / "x.npz"),
                            "--force"])
    assert code == 6 and "model.ckpt-1.meta" in err, err


def _refused(argv: list[str], *words: str) -> None:
    code, _, err = run_cli(argv)
    line = error_line(err)
    assert code == 7 and "model.ckpt-1.meta" in line, err
    assert all(w in line for w in words), line


@pytest.mark.parametrize("second", ["average", "restore-ema"])
def test_force_never_takes_the_graph_carried_beside_another_output(made, tmp_path, second):
    out = str(tmp_path / "out")
    _swap_average(made, out)
    _doubted(out, tmp_path)
    plain = made / "plain"
    argv = (["average", str(plain / "model.ckpt-2"), str(plain / "model.ckpt-3"), "--name",
             "model.ckpt-1"] if second == "average" else
            ["restore-ema", str(plain / "model.ckpt-1")])  # its default name: model.ckpt-1
    _refused([*argv, "--out", out, "--force"], "model.ckpt-3")
    if second == "restore-ema":
        _refused([*argv, "--out", out, "--force", "--dry-run"], "model.ckpt-3")
    assert (tmp_path / "out" / "model.ckpt-1.meta").read_bytes() == (
        made / "swap/model.ckpt-1.meta").read_bytes()
    _doubted(out, tmp_path)


def test_force_never_takes_the_graph_a_partial_copy_reads(made, tmp_path):
    """The swapping run's graph beside its meta-less model.ckpt-2/3, no model.ckpt-1."""
    out = tmp_path / "copy"
    out.mkdir()
    for f in (made / "swap").iterdir():
        if not f.name.startswith("model.ckpt-1.") or f.name.endswith(".meta"):
            shutil.copy(f, out / f.name)
    _doubted(str(out), tmp_path)
    plain = made / "plain"
    _refused(["average", str(plain / "model.ckpt-2"), str(plain / "model.ckpt-3"), "--name",
              "model.ckpt-1", "--out", str(out), "--force"], "reads it as its graph")
    _doubted(str(out), tmp_path)


@pytest.mark.parametrize("second", ["average", "restore-ema"])
def test_force_never_takes_a_held_graph_on_s3(made, s3, tmp_path, second):
    pytest.importorskip("s3fs")
    url = f"s3://{BUCKET}/held/{second}"
    _swap_average(made, url)
    plain = made / "plain"
    argv = (["average", str(plain / "model.ckpt-2"), str(plain / "model.ckpt-3"), "--name",
             "model.ckpt-1"] if second == "average" else
            ["restore-ema", str(plain / "model.ckpt-1")])
    _refused([*argv, "--out", url, "--force"], "model.ckpt-3")
    _doubted(url, tmp_path)


def test_a_record_alone_holds_the_graph_on_s3(made, s3, tmp_path):
    """The other output's record names the graph though no checkpoint there reads it."""
    local = tmp_path / "avg"
    _swap_average(made, str(local))
    upload_dir(s3["client"], local, BUCKET, "held/record")
    for key in ("model.ckpt-3.index", "model.ckpt-3.data-00000-of-00001"):
        s3["client"].delete_object(Bucket=BUCKET, Key=f"held/record/{key}")
    plain = made / "plain"
    _refused(["average", str(plain / "model.ckpt-2"), str(plain / "model.ckpt-3"), "--name",
              "model.ckpt-1", "--out", f"s3://{BUCKET}/held/record", "--force"],
             "model.ckpt-3.carried.json records it")
