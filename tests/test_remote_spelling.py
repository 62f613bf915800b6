"""One location, one spelling: ``file://`` URLs, ``s3a://``, ``..``/``//``/``/./`` segments,
and outputs named like a run's other files must never get past "outputs never replace
inputs" (review-16-attack-r2). Local cases need no server; S3 ones run against moto's
server (conftest.py's ``s3`` fixture).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

import pytest
from conftest import BUCKET
from helpers import FIXTURES, one_line_error
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args))



def _digests(directory) -> dict[str, str]:
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture
def run(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(FIXTURES / "towers_bn", d)
    return d


# ---- file:// is the local path: the local input checks apply -------------------------------

@pytest.mark.parametrize("args", [
    lambda d: ["average", str(d), "--last", "2", "--out", f"file://{d}", "--force"],
    lambda d: ["average", str(d), "--last", "2", "--out", f"file://{d}/", "--force"],
    lambda d: ["average", str(d), "--last", "2", "--out", f"FILE://localhost{d}", "--force"],
    lambda d: ["average", f"file://{d}/model.ckpt-20", f"file://{d}/model.ckpt-30",
               "--out", str(d), "--force"],
    lambda d: ["average", f"file://{d}/", "--last", "2", "--out", str(d), "--force"],
    lambda d: ["restore-ema", str(d), "--out", f"file://{d}", "--force"],
    lambda d: ["restore-ema", f"file://{d}", "--out", str(d), "--force"],
    lambda d: ["export", str(d / "model.ckpt-30"), "--out", f"file://{d}/model.ckpt-20.index",
               "--format", "npz", "--force"],
    lambda d: ["export", f"file://{d}/model.ckpt-30", "--out", str(d / "checkpoint"),
               "--format", "npz", "--force"],
])
def test_file_url_outputs_never_replace_inputs(run, args):
    before = _digests(run)
    argv = args(run)
    # An npz named like a checkpoint file contradicts --format: a usage error (exit 2) before
    # the input checks (which refuse it too, exit 7, through the Python API).
    contradiction = argv[0] == "export" and argv[3].endswith((".index", "checkpoint"))
    one_line_error(_run(*argv), 2 if contradiction else 7)
    assert _digests(run) == before


def test_file_url_onto_a_hard_linked_copy_is_refused(run, tmp_path):
    linked = tmp_path / "hl"
    subprocess.run(["cp", "-al", str(run), str(linked)], check=True)
    before = _digests(run)
    result = _run("average", str(run), "--last", "2", "--out", f"file://{linked}", "--force")
    one_line_error(result, 7)
    assert _digests(run) == before


def test_file_url_run_directory_reads_and_writes_locally(run, tmp_path):
    result = _run("list", f"file://{run}/")
    assert result.exit_code == 0, result.output
    out = tmp_path / "avg"
    result = _run("average", f"file://{run}/", "--last", "2", "--out", f"file://{out}")
    assert result.exit_code == 0, result.output
    assert (out / "model.ckpt-30.index").is_file()


def test_file_url_with_a_host_or_relative_path_is_refused(run):
    one_line_error(_run("list", "file://somehost/x/run"), 5, "file://somehost/x/run")
    one_line_error(_run("list", "file://run"), 5, "absolute")
    one_line_error(_run("list", "file:run"), 5, "absolute")


def test_file_url_with_a_nul_byte_is_refused(run, tmp_path):
    """``file:///x%00y`` was exit 70 (ValueError: embedded null byte) as an input, and as
    ``--out`` an error naming ``--newest``, which was not given."""
    one_line_error(_run("list", "-q", f"file://{run}%00x/"), 5, f"file://{run}%00x/", "NUL")
    out = f"file://{tmp_path}/o%00x"
    for argv in (["average", str(run), "--last", "2", "--out", out],
                 ["restore-ema", str(run), "--out", out],
                 ["export", str(run), "--out", out + ".npz"]):
        result = _run(*argv)
        one_line_error(result, 5, out, "NUL")
        assert "--newest" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("tail", ["?x=1", "#frag", "/?x=1"])
def test_file_url_with_a_query_or_fragment_is_refused(run, tail):
    """RFC 3986 puts a query and fragment outside the path: ``file:///run?x=1`` was read as
    the local path ``/run?x=1`` (then 'no checkpoint found'); refused like http(s)://'s."""
    one_line_error(_run("list", f"file://{run}{tail}"), 5, "query string or fragment")
    one_line_error(_run("average", str(run), "--last", "2", "--out", f"file:{run}x{tail}"),
                   5, "query string or fragment")
    assert not run.with_name("runx").exists()
    encoded = run.with_name("r?n#1")  # a '?' or '#' of a file name: percent-encoded
    shutil.copytree(run, encoded)
    result = _run("list", "-q", f"file://{run.parent}/r%3Fn%231/")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("form", ["file:{}", "FILE:{}", "file://localhost{}",
                                  "file://LOCALHOST{}"])
