"""Distributed trainer modes on a local cluster (127.0.0.1, CPU): the classic ps + worker
SyncReplicasOptimizer pattern (``--api v1``) and ParameterServerStrategy (``--api tf2``).

Each cluster run starts one process per task through ``ckpt train --local-cluster``; the
expected values come from TensorFlow (``load_checkpoint``, the chief's own
``ema.variables_to_restore()``, the ``.meta`` devices), never from ckpt_tools.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINABLE = [
    *(f"conv{i}/{n}" for i in (1, 2, 3) for n in ("weights", "BatchNorm/beta", "BatchNorm/gamma")),
    "logits/weights",
    "logits/biases",
]
BN_STATS = [f"conv{i}/BatchNorm/{n}" for i in (1, 2, 3) for n in ("moving_mean", "moving_variance")]
# What every task of every process prints at start-up or shutdown when TensorFlow is not quiet.
NOISE = ("oneDNN", "absl::InitializeLog", "Traceback", "cuda drivers", "E0000", "I0000", "W0000")


def _cluster(train_dir, *args: str, timeout: float = 150, cwd: str = REPO):
    """Runs ``ckpt train --train-dir train_dir ...`` in ``cwd`` (``train_dir`` relative to
    it, or absolute)."""
    cmd = [sys.executable, "-m", "ckpt_tools", "train", "--train-dir", str(train_dir),
           "--batch-size", "8", *args]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the launcher must be quiet on its own
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    return proc, time.monotonic() - t0


def _running_with(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker`` (our unique train dir)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def _ckpt(*args: str):
    from ckpt_tools.cli import app

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def v1_cluster(tmp_path_factory):
    train_dir = tmp_path_factory.mktemp("v1ps") / "run"
    proc, seconds = _cluster(
        train_dir, "--api", "v1", "--local-cluster", "ps=2,workers=2", "--max-steps", "12",
        "--save-every", "6",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return train_dir, proc, seconds


def test_v1_cluster_exits_with_the_chief_and_leaves_no_process(v1_cluster):
    train_dir, proc, seconds = v1_cluster
    assert re.search(r"model\.ckpt-12\s+global_step=12\b", proc.stdout), proc.stdout
    assert "global_step=" not in proc.stderr  # worker1's result line is not shown
    assert seconds < 120
    assert _running_with(str(train_dir)) == []


def test_v1_cluster_is_quiet(v1_cluster):
    _, proc, _ = v1_cluster
    for word in NOISE:
        assert word not in proc.stderr, proc.stderr[-3000:]
    # whatever is left is prefixed by its task
    for line in proc.stderr.splitlines():
        assert re.match(r"\[(ps|worker)\d\] ", line), line


def test_v1_cluster_checkpoint_is_sharded_over_the_ps_tasks(v1_cluster):
    import tensorflow as tf

    train_dir, _, _ = v1_cluster
    prefix = tf.train.latest_checkpoint(str(train_dir))
    assert prefix.endswith("model.ckpt-12")
    shards = sorted(p for p in os.listdir(train_dir) if p.startswith("model.ckpt-12.data-"))
    assert len(shards) >= 2 and shards[0].endswith(f"-of-{len(shards):05d}")
    # Saver(sharded=True) writes one shard per device; the variables are on both ps tasks.
    meta = tf.compat.v1.MetaGraphDef()
    with open(prefix + ".meta", "rb") as f:
        meta.ParseFromString(f.read())
    devices = {n.device for n in meta.graph_def.node if n.op in ("VariableV2", "VarHandleOp")}
    assert {"/job:ps/task:0", "/job:ps/task:1"} <= {d.split("/device")[0] for d in devices}
    keys = dict(tf.train.list_variables(prefix))
    for name in TRAINABLE:
        assert f"{name}/ExponentialMovingAverage" in keys and f"{name}/Momentum" in keys
    for name in BN_STATS:  # SyncReplicasOptimizer averaged moving_average_variables() too
        assert f"{name}/ExponentialMovingAverage" in keys
    assert "cross_entropy/avg" in keys and "total_loss/avg" in keys  # the chief's loss averages
    assert not any("sync_rep_local_step" in k for k in keys)  # a local variable: never saved
    assert int(tf.train.load_variable(prefix, "global_step")) == 12


def test_v1_cluster_list_map_restore_and_eval(v1_cluster, tmp_path):
    import numpy as np
    import tensorflow as tf

    from ckpt_tools import ema_map
    from ckpt_tools.train.evaluate import evaluate

    train_dir, _, _ = v1_cluster
    doc = json.loads(_ckpt("list", str(train_dir), "--json").stdout)
    roles = {v["name"]: v for v in doc["variables"]}
    for name in TRAINABLE:
        assert roles[name]["role"] == "weight" and roles[name]["ema"], name
    for name in BN_STATS:
        assert roles[name]["role"] == "bn_stat" and roles[name]["ema"], name
    assert roles["cross_entropy/avg"]["role"] == "loss_average"
    # list shows the data shards Saver(sharded=True) wrote, and what each holds
    files = sorted(p for p in os.listdir(train_dir) if p.startswith("model.ckpt-12.data-"))
    assert [s["file"] for s in doc["shards"]] == files
    assert sum(s["tensors"] for s in doc["shards"]) == len(doc["variables"])
    assert all(s["tensors"] for s in doc["shards"])
    text = _ckpt("list", str(train_dir)).stderr  # piped: summaries on stderr
    assert f"{len(files)} data shards" in text
    # The map is TensorFlow's own variables_to_restore(), recorded by the chief at save time.
    with open(os.path.join(train_dir, "variables_to_restore.json")) as f:
        recorded = json.load(f)
    assert ema_map(str(train_dir), slots="keep").mapping == recorded
    baked = tmp_path / "baked"
    _ckpt("restore-ema", str(train_dir), "--out", str(baked))
    src, out = tf.train.load_checkpoint(str(train_dir)), tf.train.load_checkpoint(str(baked))
    for name in TRAINABLE + BN_STATS:
        expected = src.get_tensor(f"{name}/ExponentialMovingAverage")
        assert np.array_equal(out.get_tensor(name), expected), name
    original, restored = evaluate(str(train_dir)), evaluate(str(baked))
    assert restored.raw_accuracy == original.ema_accuracy
    assert original.global_step == 12 and original.raw_accuracy > 0.1


def test_v1_async_cluster_trains_with_ema(tmp_path):
    import tensorflow as tf

    train_dir = tmp_path / "async"
    proc, _ = _cluster(
        train_dir, "--api", "v1", "--local-cluster", "ps=1,workers=2", "--no-sync-replicas",
        "--max-steps", "6", "--save-every", "6", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["global_step"] >= 6
    keys = dict(tf.train.list_variables(result["checkpoint"]))
    assert "logits/weights/ExponentialMovingAverage" in keys
    assert "conv1/BatchNorm/moving_mean/ExponentialMovingAverage" in keys
    assert _running_with(str(train_dir)) == []


def test_failing_chief_tears_the_cluster_down(tmp_path):
    # --resume with no checkpoint is refused by the chief: its exit code is the cluster's,
    # and the ps tasks waiting for it are stopped.
    train_dir = tmp_path / "refused"
    proc, seconds = _cluster(train_dir, "--api", "v1", "--local-cluster", "ps=1,workers=1",
                             "--max-steps", "2", "--resume")
    assert proc.returncode == 3  # not found: no checkpoint (the README table)
    assert "--resume: no checkpoint found" in proc.stderr
    assert _running_with(str(train_dir)) == []


def test_fresh_cluster_run_over_checkpoints_is_refused_before_it_starts(tmp_path):
    from ckpt_tools.cli import app

    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1"\n')
    result = CliRunner().invoke(app, ["train", "--api", "v1", "--train-dir", str(tmp_path),
                                      "--local-cluster", "ps=1,workers=1"])
    assert result.exit_code == 7, result.output
    assert "already exists" in result.output and "--resume" in result.output
    assert result.output.count("error:") == 1  # the launcher's line, no task started


@pytest.mark.parametrize(
    "args, message",
    [
        (["--local-cluster", "ps=0,workers=2"], "at least 1 ps"),
        (["--local-cluster", "two"], "ps=N,workers=M"),
        (["--local-cluster", "ps=1,workers=1", "--job-name", "worker"], "drop --ps-hosts"),
        (["--job-name", "worker"], "--worker-hosts"),
        (["--api", "keras", "--local-cluster", "ps=1,workers=1"], "no ps cluster mode"),
        (["--api", "tf2", "--local-cluster", "ps=1,workers=1"], "parameter-server"),
        (["--job-name", "ps", "--ps-hosts", "127.0.0.1:1"], "--worker-hosts"),
        (["--job-name", "chief", "--ps-hosts", "a:1", "--worker-hosts", "b:2"], "ps or worker"),
        (["--job-name", "worker", "--task-index", "3", "--ps-hosts", "a:1",
          "--worker-hosts", "b:2"], "out of range"),
    ],
)
def test_cluster_flag_errors_are_one_line(args, message, tmp_path):
    from ckpt_tools.cli import app

    result = CliRunner().invoke(app, ["train", "--train-dir", str(tmp_path), *args])
    assert result.exit_code == 2, result.output  # usage error, with the usage line
    assert "Usage:" in result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_second_cluster_into_the_same_train_dir_is_refused(tmp_path):
    import fcntl

    from ckpt_tools.cli import app
    from ckpt_tools.train.cluster import LOCK_NAME, train_dir_lock

    with train_dir_lock(str(tmp_path)):  # the first cluster
        result = CliRunner().invoke(app, ["train", "--api", "v1", "--train-dir", str(tmp_path),
                                          "--local-cluster", "ps=1,workers=1"])
        assert result.exit_code == 7, result.output
        assert f"another training run (pid {os.getpid()})" in result.output
    assert not (tmp_path / LOCK_NAME).exists()  # released on exit
    # a lock file left by a dead run holds no flock: taken over
    (tmp_path / LOCK_NAME).write_text("999999\n")
    with train_dir_lock(str(tmp_path)):
        with open(tmp_path / LOCK_NAME) as f:
            with pytest.raises(BlockingIOError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_manual_worker_gives_up_on_an_unreachable_ps(tmp_path):
    from ckpt_tools.cli import app
    from ckpt_tools.train.cluster import free_ports

    ps, worker = (f"127.0.0.1:{p}" for p in free_ports(2))
    t0 = time.monotonic()
    result = CliRunner().invoke(app, [
        "train", "--api", "v1", "--train-dir", str(tmp_path), "--ps-hosts", ps,
        "--worker-hosts", worker, "--job-name", "worker", "--cluster-timeout", "1"])
    assert result.exit_code == 1, result.output
    assert f"worker 0: {ps} not reachable within 1 s" in result.output
    assert time.monotonic() - t0 < 20


# ---- tf2: ParameterServerStrategy ------------------------------------------------------------

A = "/.ATTRIBUTES/VARIABLE_VALUE"


def _ema(name: str) -> str:
    """The key of ``name``'s average: ``ema`` is one dict keyed by the model's paths, whose
    slashes TensorFlow escapes in the dict key (``ema/conv1.Sweights``)."""
    return f"ema/{name.replace('/', '.S')}{A}"


@pytest.fixture(scope="module")
def ps_strategy(tmp_path_factory):
    train_dir = tmp_path_factory.mktemp("tf2ps") / "run"
    proc, seconds = _cluster(  # --train-dir as a user types it: relative (review-32-user-u34)
        "run", "--api", "tf2", "--strategy", "parameter-server",
        "--local-cluster", "ps=2,workers=2", "--max-steps", "12", "--save-every", "6",
        cwd=str(train_dir.parent),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return train_dir, proc, seconds


def test_parameter_server_strategy_runs_from_one_command(ps_strategy):
    train_dir, proc, seconds = ps_strategy
    assert re.search(r"ckpt-12\s+global_step=12\b", proc.stdout), proc.stdout
    # named as it was given, as every other mode names it (u34: it printed the absolute path)
    assert proc.stdout.startswith(os.path.join("run", "ckpt-12")), proc.stdout
    assert seconds < 120
    # the worker and ps servers serve until stopped: the launcher stopped every one
    assert _running_with(str(train_dir)) == []
    for word in NOISE:
        assert word not in proc.stderr, proc.stderr[-3000:]
    for line in proc.stderr.splitlines():
        assert re.match(r"\[(ps\d|worker\d|chief)\] ", line), line


def test_parameter_server_checkpoint_is_partitioned_and_read_by_every_command(
    ps_strategy, tmp_path
):
    import numpy as np
    import tensorflow as tf

    from ckpt_tools import ema_map
    from ckpt_tools.train.evaluate import evaluate

    train_dir, _, _ = ps_strategy
    prefix = tf.train.latest_checkpoint(str(train_dir))
    assert prefix.endswith("ckpt-12")
    assert int(tf.train.load_variable(prefix, f"step{A}")) == 12
    keys = dict(tf.train.list_variables(prefix))
    for name in TRAINABLE + BN_STATS:
        assert f"model/{name}{A}" in keys and _ema(name) in keys, name
    for name in TRAINABLE:
        assert f"momentum/{name}{A}" in keys
    assert len([p for p in os.listdir(train_dir) if p.startswith("ckpt-12.data-")]) >= 2
    doc = {v["name"]: v for v in json.loads(_ckpt("list", prefix, "--json").stdout)["variables"]}
    # MinSizePartitioner(16 KiB, max_shards=2 ps): conv3/weights (72 KiB) is split in two,
    # conv1/weights (1.7 KiB) is not -- for the model, its shadow and its momentum alike.
    for tree in ("model", "momentum"):
        assert doc[f"{tree}/conv3/weights{A}"]["partitions"] == 2
        assert doc[f"{tree}/conv1/weights{A}"]["partitions"] == 0
    assert doc[_ema("conv3/weights")]["partitions"] == 2
    assert doc[_ema("conv1/weights")]["partitions"] == 0
    for name in TRAINABLE:
        assert doc[f"model/{name}{A}"]["role"] == "weight"
        assert doc[f"model/{name}{A}"]["ema"] == _ema(name), name
    for name in BN_STATS:
        assert doc[f"model/{name}{A}"]["role"] == "bn_stat"
        assert doc[f"model/{name}{A}"]["ema"] == _ema(name), name
    mapping = ema_map(prefix).mapping
    assert mapping[_ema("conv3/weights")] == f"model/conv3/weights{A}"
    baked = tmp_path / "baked"
    _ckpt("restore-ema", prefix, "--out", str(baked))
    src, out = tf.train.load_checkpoint(prefix), tf.train.load_checkpoint(str(baked))
    for name in TRAINABLE + BN_STATS:  # TensorFlow reassembles the partitioned tensors
        assert np.array_equal(out.get_tensor(f"model/{name}{A}"), src.get_tensor(_ema(name)))
    original, restored = evaluate(prefix), evaluate(str(baked))
    assert restored.raw_accuracy == original.ema_accuracy
    assert original.api == "tf2" and original.global_step == 12


def test_parameter_server_resumes_a_run_saved_before_016f6d0(ps_strategy, tmp_path):
    """--resume of a parameter-server run whose averages are saved as ckpt train saved them
    before 016f6d0 (``ema/conv1/weights``, a mirror of the model's paths) continues those
    averages (it stopped at the restore) and saves the next checkpoint in the dict layout."""
    import numpy as np
    import tensorflow as tf

    from ckpt_tools.train import model
    from ckpt_tools.train.tf2 import LossAverages
    from ckpt_tools.train.tf2_resume import mirror_module

    prefix = tf.train.latest_checkpoint(str(ps_strategy[0]))
    net = model.Tf2Model(1)
    named = net.named_variables()
    shadows = {p: tf.Variable(tf.zeros_like(v), trainable=False,
                              name=f"{p}/ExponentialMovingAverage") for p, v in named.items()}
    momentum = mirror_module({p: tf.Variable(tf.zeros_like(v), trainable=False,
                                             name=f"{p}/Momentum")
                              for p, v in named.items() if "moving_" not in p}, "momentum")
    objs = dict(model=net, momentum=momentum, losses=LossAverages(),
                step=tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step"))
    tf.train.Checkpoint(ema=shadows, **objs).restore(prefix).assert_consumed()
    old = tf.train.Checkpoint(ema=mirror_module(shadows, "ema"), **objs)
    train_dir = tmp_path / "old"
    old_prefix = tf.train.CheckpointManager(old, str(train_dir), 1, checkpoint_name="ckpt").save(12)
    saved = tf.train.load_checkpoint(old_prefix)
    assert saved.has_tensor(f"ema/conv3/weights{A}") and not saved.has_tensor(_ema("conv1/weights"))

    proc, _ = _cluster(train_dir, "--api", "tf2", "--strategy", "parameter-server",
                       "--local-cluster", "ps=2,workers=1", "--max-steps", "13", "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "its averages were read from the layout before 016f6d0 (ema/conv1/weights); new " \
        "checkpoints save them as ema/conv1.Sweights" in proc.stderr, proc.stderr[-3000:]
    new = tf.train.load_checkpoint(str(train_dir / "ckpt-13"))
    assert not new.has_tensor(f"ema/conv1/weights{A}")
    decay = 14 / 23  # min(0.9999, (1 + 13) / (10 + 13)): tf2_ps's warmed-up decay at step 13
    for name in TRAINABLE + BN_STATS:
        before = saved.get_tensor(f"ema/{name}{A}").astype(np.float64)
        weight = new.get_tensor(f"model/{name}{A}").astype(np.float64)
        np.testing.assert_allclose(new.get_tensor(_ema(name)), decay * before
                                   + (1 - decay) * weight, rtol=1e-5, atol=1e-6, err_msg=name)


def test_parameter_server_strategy_needs_a_cluster(tmp_path):
    from ckpt_tools.cli import app

    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    result = CliRunner().invoke(
        app, ["train", "--api", "tf2", "--strategy", "parameter-server", "--train-dir",
              str(tmp_path)], env=env,
    )  # fmt: skip
    assert result.exit_code != 0
    assert "TF_CONFIG" in result.output and "--local-cluster" in result.output


# ---- teardown on timeout and Ctrl-C ------------------------------------------------------------


def test_cluster_timeout_stops_every_task(tmp_path):
    train_dir = tmp_path / "slow"
    proc, seconds = _cluster(
        train_dir, "--api", "v1", "--local-cluster", "ps=1,workers=1", "--max-steps", "100000",
        "--cluster-timeout", "3",
    )  # fmt: skip
    assert proc.returncode == 124, proc.stderr[-2000:]
    assert "did not finish within 3 s" in proc.stderr
    assert seconds < 40
    assert _running_with(str(train_dir)) == []


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_ctrl_c_sigterm_and_sigkill_stop_every_task(sig, tmp_path):
    import signal

    train_dir = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "ckpt_tools", "train", "--api", "v1", "--train-dir",
           str(train_dir), "--local-cluster", "ps=1,workers=1", "--max-steps", "100000"]
    proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(_running_with(str(train_dir))) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)  # the launcher and its two tasks
        assert len(_running_with(str(train_dir))) >= 3
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=30)
        # SIGKILL: no teardown by the launcher; the orphaned tasks must notice and exit
        deadline = time.monotonic() + 10
        while _running_with(str(train_dir)) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
    if sig == "SIGKILL":
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130, err[-2000:]
        assert "error: interrupted" in err
    assert _running_with(str(train_dir)) == []


def test_chief_killed_by_a_signal_exits_1_naming_it(capsys):
    import signal

    from ckpt_tools.train.cluster import Task, run_cluster

    def kill_chief(procs):
        procs[0].send_signal(signal.SIGKILL)  # long before `ckpt --help` could finish

    tasks = [Task("worker0", ["--help"], chief=True)]
    assert run_cluster(tasks, timeout_s=30, on_start=kill_chief) == 1
    assert "error: the chief (worker0) was killed by SIGKILL" in capsys.readouterr().err


# ---- quiet by default ---------------------------------------------------------------------------


def _import_env() -> dict[str, str]:
    # Not inherited either: TF_ENABLE_ONEDNN_OPTS=0, which importing fixtures/_fx_common.py
    # (an earlier test in the same session) sets, removes the oneDNN line counted below.
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    env["PYTHONPATH"] = REPO
    return env


@pytest.fixture(scope="module")
def plain_import_stderr() -> str:
    """What a plain ``import tensorflow`` writes to stderr here (one fresh process, which both
    parameters below compare with)."""
    plain = subprocess.run([sys.executable, "-c", "import tensorflow"], env=_import_env(),
                           capture_output=True, text=True, timeout=120, cwd=REPO)
    assert plain.returncode == 0, plain.stderr[-2000:]
    return plain.stderr


@pytest.mark.parametrize("verbose", [False, True])
def test_tensorflow_start_up_lines_are_dropped_or_shown_once(verbose, plain_import_stderr):
    # import tensorflow writes its absl/oneDNN banner to fd 2 twice, whatever the log level
    code = ("from ckpt_tools.train.devices import quiet_tensorflow; "
            f"quiet_tensorflow({verbose}); import tensorflow as tf; print(tf.__version__)")
    proc = subprocess.run([sys.executable, "-c", code], env=_import_env(), capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    banner = proc.stderr.count("absl::InitializeLog")
    assert banner == (1 if verbose else 0), proc.stderr
    # TensorFlow prints its oneDNN line only on CPUs where oneDNN is on by default (not on
    # every x86 machine CI may get): expect it once where a plain import prints it
    printed = "oneDNN custom operations" in plain_import_stderr
    expected = 1 if verbose and printed else 0
    assert proc.stderr.count("oneDNN custom operations") == expected, proc.stderr


def test_launcher_shows_each_noise_line_once_with_verbose_and_never_without(capsys):
    import io

    from ckpt_tools.train.cluster import LogPrinter

    # each task's copy has its own time and pid in TensorFlow's prefix
    noise = ("I0000 00:00:1.{i} 7{i} port.cc:153] oneDNN custom operations are on.\n"
             "E0000 00:00:1.3{i} 7{i} chttp2_transport.cc:1] UNAVAILABLE: Socket closed\n")
    for verbose, expected in ((False, 0), (True, 1)):
        printer = LogPrinter(verbose)
        for i, name in enumerate(("ps0", "worker0", "worker1")):
            printer.pump(io.StringIO(noise.format(i=i) + "step 3 done\n"), name, False, None)
        err = capsys.readouterr().err
        assert err.count("oneDNN") == expected and err.count("Socket closed") == expected, err
        assert err.count("step 3 done") == 3 and "[worker1] step 3 done" in err
