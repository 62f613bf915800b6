"""Access to the committed TensorFlow-made fixtures and what TensorFlow recorded for them."""

from __future__ import annotations

import base64
import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TF_CASES = ["linear_v2", "linear_v1", "linear_trainable_only", "towers_bn", "partitioned",
            "dtypes", "many_keys", "sharded", "tf2_object", "custom_ema_name", "keras3_object",
            "trainer_v1", "model_garden_slot"]
# What a fixture's file cannot tell, stated as the fixture script did it (ckpt refuses, exit 6,
# without it): tf2_object has two unnamed-scope biases of one name and shape (dense/bias,
# heads/0/bias) and ran ema.apply(model.trainable_variables); custom_ema_name holds three EMA
# objects (avg, ExponentialMovingAverage, ExponentialMovingAverage_1) on W and b;
# model_garden_slot was saved during training, not after the EMA optimizer's swap_weights()
# (its variables differ from their average slots: refused unless stated).
DECIDE = {"tf2_object": {"apply_order": "trainable"},
          "custom_ema_name": {"ema_name": "ExponentialMovingAverage"},
          "model_garden_slot": {"not_swapped": True}}


def decide_args(case: str) -> list[str]:
    """The command-line form of :data:`DECIDE` for ``case`` (a flag for ``True``)."""
    return [a for k, v in DECIDE.get(case, {}).items()
            for a in ("--" + k.replace("_", "-"), *(() if v is True else (v,)))]


META_CASES = ["linear_v2", "linear_v1", "linear_trainable_only", "towers_bn", "partitioned",
              "sharded", "custom_ema_name"]


def expected(case: str) -> dict:
    return json.loads((FIXTURES / case / "expected.json").read_text())


def expected_values(case: str) -> dict[str, np.ndarray]:
    """Values TensorFlow computed at save time, keyed by checkpoint key (bit views undone)."""
    exp = expected(case)
    with np.load(FIXTURES / case / "expected.npz", allow_pickle=False) as npz:
        values = {k: npz[k] for k in npz.files}
    for key, dtype in exp.get("npz_bit_views", {}).items():
        import ml_dtypes

        values[key] = values[key].view(getattr(ml_dtypes, dtype))
    return values


def expected_strings(case: str) -> dict[str, np.ndarray]:
    out = {}
    for key, nested in expected(case).get("string_values", {}).items():
        arr = np.array(nested, dtype=object)
        out[key] = np.vectorize(base64.b64decode, otypes=[object])(arr) if arr.size else arr
    return out


def prefix(case: str) -> str:
    return str(FIXTURES / case / expected(case)["prefix"])


# -- shared by several test files ---------------------------------------------------------------
def same_bits(a, b) -> bool:
    """Whether two arrays hold the same dtype, shape and bytes (bit for bit: NaNs, -0.0)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def raw_bytes(a) -> bytes:
    """The bytes of an array in C order (compared bit for bit: NaNs, -0.0; not its dtype or
    shape, which :func:`same_bits` compares too)."""
    return np.ascontiguousarray(a).tobytes()


def set_terminal(monkeypatch, columns: int | None = 80, tty: bool = True) -> None:
    """Makes the CLI see a terminal (``tty``) of ``columns`` (``None``: leave COLUMNS), no
    colours."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1" if tty else "0")
    monkeypatch.setenv("NO_COLOR", "1")
    if columns:
        monkeypatch.setenv("COLUMNS", str(columns))


def shown_names(path: str, capsys) -> list[str]:
    """The names ``ckpt list`` shows (object path, else key), from its ``--json``."""
    from _corpus import run_cli

    code, out, _ = run_cli(["list", str(path), "--json"], capsys)
    assert code == 0
    return [v["path"] or v["name"] for v in json.loads(out)["variables"]]