def test_rfc8089_forms_are_the_local_path(run, tmp_path, monkeypatch, form):
    """``file:/abs`` (no authority) and ``file://localhost/abs`` are the local ``/abs``
    (RFC 8089): ``--out file:/abs`` used to be written to ./file:/abs (a relative directory
    literally named ``file:``)."""
    monkeypatch.chdir(tmp_path)
    result = _run("list", "-q", form.format(run) + "/")
    assert result.exit_code == 0, result.output
    out = tmp_path / "avg dir"
    result = _run("average", form.format(run) + "/", "--last", "2", "--out",
                  form.format(str(out).replace(" ", "%20")), "-q")
    assert result.exit_code == 0, result.output
    assert (out / "model.ckpt-30.index").is_file()
    assert not (tmp_path / "file:").exists() and not (tmp_path / "FILE:").exists()
    before = _digests(run)
    one_line_error(_run("restore-ema", str(run), "--out", form.format(run), "--force"), 7,
                   "holds the input")
    assert _digests(run) == before


def test_a_pointer_state_file_read_by_last_is_never_replaced(run, tmp_path):
    """--last N reads RUN/checkpoint, which may point elsewhere: it is an input too."""
    ptr = tmp_path / "ptr"
    ptr.mkdir()
    text = ('model_checkpoint_path: "../run/model.ckpt-30"\n'
            'all_model_checkpoint_paths: "../run/model.ckpt-20"\n'
            'all_model_checkpoint_paths: "../run/model.ckpt-30"\n')
    (ptr / "checkpoint").write_text(text)
    one_line_error(_run("average", str(ptr), "--last", "2", "--out", str(ptr), "--force"), 7,
                    "checkpoint")
    assert (ptr / "checkpoint").read_text() == text


# ---- S3 spellings ----------------------------------------------------------------------------

def _keys(s3, prefix: str) -> dict[str, str]:
    listed = s3["client"].list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"]: o["ETag"] for o in listed.get("Contents", [])}


def _copy(s3, case: str, prefix: str) -> None:
    for f in sorted((FIXTURES / case).iterdir()):
        if not f.name.startswith("expected"):
            s3["client"].upload_file(str(f), BUCKET, f"{prefix}/{f.name}")


@pytest.mark.parametrize("out", [
    f"s3a://{BUCKET}/towers_bn/", f"S3://{BUCKET}/towers_bn", f"S3A://{BUCKET}/towers_bn/",
])
def test_s3a_and_upper_case_spellings_of_the_input_are_refused(s3, out):
    before = _keys(s3, "towers_bn/")
    result = _run("average", f"s3://{BUCKET}/towers_bn/", "--last", "2", "--out", out,
                  "--force")
    one_line_error(result, 7)
    assert _keys(s3, "towers_bn/") == before


@pytest.mark.parametrize("out", [
    f"s3://{BUCKET}/zz/../avg/", f"s3://{BUCKET}//avg/", f"s3://{BUCKET}/a/./avg/",
    f"s3://{BUCKET}/zz/../towers_bn/",
])
def test_dot_and_empty_segments_are_refused_before_anything_is_written(s3, out):
    before = _keys(s3, "")
    result = _run("average", f"s3://{BUCKET}/towers_bn/", "--last", "2", "--out", out,
                  "--force")
    one_line_error(result, 5, out)
    assert _keys(s3, "") == before


