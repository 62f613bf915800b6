"""Two commands in one process (the library, a notebook, the tests' in-process CLI) writing
into one ``s3://`` prefix: the second listed the prefix through the first's s3fs filesystem,
whose directory listing cache predated the first's uploads (they go around s3fs), so it
took the first output's ``checkpoint`` state file for new and was refused "already exists
(another writer created it meanwhile)" on a correct run (s28f "Seen, not fixed").
``Session.forget`` now drops s3fs's cached listing too. No ``remote.begin()`` here: a local
input starts no session of its own. Truth: ``sess.run`` of ``ema.average(v)`` at each save
(:mod:`_sibling_runs`)."""

from __future__ import annotations

import numpy as np
import pytest
from _sibling_runs import RUN
from conftest import BUCKET
from helpers import run_cli, s3_keys
from helpers_tf1 import run_tf1_script

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

NAMES = ("model/W", "model/V")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("own_writes")
    return out, run_tf1_script(RUN + '\nrun("plainall", False, every=True)\n', out)


def _exports_averages(url: str, step: int, truth, tmp_path) -> None:
    npz = tmp_path / f"x{step}.npz"
    code, _, err = run_cli(["export", url, "--out", str(npz), "--force"])
    assert code == 0, err
    with np.load(npz) as z:
        for k in NAMES:
            assert np.array_equal(z[k], truth[f"plainall:{step}:avg:{k}"]), (url, k)


@pytest.mark.parametrize("first", ["restore-ema", "average"])
def test_a_second_command_sees_the_first_ones_objects(made, s3, tmp_path, first):
    out, truth = made
    url = f"s3://{BUCKET}/own/{first}"
    src = out / "plainall"
    argv = (["restore-ema", str(src / "model.ckpt-2")] if first == "restore-ema" else
            ["average", str(src / "model.ckpt-1"), str(src / "model.ckpt-2"),
             "--name", "model.ckpt-2"])
    code, _, err = run_cli([*argv, "--out", url])
    assert code == 0, err
    # the same process, no new session: the listing must show the first output's objects
    # (its 'checkpoint' state file: refused without --force, replaced with it, as from a new
    # process; the stale listing took it for absent and its conditional put was refused)
    code, _, err = run_cli(["restore-ema", str(src / "model.ckpt-3"), "--out", url])
    assert code == 7 and "checkpoint: already exists (pass --force" in err, err
    code, _, err = run_cli(["restore-ema", str(src / "model.ckpt-3"), "--out", url, "--force"])
    assert code == 0, err
    keys = s3_keys(s3, f"own/{first}/")
    assert {"model.ckpt-2.index", "model.ckpt-3.index", "checkpoint"} <= {
        k.rsplit("/", 1)[1] for k in keys}, keys
    if first == "restore-ema":
        _exports_averages(f"{url}/model.ckpt-2", 2, truth, tmp_path)
    _exports_averages(f"{url}/model.ckpt-3", 3, truth, tmp_path)
    # and again, replacing model.ckpt-3 (--force): it must see what it replaces
    code, _, err = run_cli(["restore-ema", str(src / "model.ckpt-3"), "--out", url, "--force"])
    assert code == 0, err
    _exports_averages(f"{url}/model.ckpt-3", 3, truth, tmp_path)


def test_listing_again_sees_what_was_written_meanwhile(s3):
    """What upload()'s "list again, under the lock" relies on: after ``forget``, a listing
    asks the store, not s3fs's directory cache (nor the session's "absent" mark)."""
    from ckpt_tools.formats import remote

    store = remote.begin()
    url = f"s3://{BUCKET}/own/meanwhile"
    with pytest.raises(remote.CheckpointNotFoundError):
        store.listing(url)
    s3["client"].put_object(Bucket=BUCKET, Key="own/meanwhile/a", Body=b"1")
    store.forget(url)
    assert set(store.listing(url)) == {"a"}
    s3["client"].put_object(Bucket=BUCKET, Key="own/meanwhile/b", Body=b"2")
    store.forget(url + "/")
    assert set(store.listing(url)) == {"a", "b"}


def test_two_writes_in_one_session(made, s3, tmp_path):
    """Two restore-ema writes sharing one session (``remote.one_session``, as ``ckpt
    average`` and a library caller's script do): the second sees the first's objects."""
    from ckpt_tools.emaout import write_ema
    from ckpt_tools.formats import remote

    out, truth = made
    url = f"s3://{BUCKET}/own/session"
    src = out / "plainall"
    with remote.one_session():
        write_ema(str(src / "model.ckpt-2"), url)
        write_ema(str(src / "model.ckpt-3"), url, overwrite=True)
    _exports_averages(f"{url}/model.ckpt-2", 2, truth, tmp_path)
    _exports_averages(f"{url}/model.ckpt-3", 3, truth, tmp_path)