def tf1_contradicting_meta(tf, directory: Path) -> tuple[str, dict]:
    """A TF1 checkpoint averaging w and b, with a .meta beside it from a graph where b is
    neither trainable nor averaged (e.g. copied from a run that froze b). Returns the prefix
    and the truth read at save time: ``{"ema_of": {average: variable}, "values": {key:
    value}}`` from ``ema.average(v)``."""
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("w", [3], initializer=v1.zeros_initializer())
        b = v1.get_variable("b", [3], initializer=v1.zeros_initializer())
        ema = tf.train.ExponentialMovingAverage(0.5)
        update = ema.apply([w, b])
        step = [v1.assign_add(w, tf.ones([3]) * 2.0), v1.assign_add(b, tf.ones([3]) * 5.0)]
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(update)
            prefix = v1.train.Saver().save(sess, str(Path(directory) / "model.ckpt"))
            averages = {v.op.name: ema.average(v) for v in (w, b)}
            truth = {"ema_of": {a.op.name: k for k, a in averages.items()},
                     "values": {**{v.op.name: sess.run(v) for v in (w, b)},
                                **{a.op.name: sess.run(a) for a in averages.values()}}}
    with tf.Graph().as_default():
        v1.get_variable("w", [3])
        v1.get_variable("b", [3], trainable=False)
        tf.train.ExponentialMovingAverage(0.5).apply([v1.trainable_variables()[0]])
        v1.get_variable("b/ExponentialMovingAverage", [3], trainable=False)
        v1.train.export_meta_graph(prefix + ".meta", saver_def=v1.train.Saver().as_saver_def())
    return prefix, truth


def build_extension(name: str, sources: list[Path], out: Path):
    """Compiles the optional C extension ``name`` from ``sources`` as setup.py does (same
    flags) into ``out`` and returns it imported from there; skips the test where no working
    compiler is installed: the extension is optional (setup.py), and the pure-Python path,
    which every such test also covers, is then all there is."""
    import importlib.util

    import pytest
    from setuptools import Distribution, Extension

    dist = Distribution({"ext_modules": [Extension(
        name, [str(s) for s in sources], extra_compile_args=["-O3", "-ffp-contract=off"])]})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib, cmd.build_temp = str(out), str(out / "tmp")
    cmd.ensure_finalized()
    try:
        cmd.run()
    except Exception as exc:  # noqa: BLE001 - distutils' CompileError, LinkError, ...
        pytest.skip(f"no working C compiler here: {exc}")
    spec = importlib.util.spec_from_file_location(name, next(out.glob(f"{name}*.so")))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_ema(tf, variables, *emas, averaged=None, steps: int = 3) -> None:
    """EMA steps of a TF2 loop without a model: each step moves every one of ``variables`` by
    random noise, then each EMA object in turn applies to ``averaged`` (default: all of
    ``variables``, in that order). Read the truth from ``ema.average(v)`` afterwards."""
    variables = list(variables)
    averaged = variables if averaged is None else list(averaged)
    for _ in range(steps):
        for v in variables:
            v.assign_add(tf.random.normal(v.shape))
        for ema in emas:
            ema.apply(averaged)


def keras_averages(optimizer) -> dict[str, np.ndarray]:
    """The truth a Keras 3 ``use_ema=True`` optimizer records at save time: each weight's
    path -> its EMA copy (``_model_variables_moving_average`` in ``_trainable_variables``'
    order, the order the optimizer was built in)."""
    return {v.path: a.numpy() for v, a in zip(optimizer._trainable_variables,
                                               optimizer._model_variables_moving_average,
                                               strict=True)}


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """Returns (exit code, stdout, stderr) of ``ckpt <args>`` run in-process."""
    from typer.testing import CliRunner

    from ckpt_tools.cli import app

    result = CliRunner().invoke(app, args)
    try:
        err = result.stderr
    except ValueError:  # older click mixes stderr into output
        err = result.output
    return result.exit_code, result.stdout, err