def test_a_url_without_bucket_says_so(s3):
    one_line_error(_run("list", "s3://"), 5, "no bucket")


@pytest.mark.parametrize("target", ["model.ckpt-20.index", "checkpoint",
                                    "model.ckpt-20.data-00000-of-00001"])
def test_remote_export_never_replaces_the_runs_other_files(s3, target, tmp_path):
    from ckpt_tools import export_weights
    from ckpt_tools.errors import OutputError

    before = _keys(s3, "towers_bn/")
    out = f"s3://{BUCKET}/towers_bn/{target}"
    result = _run("export", f"s3://{BUCKET}/towers_bn/model.ckpt-30", "--out", out,
                  "--format", "npz", "--force")
    one_line_error(result, 2, target, "--format npz")  # the name contradicts the format
    with pytest.raises(OutputError, match=target):  # the Python API refuses it too (exit 7)
        export_weights(f"s3://{BUCKET}/towers_bn/model.ckpt-30", out, fmt="npz",
                       overwrite=True)
    assert _keys(s3, "towers_bn/") == before
    assert _run("list", f"s3://{BUCKET}/towers_bn/model.ckpt-20").exit_code == 0


def test_a_single_file_named_index_replaces_only_itself(s3, tmp_path):
    """A single file named *.index uploaded into a directory that is not the input's run
    replaces that one object: the checkpoint-replacement cleanup (stale data shards) is not
    applied. (export refuses such a name up front, exit 2; this is the uploader's rule.)"""
    from ckpt_tools.formats import remote

    _copy(s3, "towers_bn", "other")
    local = tmp_path / "model.ckpt-20.index"
    local.write_bytes(b"not an index")
    remote.begin()
    remote.upload([str(local)], f"s3://{BUCKET}/other", overwrite=True, whole_directory=False)
    assert "other/model.ckpt-20.data-00000-of-00001" in _keys(s3, "other/")


def test_an_output_under_an_input_object_is_refused(s3, tmp_path):
    from ckpt_tools import average_checkpoints
    from ckpt_tools.errors import OutputError

    before = _keys(s3, "towers_bn/")
    inputs = [f"s3://{BUCKET}/towers_bn/model.ckpt-20", f"s3://{BUCKET}/towers_bn/model.ckpt-30"]
    out = f"s3://{BUCKET}/towers_bn/model.ckpt-30.index/"
    result = _run("average", *inputs, "--out", out)
    one_line_error(result, 2, "model.ckpt-30.index")  # named like a file: a usage error
    with pytest.raises(OutputError, match="is under the input object"):
        average_checkpoints(inputs, out)
    assert _keys(s3, "towers_bn/") == before


def test_an_object_and_a_directory_of_one_name_read_as_the_object(s3):
    _copy(s3, "towers_bn", "shadow")
    s3["client"].put_object(Bucket=BUCKET, Key="shadow/model.ckpt-30.index/junk", Body=b"x")
    result = _run("list", f"s3://{BUCKET}/shadow/")
    assert result.exit_code == 0, result.output


def test_a_remote_pointer_state_file_read_by_last_is_never_replaced(s3):
    # A pointer names another directory of its bucket by URL ('..' is refused: a store keeps
    # it as part of the key).
    text = (f'model_checkpoint_path: "s3://{BUCKET}/towers_bn/model.ckpt-30"\n'
            f'all_model_checkpoint_paths: "s3://{BUCKET}/towers_bn/model.ckpt-20"\n'
            f'all_model_checkpoint_paths: "s3://{BUCKET}/towers_bn/model.ckpt-30"\n').encode()
    s3["client"].put_object(Bucket=BUCKET, Key="ptr/checkpoint", Body=text)
    before = _keys(s3, "ptr/")
    result = _run("average", f"s3://{BUCKET}/ptr/", "--last", "2", "--out",
                  f"s3://{BUCKET}/ptr/", "--force")
    one_line_error(result, 7, "checkpoint")
    assert _keys(s3, "ptr/") == before
    assert os.environ.get("AWS_ENDPOINT_URL")  # the fixture's server, never the network


