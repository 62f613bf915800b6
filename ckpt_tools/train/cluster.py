"""``--local-cluster ps=N,workers=M``: a whole training cluster on this machine, one process each.

TensorFlow-free: this process only starts, watches and stops the tasks; every task is a
``python -m ckpt_tools train ...`` child that talks to the others through TensorFlow's own
gRPC runtime on 127.0.0.1 ports chosen here. Logs are prefixed by task (``[worker0] ...``) on
stderr; the chief's stdout (the one-line summary, or ``--json``) passes through unchanged.
TensorFlow's start-up lines and gRPC's shutdown chatter are dropped unless ``verbose``; with
``verbose`` each distinct such line is shown once, not once per task.

Teardown: when the chief exits the other tasks get ``grace_s`` to finish (v1 ps tasks leave by
their done queue), then SIGTERM, then SIGKILL; the same on Ctrl-C, on ``timeout_s``, and when a
task fails first. SIGTERM and SIGHUP of the launcher are handled like Ctrl-C. Children run in
their own process group (so a Ctrl-C reaches only the launcher, which stops them) and, as a last
resort when the launcher is SIGKILLed, every task exits on its own once its parent is gone
(:func:`exit_with_parent`): nothing outlives the launcher.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..cli._output import Output
from ..errors import ExitCode
from .common import TrainError, TrainExistsError, TrainUsageError

LOOPBACK = "127.0.0.1"
PARENT_ENV = "CKPT_CLUSTER_PARENT"  # the launcher's pid, set in every task's environment
_PR_SET_PDEATHSIG = 1
_SPEC_RE = re.compile(r"^\s*ps\s*=\s*(\d+)\s*,\s*workers?\s*=\s*(\d+)\s*$")
# Lines TensorFlow, absl and gRPC print in every process: start-up banners, C++ log lines
# (``I0000 00:00:1700000000.1 123 file.cc:42] ...``), and the errors gRPC logs when a peer
# goes away at shutdown -- expected here, since the tasks stop one after another.
_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog|"
    r"[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]|"
    r"\S+\.(cc|h):\d+\] |"
    r"To enable the following instructions|"
    r"This TensorFlow binary is optimized|"
    r".*oneDNN custom operations are on|"
    r".*Could not find cuda drivers|"
    r".*Unable to register cu(DNN|FFT|BLAS) factory|"
    r".*computation placer already registered|"
    r".*TF-TRT Warning|"
    r"WARNING:absl:|"
    r"Additional GRPC error information|"
    r"\s*:\{\"created\":)"
)


# What differs between tasks' copies of one log line: the C++ prefix's time and pid
# (``I0000 00:00:1700000000.123 4567 ``) or a Python logger's timestamp.
_LOG_PREFIX = re.compile(r"^([IWEF]\d{4} [\d:.]+\s+\d+ |\d{4}-\d\d-\d\d [\d:.]+: )")


def parse_local_cluster(spec: str) -> tuple[int, int]:
    """``"ps=2,workers=2"`` -> ``(2, 2)``.

    Raises:
        TrainUsageError: not of that form, or fewer than 1 ps / 1 worker.
    """
    match = _SPEC_RE.match(spec)
    if not match:
        raise TrainUsageError(f"--local-cluster must look like ps=N,workers=M; got {spec!r}")
    ps, workers = int(match.group(1)), int(match.group(2))
    if ps < 1 or workers < 1:
        raise TrainUsageError(f"--local-cluster needs at least 1 ps and 1 worker; got {spec!r}")
    return ps, workers


LOCK_NAME = ".ckpt-train.lock"


@contextlib.contextmanager
def train_dir_lock(train_dir: str) -> Iterator[None]:
    """Hold ``train_dir/.ckpt-train.lock`` (an ``flock``, so a dead holder's lock is free again)
    for the duration of a cluster run; the file is removed on exit.

    Raises:
        TrainExistsError: another live run holds the lock (its pid is named).
    """
    os.makedirs(train_dir, exist_ok=True)
    path = os.path.join(train_dir, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise TrainExistsError(
                f"{train_dir}: another training run (pid {holder}) is writing there "
                f"({LOCK_NAME}); wait for it or choose another --train-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
    finally:
        os.close(fd)


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all bound at once, so none repeats)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((LOOPBACK, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_for_hosts(addresses: Sequence[str], timeout_s: float, who: str) -> None:
    """Wait until every ``host:port`` accepts a TCP connection, at most ``timeout_s`` seconds.

    Raises:
        TrainError: some are still unreachable at the deadline (named in the message).
    """
    deadline = time.monotonic() + timeout_s
    pending = list(addresses)
    while True:
        for address in list(pending):
            host, _, port = address.rpartition(":")
            try:
                socket.create_connection((host, int(port)), timeout=1.0).close()
                pending.remove(address)
            except (OSError, ValueError):
                pass
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TrainError(
                f"{who}: {', '.join(pending)} not reachable within {timeout_s:.0f} s "
                "(--cluster-timeout); is every ps task running?"
            )
        time.sleep(0.5)


def hosts(ports: Sequence[int]) -> list[str]:
    """``host:port`` strings on the loopback address."""
    return [f"{LOOPBACK}:{p}" for p in ports]


@dataclass
class Task:
    """One process of the cluster."""

    name: str  # "ps0", "worker1", "chief"
    argv: list[str]  # arguments after ``python -m ckpt_tools``
    env: dict[str, str] = field(default_factory=dict)  # added to this process' environment
    chief: bool = False  # its exit code is the cluster's
    wait: bool = True  # False: serves until torn down (tf2 workers and ps), exit code ignored


class LogPrinter:
    """Prefixes and filters child output; thread-safe."""

    def __init__(self, verbose: bool) -> None:
        self._verbose = verbose
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def pump(self, stream, name: str, passthrough: bool, out) -> None:
        """Copy ``stream`` line by line until it closes: to ``out`` as is (``passthrough``: the
        chief's stdout), else to stderr as ``[name] line``, noise dropped or shown once."""
        for line in iter(stream.readline, ""):
            line = line.rstrip("\n")
            with self._lock:
                if passthrough:
                    out.write(line + "\n")
                    out.flush()
                    continue
                if _NOISE.match(line):
                    key = _LOG_PREFIX.sub("", line)  # the same line from another task
                    if not self._verbose or key in self._seen:
                        continue
                    self._seen.add(key)
                if line.strip():
                    Output().relay([line], name)
        stream.close()


def child_env(verbose: bool) -> dict[str, str]:
    """The environment of every task: quiet TensorFlow and gRPC unless ``verbose``."""
    env = dict(os.environ)
    if not verbose:
        env["TF_CPP_MIN_LOG_LEVEL"] = "3"
        env.setdefault("GRPC_VERBOSITY", "NONE")
    env.pop("TF_CONFIG", None)  # tasks get their own when they need one
    env[PARENT_ENV] = str(os.getpid())
    return env


def exit_with_parent() -> None:
    """In a ``--local-cluster`` task: exit as soon as the launcher is gone, even if it was
    SIGKILLed (no chance to stop us). Does nothing outside a cluster task.

    Linux: the kernel sends SIGKILL on the parent's death (``PR_SET_PDEATHSIG``); elsewhere,
    and for a launcher that died before this call, a daemon thread polls ``getppid()``.
    """
    parent = os.environ.pop(PARENT_ENV, None)
    if not parent or not parent.isdigit():
        return
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the polling thread below still covers it

    def watch() -> None:
        while os.getppid() == int(parent):
            time.sleep(1.0)
        os._exit(int(ExitCode.INTERRUPTED))

    if os.getppid() != int(parent):
        os._exit(int(ExitCode.INTERRUPTED))
    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def run_cluster(
    tasks: Sequence[Task],
    timeout_s: float,
    verbose: bool = False,
    grace_s: float = 20.0,
    on_start: Callable[[list[subprocess.Popen]], None] | None = None,
) -> int:
    """Start ``tasks``, wait for the chief, tear everything down; return the chief's exit code.

    Args:
        tasks: the processes; exactly one has ``chief=True``.
        timeout_s: stop everything (exit code 124) after this many seconds.
        verbose: show TensorFlow/gRPC log lines (each distinct one once).
        grace_s: how long the other ``wait`` tasks get to finish after the chief.
        on_start: called with the started processes (tests use it to see their pids).

    Returns:
        The chief's exit code; 1 when another task failed first; 124 on timeout; 130 on Ctrl-C.
    """
    printer = LogPrinter(verbose)
    base = child_env(verbose)
    restore = _interrupt_on((signal.SIGTERM, signal.SIGHUP))
    procs: list[subprocess.Popen] = []
    threads: list[threading.Thread] = []
    code = 1
    try:
        for task in tasks:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ckpt_tools", *task.argv],
                env={**base, **task.env},
                stdin=subprocess.DEVNULL,
                # only the chief's result line: another worker's would look like it wrote
                # the checkpoint (their stdout holds nothing but that line)
                stdout=subprocess.PIPE if task.chief else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # Ctrl-C reaches us; we stop the children
            )
            procs.append(proc)
            streams = [(proc.stderr, False, sys.stderr)]
            if task.chief:
                streams.append((proc.stdout, True, sys.stdout))
            for stream, passthrough, out in streams:
                thread = threading.Thread(
                    target=printer.pump, args=(stream, task.name, passthrough, out), daemon=True
                )
                thread.start()
                threads.append(thread)
        if on_start is not None:
            on_start(procs)
        code = _wait(tasks, procs, timeout_s, grace_s)
    except KeyboardInterrupt:
        Output().error("interrupted (stopping the cluster)")
        code = int(ExitCode.INTERRUPTED)
    finally:
        restore()
        _stop(procs)
        for thread in threads:
            thread.join(timeout=5)
    return code


def _interrupt_on(signals: Sequence[signal.Signals]) -> Callable[[], None]:
    """Make ``signals`` raise KeyboardInterrupt (as Ctrl-C does) in the main thread; return a
    function that puts the previous handlers back. A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in signals if hasattr(signal, s.name)}

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)

    return restore


def _wait(tasks: Sequence[Task], procs: list[subprocess.Popen], timeout_s: float,
          grace_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    chief = next(i for i, t in enumerate(tasks) if t.chief)
    while procs[chief].poll() is None:
        for task, proc in zip(tasks, procs, strict=True):
            rc = proc.poll()
            if not task.chief and rc is not None and (rc != 0 or not task.wait):
                Output().error(f"{task.name} exited with code {rc} before the chief")
                return 1
        if time.monotonic() > deadline:
            Output().error(f"the cluster did not finish within {timeout_s:.0f} s")
            return 124
        time.sleep(0.1)
    code = procs[chief].returncode
    if code < 0:  # killed by a signal: not an exit code of ours (Popen reports -signum)
        Output().error(f"the chief ({tasks[chief].name}) was killed by {_signame(-code)}")
        code = 1
    end = time.monotonic() + (grace_s if code == 0 else 0)
    for task, proc in zip(tasks, procs, strict=True):
        if task.wait and not task.chief:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                Output().warning(f"{task.name} still running after the chief: stopped")
    return code


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every live child's process group, then SIGKILL what is left after 5 s."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        alive = [p for p in procs if p.poll() is None]
        for proc in alive:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait_s
        for proc in alive:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