def _truth_of(argv: list[str], out: Path, tail: int = 3000, **env: str) -> dict[str, np.ndarray]:
    """Runs ``python *argv`` through the tests' fork server with ``env`` added (and TensorFlow's
    C++ logging quiet); returns the ``truth.npz`` it writes into ``out``. Fails the test with
    the last ``tail`` characters of the script's stderr."""
    from _tf_runner import run_python

    proc = run_python(argv, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env))
    assert proc.returncode == 0, proc.stderr[-tail:]
    with np.load(out / "truth.npz") as z:
        return {k: z[k] for k in z.files}


def run_generator(script: str, out: Path, tail: int = 3000, *args: str) -> dict[str, np.ndarray]:
    """Runs the generator ``fixtures/<script>`` (real Keras/TF, truth recorded at save time)
    into ``out`` (with ``args`` after it); returns its ``truth.npz``. Fails the test with the
    script's stderr."""
    return _truth_of([str(FIXTURES / script), str(out), *args], out, tail,
                     KERAS_BACKEND="tensorflow")


def assert_npz_holds(path, truth: dict[str, np.ndarray]) -> None:
    """The ``.npz`` at ``path`` holds exactly ``truth``'s names, each bit for bit."""
    with np.load(path) as z:
        assert sorted(z.files) == sorted(truth)
        for name, value in truth.items():
            assert z[name].tobytes() == value.tobytes(), name


def copies_without_meta(out: Path, cases) -> None:
    """Copies each ``out/<case>`` run (a TF1 ``model.ckpt`` saved with its graph) to
    ``out/<case>_nometa`` without the ``.meta``, and without the state file, which names the
    original's absolute path: the same checkpoint, nothing recording its graph."""
    import shutil

    for case in cases:
        shutil.copytree(out / case, out / f"{case}_nometa")
        (out / f"{case}_nometa" / "model.ckpt.meta").unlink()
        (out / f"{case}_nometa" / "checkpoint").unlink()


def run_script(script: str, out: Path, *args: str) -> dict[str, np.ndarray]:
    """Runs a Python ``script`` (real TF/Keras, truth recorded at save time) with ``out`` (and
    ``args``) as its arguments and this checkout importable; returns the ``truth.npz`` it
    writes there. Fails the test with the script's stderr."""
    return _truth_of(["-c", script, str(out), *args], out, PYTHONPATH=str(FIXTURES.parent))


def one_line_error(result, code: int, *words: str) -> None:
    """Asserts a CliRunner ``result`` exited ``code`` with exactly one ``error:`` line on stderr,
    no traceback, and every one of ``words`` in that line."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def proven_identity(pid: int) -> dict:
    """What a writer lock records to prove process ``pid`` alive or dead, read from ``/proc``
    here (not from ckpt_tools): boot id, pid namespace, start time in clock ticks."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        start = int(f.read().decode().rpartition(")")[2].split()[19])
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return {"boot": boot, "pidns": os.readlink("/proc/self/ns/pid"), "start": start}