def test_an_interrupted_multipart_upload_is_aborted(s3, tmp_path, monkeypatch):
    """Ctrl-C while a data shard is uploaded in parts: the multipart upload is aborted (S3
    keeps, and bills, the parts of one never completed or aborted)."""
    import asyncio
    import signal
    import threading

    from ckpt_tools.formats import remote, remote_s3

    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(12 << 20))
    fs, path = remote.begin().fs(f"s3://{BUCKET}/mpu/big.bin")
    monkeypatch.setattr(remote_s3.MultipartSink, "PART", 5 << 20)
    started, released = threading.Event(), threading.Event()
    real = fs._call_s3

    async def stalled(method, *args, **kwargs):  # the second part "in flight" at Ctrl-C
        if method == "upload_part" and kwargs.get("PartNumber") == 2:
            started.set()
            while not released.is_set():
                await asyncio.sleep(0.05)
            raise ConnectionResetError("released by the test")
        return await real(method, *args, **kwargs)

    monkeypatch.setattr(fs, "_call_s3", stalled)

    def interrupt():
        if started.wait(30):
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            remote_s3.put(fs, str(big), path, create=True, timeout=60)
    finally:
        released.set()
    assert started.is_set()
    uploads = s3["client"].list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    assert [u for u in uploads if u["Key"] == "mpu/big.bin"] == []
    assert "Contents" not in s3["client"].list_objects_v2(Bucket=BUCKET, Prefix="mpu/")


def test_a_missing_output_bucket_is_named_as_such(s3):
    result = _run("average", f"s3://{BUCKET}/towers_bn/", "--last", "2", "--out",
                  "s3://nosuchbucket/avg/")
    one_line_error(result, 3, "s3://nosuchbucket/", "bucket does not exist")
    assert ".ckpt-write.lock" not in result.stderr


def test_upload_reports_progress_while_sending(s3, tmp_path, monkeypatch):
    """The bar moves during the upload (per part on S3), not only once a file is done."""
    from ckpt_tools.formats import remote, remote_s3

    monkeypatch.setattr(remote_s3.MultipartSink, "PART", 5 << 20)
    data = tmp_path / "m.data-00000-of-00001"
    data.write_bytes(os.urandom(11 << 20))
    seen: list[int] = []
    remote.begin()
    remote.upload([str(data)], f"s3://{BUCKET}/progress/", progress=seen.append)
    assert sum(seen) == 11 << 20 and len(seen) >= 3, seen


# ---- an output directory named like a checkpoint of an input's run (review-16-attack-r3) ---
# Afterwards that checkpoint's prefix would resolve to the new directory: `ckpt show`,
# `average --last` would read the output instead of the checkpoint, exit 0.

@pytest.mark.parametrize("args", [
    lambda d: ["restore-ema", str(d / "model.ckpt-30"), "--out", str(d / "model.ckpt-30")],
    lambda d: ["restore-ema", str(d / "model.ckpt-30"), "--out", str(d / "model.ckpt-20"),
               "--force"],
    lambda d: ["average", str(d), "--last", "2", "--out", str(d / "model.ckpt-20")],
    lambda d: ["average", str(d / "model.ckpt-20"), str(d / "model.ckpt-30"), "--out",
               f"{d}/model.ckpt-30/", "--force"],
    # listed by the state file only (no .index left beside it): still that run's name
    lambda d: ["restore-ema", str(d), "--out", str(d / "model.ckpt-10")],
])
def test_out_named_like_a_checkpoint_of_the_input_run_is_refused(run, args):
    state = run / "checkpoint"
    state.write_text('model_checkpoint_path: "model.ckpt-30"\n'
                     'all_model_checkpoint_paths: "model.ckpt-10"\n'
                     'all_model_checkpoint_paths: "model.ckpt-20"\n'
                     'all_model_checkpoint_paths: "model.ckpt-30"\n')
    before = sorted(p.name for p in run.iterdir())
    digests = _digests(run)
    result = _run(*args(run))
    one_line_error(result, 7, "would shadow checkpoint")
    assert sorted(p.name for p in run.iterdir()) == before  # no directory, no stage left
    assert _digests(run) == digests


