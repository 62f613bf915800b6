"""An ``s3://`` output's ``.index`` is its commit point: ``average`` uploaded every ``.meta``
(the doubting graph it carries beside the output, and the output's own) after the ``.index``,
so a kill (or a concurrent reader) between the two saw the index without the graph that marks
its keys unreliable, and ``export`` handed a swapping run's raw weights back as the averages,
exit 0; with ``--force`` the new index was even read with the OLD output's ``.meta``
(review-28-attack-r102 F1, F2). A failed upload said "no .index: nothing readable was
changed" though the index had been uploaded (F4).

Each writer is stopped at the pause point before each object it uploads (the writers' test
hook, ``formats._write.pause_point``): what a reader sees there is also what a ``kill -9``
there leaves; ``export`` must then refuse (missing,
exit 3; doubted, exit 6) or give the averages bit for bit. Truth: ``sess.run`` of
``ema.average(v)`` at each save (:mod:`_sibling_runs`)."""

from __future__ import annotations

import numpy as np
import pytest
from _sibling_runs import RUN
from conftest import BUCKET
from helpers import error_line, run_cli, s3_keys
from helpers_tf1 import run_tf1_script

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

NAMES = ("model/W", "model/V")
SCRIPT = RUN + '''
run("swap", True)
run("swapall", True, every=True)
run("plainall", False, every=True)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("commit_order")
    return out, run_tf1_script(SCRIPT, out)


def _averages(truth, run: str) -> dict[str, np.ndarray]:
    return {k: np.mean([truth[f"{run}:{i}:avg:{k}"].astype(np.float64) for i in (2, 3)],
                       axis=0).astype(np.float32) for k in NAMES}


def _read(url: str, npz, truth, *runs: str) -> int:
    """Exports ``url``'s model.ckpt-3: refused as missing (3) or doubted (6), or exit 0 with
    the averages of one of ``runs`` bit for bit; returns the exit code."""
    code, _, err = run_cli(["export", f"{url}/model.ckpt-3", "--out", str(npz), "--force"])
    if code != 0:
        assert code in (3, 6), err
        return code
    with np.load(npz) as z:
        got = {k: z[k] for k in NAMES}
    assert any(all(np.array_equal(got[k], _averages(truth, r)[k]) for k in NAMES)
               for r in runs), f"{url}: not the averages of {runs}"
    return code


class _Killed(BaseException):
    """Stands for ``kill -9`` at a pause point: caught by none of the writer's handlers."""


def _at_every_upload(argv: list[str], url_of, prepare, check, monkeypatch) -> dict[str, int]:
    """Runs ``argv + [--out url_of(n)]`` stopped (:class:`_Killed`) at the writers' pause
    point before its n-th upload (``put <url>``), n = 1, 2, ... until it finishes without
    reaching one; after each stop runs ``check(url)`` on what it left (what a concurrent
    reader sees there, and what a kill there leaves).

    Returns:
        what each ``check`` returned, by the object it was about to upload (``done``: the
        finished output).
    """
    from ckpt_tools.formats import remote_stream, remote_write

    seen: dict[str, int] = {}
    for n in range(1, 30):
        url = url_of(n)
        prepare(url)
        puts: list[str] = []

        def pause(what: str, n: int = n, puts: list = puts) -> None:
            if what.startswith("put "):
                puts.append(what)
                if len(puts) == n:
                    raise _Killed(what)

        monkeypatch.setattr(remote_write, "pause_point", pause)
        monkeypatch.setattr(remote_stream, "pause_point", pause)
        try:
            code, _, err = run_cli([*argv, "--out", url, "-q"])
        except _Killed as stop:
            seen[str(stop).rsplit("/", 1)[1]] = check(url)
            continue
        assert code == 0 and len(puts) == n - 1, err
        seen["done"] = check(url)
        return seen
    raise AssertionError("never finished")


def _copy(s3, src: str, dst: str) -> None:
    for key in s3_keys(s3, src + "/"):
        s3["client"].copy_object(Bucket=BUCKET, Key=dst + key[len(src):],
                                 CopySource={"Bucket": BUCKET, "Key": key})


def test_the_carried_graph_lands_before_the_index(made, s3, tmp_path, monkeypatch):
    """F1: the swapping run's meta-less steps 2, 3; the graph of step 1 is carried."""
    out, truth = made
    argv = ["average", str(out / "swap/model.ckpt-2"), str(out / "swap/model.ckpt-3")]
    seen = _at_every_upload(argv, lambda n: f"s3://{BUCKET}/f1/{n}", lambda url: None,
                            lambda url: _read(url, tmp_path / "x.npz", truth), monkeypatch)
    assert seen["model.ckpt-3.index"] == 3 and seen["model.ckpt-1.meta"] == 3, seen
    assert seen["checkpoint"] == 6 and seen["done"] == 6, seen


def test_the_own_graph_lands_before_the_index(made, s3, tmp_path, monkeypatch):
    """F2 A: the swapping run with its graph at every save: the output's own .meta."""
    out, truth = made
    argv = ["average", str(out / "swapall/model.ckpt-2"), str(out / "swapall/model.ckpt-3")]
    seen = _at_every_upload(argv, lambda n: f"s3://{BUCKET}/f2/{n}", lambda url: None,
                            lambda url: _read(url, tmp_path / "x.npz", truth, "swapall"),
                            monkeypatch)
    assert seen["model.ckpt-3.meta"] == 3 and seen["model.ckpt-3.index"] == 3, seen
    assert seen["checkpoint"] == 0 and seen["done"] == 0, seen


def test_force_never_pairs_the_new_index_with_the_old_graph(made, s3, tmp_path, monkeypatch):
    """F2 B: a plain run's average --force over the swapping run's on S3."""
    out, truth = made
    first = f"s3://{BUCKET}/f2b/first"
    code, _, err = run_cli(["average", str(out / "swapall/model.ckpt-2"),
                            str(out / "swapall/model.ckpt-3"), "--out", first])
    assert code == 0, err
    argv = ["average", str(out / "plainall/model.ckpt-2"), str(out / "plainall/model.ckpt-3"),
            "--force"]
    seen = _at_every_upload(argv, lambda n: f"s3://{BUCKET}/f2b/{n}",
                            lambda url: _copy(s3, "f2b/first", url[len(f"s3://{BUCKET}/"):]),
                            lambda url: _read(url, tmp_path / "x.npz", truth, "swapall",
                                              "plainall"), monkeypatch)
    assert seen["model.ckpt-3.meta"] == 3 and seen["model.ckpt-3.index"] == 3, seen
    assert seen["done"] == 0, seen
    assert _read(f"s3://{BUCKET}/f2b/first", tmp_path / "x.npz", truth, "swapall") == 0


@pytest.mark.parametrize("case, refused, says", [
    ("a", "model.ckpt-1.meta", "; nothing was uploaded"),
    ("b", "model.ckpt-3.carried.json", "but not the .index that commits the checkpoint"),
    ("c", "checkpoint", "is complete and readable, but the 'checkpoint' state file was not"),
], ids=["carried-graph", "record", "state-file"])
def test_a_failed_upload_says_what_is_readable(made, s3, tmp_path, monkeypatch, case, refused,
                                               says):
    """F4: the PUT of one object answered 403 AccessDenied (a prefix-scoped policy)."""
    from moto.s3 import models
    from moto.s3.exceptions import S3AccessDeniedError

    out, truth = made
    prefix = f"f4/{case}"
    put = models.S3Backend.put_object

    def refusing(self, bucket_name, key_name, *args, **kwargs):
        if key_name == f"{prefix}/{refused}":
            raise S3AccessDeniedError()
        return put(self, bucket_name, key_name, *args, **kwargs)

    monkeypatch.setattr(models.S3Backend, "put_object", refusing)
    url = f"s3://{BUCKET}/{prefix}"
    code, _, err = run_cli(["average", str(out / "swap/model.ckpt-2"),
                            str(out / "swap/model.ckpt-3"), "--out", url])
    line = error_line(err)
    assert code == 1 and "forbidden" in line and says in line, err
    index = f"{prefix}/model.ckpt-3.index"
    assert (index in s3_keys(s3, prefix + "/")) == (refused == "checkpoint")
    monkeypatch.setattr(models.S3Backend, "put_object", put)
    expect = 6 if refused == "checkpoint" else 3
    assert _read(url, tmp_path / "x.npz", truth) == expect


def test_the_streamed_output_puts_its_graph_before_its_index(s3, monkeypatch):
    """F2 for restore-ema between S3 locations (streamed, nothing staged): the .meta is put
    before the .index too."""
    def check(url: str) -> int:
        keys = {k.rsplit("/", 1)[1] for k in s3_keys(s3, url[len(f"s3://{BUCKET}/"):] + "/")}
        index = {k for k in keys if k.endswith(".index")}
        assert not index or {k[: -len("index")] + "meta" for k in index} <= keys, keys
        return len(index)

    seen = _at_every_upload(["restore-ema", f"s3://{BUCKET}/towers_bn/"],
                            lambda n: f"s3://{BUCKET}/stream/{n}", lambda url: None, check,
                            monkeypatch)
    meta = next(k for k in seen if k.endswith(".meta"))
    assert seen[meta] == 0 and seen[meta[: -len("meta")] + "index"] == 0, seen
    assert seen["checkpoint"] == 1 and seen["done"] == 1, seen


def test_an_output_without_a_graph_never_lands_beside_an_old_one(made, s3):
    """F2 B for restore-ema: --add-scope writes no .meta (the graph names the old keys), so
    the earlier output's model.ckpt-3.meta would be read as the new keys' graph: refused."""
    out, _ = made
    url = f"s3://{BUCKET}/stale/a"
    src = str(out / "plainall/model.ckpt-3")
    code, _, err = run_cli(["restore-ema", src, "--out", url])
    assert code == 0 and "stale/a/model.ckpt-3.meta" in s3_keys(s3, "stale/a/"), err
    before = s3_keys(s3, "stale/a/")
    code, _, err = run_cli(["restore-ema", src, "--out", url, "--force", "--add-scope", "x/"])
    line = error_line(err)
    assert code == 7 and "model.ckpt-3.meta: exists, and the output has no .meta" in line, err
    assert s3_keys(s3, "stale/a/") == before