def start_paused(argv: list[str], n: int, flag: Path):
    """Starts ``ckpt argv`` paused at its n-th rename (the writers' test hook
    ``CKPT_TOOLS_PAUSE_AT``); returns (process, what it paused at), or (process, None) when it
    finished without reaching an n-th rename."""
    import subprocess
    import sys
    import time

    env = {**os.environ, "CKPT_TOOLS_PAUSE_AT": str(n), "CKPT_TOOLS_PAUSE_FLAG": str(flag)}
    proc = subprocess.Popen([sys.executable, "-m", "ckpt_tools", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not flag.exists():
        if proc.poll() is not None:
            return proc, None
        assert time.monotonic() < deadline, "child neither paused nor finished"
        time.sleep(0.01)
    time.sleep(0.05)  # the flag's text is written right after it is created
    return proc, flag.read_text()


def tf2_unnamed_list_run(tf, directory: Path, saves: int) -> list[dict[str, np.ndarray]]:
    """The issue's TF2 setup: a ``tf.Module`` of six blocks of unnamed ``tf.Variable``s (TF
    names them all ``Variable``), averages saved as a list of 12
    (``tf.train.Checkpoint(model=m, ema_vars=[ema.average(v) ...])``: ``ema_vars/10`` sorts
    before ``ema_vars/2``), ``saves`` saves by a ``CheckpointManager`` in ``directory``.

    Returns:
        per save, ``ema.average(v)`` at save time under each variable's checkpoint key.
    """

    class Block(tf.Module):
        def __init__(self, i):
            super().__init__()
            self.w = tf.Variable(tf.random.stateless_normal([3, 3], seed=[i, 1]))
            self.b = tf.Variable(tf.zeros([3]))

    class Model(tf.Module):
        def __init__(self):
            super().__init__()
            self.blocks = [Block(i) for i in range(6)]

    model = Model()
    ema = tf.train.ExponentialMovingAverage(0.7)
    trainable = model.trainable_variables
    ema.apply(trainable)
    ckpt = tf.train.Checkpoint(model=model, ema_vars=[ema.average(v) for v in trainable])
    manager = tf.train.CheckpointManager(ckpt, str(directory), max_to_keep=5)
    rs = np.random.RandomState(0)
    recorded = []
    for _ in range(saves):
        for _ in range(3):
            for v in trainable:
                v.assign_add(rs.randn(*v.shape).astype("float32"))
            ema.apply(trainable)
        manager.save()
        recorded.append({f"model/blocks/{i}/{n}/.ATTRIBUTES/VARIABLE_VALUE":
                         ema.average(getattr(block, n)).numpy()
                         for i, block in enumerate(model.blocks) for n in ("w", "b")})
    return recorded


def bench_make_ckpt():
    """Returns bench/make_ckpt.py as a module (``write_checkpoint`` makes large checkpoints
    inside a test rather than committing them)."""
    import importlib.util
    import sys

    path = FIXTURES.parent / "bench" / "make_ckpt.py"
    spec = importlib.util.spec_from_file_location("make_ckpt", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_ckpt", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# -- shared by the remote tests (tests/test_remote*.py) ----------------------------------------
BUCKET = "ckpts"  # the bucket of conftest.py's local S3 server (``s3`` fixture)


def error_line(err: str) -> str:
    """The one ``error:`` line of ``err``, asserting there is exactly one and no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def s3_keys(s3, prefix: str) -> list[str]:
    """The sorted keys under ``prefix`` in the ``s3`` fixture's bucket."""
    listed = s3["client"].list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def s3_lock(s3, prefix: str, owner: dict) -> None:
    """Writes a writer lock recording ``owner`` into the directory ``prefix`` of the bucket."""
    from ckpt_tools.formats import remote_s3

    s3["client"].put_object(Bucket=BUCKET, Key=f"{prefix}/{remote_s3.LOCK_NAME}",
                            Body=json.dumps(owner).encode())


def digests(directory: Path) -> dict[str, str]:
    """File name -> SHA-256 of every file directly in ``directory``."""
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(directory).iterdir()) if p.is_file()}


@contextmanager
def environ_restored(keys):
    """Restores each of ``keys`` in ``os.environ`` (or its absence) on leaving."""
    saved = {k: os.environ.get(k) for k in keys}
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class RequestLog(logging.Handler):
    """The request lines a local test server logs (one record per request); ``since`` keeps
    those holding ``marker`` (what tells a request line from the server's other records)."""

    def __init__(self, marker: str):
        super().__init__(logging.DEBUG)
        self.marker = marker
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def since(self, start: int) -> list[str]:
        return [line for line in self.lines[start:] if self.marker in line]


@contextmanager
def logged_requests(logger: str, marker: str):
    """Yields a :class:`RequestLog` attached at INFO to the logger named ``logger`` until the
    block is left (its level and handlers are put back)."""
    counter = RequestLog(marker)
    log = logging.getLogger(logger)
    old_level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(counter)
    try:
        yield counter
    finally:
        log.removeHandler(counter)
        log.setLevel(old_level)


def upload_dir(client, directory: Path, bucket: str, key_prefix: str) -> None:
    """Uploads every file of ``directory`` through the boto3 ``client`` as
    ``<bucket>/<key_prefix>/<name>``."""
    for f in sorted(Path(directory).iterdir()):
        client.upload_file(str(f), bucket, f"{key_prefix}/{f.name}")


def data_gets(lines: list[str]) -> list[str]:
    """The GET requests of shard (``.data-``) objects among a server's request lines."""
    return [line for line in lines if "GET " in line and ".data-" in line]


def small_read_ahead(monkeypatch, window: int, piece: int, budget: int | None = None) -> None:
    """Scales the read-ahead down for small test checkpoints: its window, the piece size,
    (``budget``: the read-ahead budget), and a fresh process-wide budget counter."""
    from ckpt_tools.formats import remote
    from ckpt_tools.formats import remote_readahead as ra

    monkeypatch.setattr(ra, "WINDOW", window)
    if budget is not None:
        monkeypatch.setattr(ra, "READ_AHEAD_BUDGET", budget)
    monkeypatch.setattr(remote, "PIECE", piece)
    monkeypatch.setattr(ra, "BUDGET", ra.Budget())


def start_paused_writer(argv: list[str], flag: Path, tmpdir: Path, *, wrap: tuple = (),
                        **env: str):
    """Starts ``ckpt argv`` (behind ``wrap``, e.g. ``unshare ...``) paused at its first rename
    (``CKPT_TOOLS_PAUSE_AT=1``), ``TMPDIR`` ``tmpdir``, ``env`` added; returns the process
    (stdout discarded, stderr a text pipe) once it has paused, failing if it ends first."""
    import subprocess
    import sys
    import time

    full = {**os.environ, "PYTHONPATH": os.getcwd(), "CKPT_TOOLS_PAUSE_AT": "1",
            "CKPT_TOOLS_PAUSE_FLAG": str(flag), "TMPDIR": str(tmpdir), **env}
    proc = subprocess.Popen([*wrap, sys.executable, "-m", "ckpt_tools", *argv], env=full,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def flip_in_keras_member(src: Path, dst: Path, key: str) -> bytes:
    """Writes ``dst``: the ``.keras`` archive ``src`` with one bit flipped in the stored bytes
    of dataset ``key`` inside its (uncompressed, as Keras writes it) ``model.weights.h5``, the
    zip directory's CRC-32 left as it was; returns the damaged member's bytes (which zipfile
    refuses to return)."""
    import io
    import struct
    import zipfile

    import h5py

    with zipfile.ZipFile(src) as z:
        info = z.getinfo("model.weights.h5")
        assert info.compress_type == zipfile.ZIP_STORED
        with h5py.File(io.BytesIO(z.read(info)), "r") as f:
            offset = f[key].id.get_offset()
    raw = bytearray(Path(src).read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:
                                                   info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + offset + 1] ^= 0x40
    Path(dst).write_bytes(bytes(raw))
    return bytes(raw[start : start + info.file_size])


def damage_keras_header(src: Path, dst: Path, member: str, *, flag: int = 0,
                        local_name: bytes | None = None) -> None:
    """Writes ``dst``: the zip archive ``src`` with general-purpose ``flag`` bits (low byte:
    0x01 encrypted, 0x20 patched data, 0x40 strong encryption) set on ``member`` in both its
    central directory entry and its local header, or its local header's name replaced by
    ``local_name`` (same length); every other byte, CRC-32s included, as it was."""
    import struct
    import zipfile

    raw = bytearray(Path(src).read_bytes())
    with zipfile.ZipFile(src) as z:
        local = z.getinfo(member).header_offset
        at = z.start_dir
    while raw[at:at + 4] == b"PK\x01\x02":  # central directory entries
        name_len, extra_len, comment_len = struct.unpack("<HHH", raw[at + 28:at + 34])
        if raw[at + 46:at + 46 + name_len] == member.encode():
            raw[at + 8] |= flag
        at += 46 + name_len + extra_len + comment_len
    raw[local + 6] |= flag
    if local_name is not None:
        assert len(local_name) == len(member.encode())
        raw[local + 30:local + 30 + len(local_name)] = local_name
    Path(dst).write_bytes(bytes(raw))


def zip_moved(data: bytes, shift: int) -> bytes:
    """Returns the zip archive ``data`` as it reads placed ``shift`` bytes into a file: its
    central directory's local-header offsets and the end record's directory offset moved."""
    import struct

    raw = bytearray(data)
    end = raw.rfind(b"PK\x05\x06")
    count, _, at = struct.unpack("<HII", raw[end + 10:end + 20])
    struct.pack_into("<I", raw, end + 16, at + shift)
    for _ in range(count):
        name_len, extra_len, comment_len = struct.unpack("<HHH", raw[at + 28:at + 34])
        struct.pack_into("<I", raw, at + 42, struct.unpack("<I", raw[at + 42:at + 46])[0] + shift)
        at += 46 + name_len + extra_len + comment_len
    return bytes(raw)


def hdf5_then_zip(archive: Path, appended: bytes, dst: Path) -> None:
    """Writes ``dst``: the ``model.weights.h5`` of the Keras archive ``archive`` (an HDF5 file,
    at byte 0) with the zip archive ``appended`` after it: both an HDF5 file and a zip."""
    import zipfile

    with zipfile.ZipFile(archive) as z:
        weights = z.read("model.weights.h5")
    Path(dst).write_bytes(weights + zip_moved(appended, len(weights)))


def zip_in_user_block(archive: Path, inside: bytes, dst: Path) -> None:
    """Writes ``dst``: an HDF5 file holding a copy (h5py) of the Keras archive ``archive``'s
    ``model.weights.h5``, behind a user block (64 KiB, or the power of two ``inside`` fits in)
    that holds the zip ``inside`` at byte 0: h5py finds its superblock after the block, and
    zipfile the zip where its end record lies within the file's last 64 KiB."""
    import io
    import zipfile

    import h5py

    block = max(1 << 16, 1 << len(inside).bit_length())
    with zipfile.ZipFile(archive) as z, h5py.File(io.BytesIO(z.read("model.weights.h5")),
                                                  "r") as src, \
            h5py.File(dst, "w", userblock_size=block) as f:
        for key, value in src.attrs.items():
            f.attrs[key] = value
        for name in src:
            src.copy(src[name], f, name=name)
    with open(dst, "r+b") as f:
        f.write(inside)


def patch_keras_sizes(src: Path, dst: Path, member: str, *, central_stored: int = 0,
                      local_size: int = 0) -> None:
    """Writes ``dst``: the zip archive ``src`` with ``member``'s stored size in the central
    directory changed by ``central_stored`` bytes and its size in the local header by
    ``local_size``; its data and CRC-32 as they were."""
    import struct
    import zipfile

    raw = bytearray(Path(src).read_bytes())
    with zipfile.ZipFile(src) as z:
        local = z.getinfo(member).header_offset
        at = z.start_dir
    while raw[at:at + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack("<HHH", raw[at + 28:at + 34])
        if raw[at + 46:at + 46 + name_len] == member.encode():
            struct.pack_into("<I", raw, at + 20,
                             struct.unpack("<I", raw[at + 20:at + 24])[0] + central_stored)
        at += 46 + name_len + extra_len + comment_len
    struct.pack_into("<I", raw, local + 22,
                     struct.unpack("<I", raw[local + 22:local + 26])[0] + local_size)
    Path(dst).write_bytes(bytes(raw))