def test_out_inside_the_input_run_under_another_name_is_written(run, tmp_path):
    """A subdirectory of the run is not the run's own directory: TensorFlow's
    latest_checkpoint(run) and ckpt's run-directory rules never read it, so it is written
    (checkpoints in the working directory and the output in ./ema/ is the common case)."""
    result = _run("restore-ema", str(run / "model.ckpt-30"), "--out", str(run / "baked"), "-q")
    assert result.exit_code == 0, result.output
    assert (run / "baked" / "model.ckpt-30.index").is_file()


@pytest.mark.parametrize("args", [
    lambda u: ["restore-ema", f"{u}/model.ckpt-20", "--out", f"{u}/model.ckpt-30/", "--force"],
    lambda u: ["restore-ema", f"{u}/model.ckpt-30", "--out", f"{u}/model.ckpt-30"],
    lambda u: ["average", f"{u}/", "--last", "2", "--out", f"{u}/model.ckpt-20/"],
])
def test_remote_out_named_like_a_checkpoint_of_the_input_run_is_refused(s3, args):
    _copy(s3, "towers_bn", "shadowrun")
    before = _keys(s3, "shadowrun")
    result = _run(*args(f"s3://{BUCKET}/shadowrun"))
    one_line_error(result, 7, "would shadow checkpoint")
    assert _keys(s3, "shadowrun") == before


def test_a_prefix_beside_its_index_reads_the_checkpoint_not_a_same_named_directory(run):
    """A directory named like a checkpoint (made before --out refused it, or by other tools)
    never changes what the prefix or the state file's entry reads; a trailing '/' names it."""
    import json

    shadow = run / "model.ckpt-20"
    shadow.mkdir()
    for f in run.glob("model.ckpt-30.*"):
        shutil.copy(f, shadow / f.name)
    result = _run("list", str(run / "model.ckpt-20"), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["checkpoint"] == str(run / "model.ckpt-20")
    result = _run("list", f"{shadow}/", "--json")
    assert json.loads(result.stdout)["checkpoint"] == str(shadow / "model.ckpt-30")
    result = _run("average", str(run), "--last", "2", "--out", str(run.parent / "avg"),
                  "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs"] == [str(run / "model.ckpt-20"),
                                                  str(run / "model.ckpt-30")]



def test_remote_prefix_beside_its_index_reads_the_checkpoint_not_a_same_named_directory(s3):
    """As locally: s3://b/run/model.ckpt-20 next to run/model.ckpt-20.index is that checkpoint
    even where objects under run/model.ckpt-20/ exist (another tool's output); the state
    file's entries (average --last) too; a trailing '/' names the directory."""
    import json

    _copy(s3, "towers_bn", "shadowed")
    for f in sorted((FIXTURES / "towers_bn").glob("model.ckpt-30.*")):
        s3["client"].upload_file(str(f), BUCKET, f"shadowed/model.ckpt-20/{f.name}")
    url = f"s3://{BUCKET}/shadowed"
    result = _run("list", f"{url}/model.ckpt-20", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["checkpoint"] == f"{url}/model.ckpt-20"
    result = _run("list", f"{url}/model.ckpt-20/", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["checkpoint"] == f"{url}/model.ckpt-20/model.ckpt-30"
    result = _run("show", f"{url}/model.ckpt-20", "global_step", "--json")
    assert result.exit_code == 0, result.output
    assert "20" in result.stdout and "30" not in result.stdout.replace("ckpt-30", "")
    result = _run("average", f"{url}/", "--last", "2", "--out", f"s3://{BUCKET}/shadowavg/",
                  "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs"] == [f"{url}/model.ckpt-20",
                                                  f"{url}/model.ckpt-30"]
