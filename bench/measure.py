"""Measurement helpers: timed child processes with their own peak RSS, machine facts, and the
bit-for-bit comparison of two baked checkpoints."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from ckpt_tools.formats.bundle import BundleReader
from ckpt_tools.tools_mark import RECORD_KEY

_COMPARE_CHUNK = 8 * 1024 * 1024
_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.py")


@dataclass
class Run:
    """One child process: wall time, exit status, its own peak RSS and its parsed stdout."""

    wall_s: float
    maxrss_mb: float
    output: dict = field(default_factory=dict)
    code: int = 0
    stderr: str = ""


def child_env() -> dict[str, str]:
    """The environment of every child: TensorFlow's C++ logging silenced, bytecode allowed.

    ``PYTHONDONTWRITEBYTECODE`` is dropped so an editable checkout gets ``__pycache__`` files
    (git-ignored) like a pip-installed package has from install time, and TensorFlow already
    has; otherwise every ``ckpt`` run would recompile ckpt_tools from source while TensorFlow
    loads precompiled bytecode.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def run_child(cmd: list[str], env: dict[str, str], allow: tuple[int, ...] = (0,)) -> Run:
    """Runs ``cmd`` through ``launch.py`` and returns its wall time and its own peak RSS.

    ``wait4`` rusage is exactly one process's (plus children it waited for), unlike
    ``getrusage(RUSAGE_CHILDREN)``, whose ``ru_maxrss`` is the maximum over every child so far;
    the launcher keeps this process's own RSS out of it (see ``launch.py``). Stdout is parsed
    as JSON when it is one JSON object.

    Raises:
        RuntimeError: if the command exits with a status not in ``allow``, with the tail of its
            stderr.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".rusage") as res:
        code = subprocess.call([sys.executable, "-S", _LAUNCHER, res.name, *cmd], stdout=out,
                               stderr=err, env=env)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode("utf-8", "replace"), err.read().decode(
            "utf-8", "replace")
        fields = res.read().split()
    if code not in allow or len(fields) != 3:
        raise RuntimeError(f"{' '.join(cmd)} exited with {code}:\n{stderr[-3000:]}")
    parsed: dict = {}
    text = stdout.strip()
    if text.startswith("{") and text.endswith("}"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = {}
    return Run(wall_s=float(fields[0]), maxrss_mb=int(fields[1]) / 1024, output=parsed,
               code=code, stderr=stderr)


def import_profile(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Runs ``python -X importtime`` ``cmd`` once; returns import ms per top-level package.

    Self times (excluding nested imports of other packages) are summed per top-level name, so
    the values add up to ``"total"``; the ten largest are kept, the rest go to ``"other"``.
    """
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    per: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue
        top = parts[2].strip().split(".")[0]
        per[top] = per.get(top, 0) + int(parts[0])
    ranked = sorted(per.items(), key=lambda kv: -kv[1])
    out = {name: us / 1000 for name, us in ranked[:10]}
    out["other"] = sum(us for _, us in ranked[10:]) / 1000
    out["total"] = sum(per.values()) / 1000
    return out


def median(values: list[float]) -> float:
    return statistics.median(values)


def warm_page_cache(paths: list[str]) -> int:
    """Reads ``paths`` once so later measurements see a warm page cache; returns bytes read."""
    buf = bytearray(8 * 1024 * 1024)
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


def _version(*dists: str) -> str | None:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _filesystem(path: str) -> str | None:
    best, kind = "", None
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                mount = parts[1]
                if os.path.abspath(path).startswith(mount) and len(mount) > len(best):
                    best, kind = mount, f"{parts[2]} ({parts[0]} on {mount})"
    except OSError:
        pass
    return kind


def machine_info(workdir: str) -> dict:
    """Returns the facts a reader needs to judge the numbers (CPU, RAM, disk, versions)."""
    usage = shutil.disk_usage(workdir)
    return {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "ram_gib": _mem_total_gib(),
        "disk_free_gib": round(usage.free / 1024**3, 1), "filesystem": _filesystem(workdir),
        "os": platform.platform(), "python": platform.python_version(),
        "numpy": _version("numpy"), "tensorflow": _version("tensorflow-cpu", "tensorflow"),
        "ckpt_tools": _version("ckpt-tools"), "load_avg_1m": round(os.getloadavg()[0], 2),
        "executable": sys.executable, "kernels": _kernels(), "decoder": _decoder(),
    }


def _kernels() -> str:
    """Which ``stats``/``diff`` kernels the children use: the compiled ones when
    ``ckpt_tools.ckernels`` was built (``pip install``), else NumPy alone (~3x the CPU)."""
    try:
        import ckpt_tools.ckernels  # noqa: F401
    except ImportError:
        return "NumPy (ckpt_tools.ckernels not built)"
    return "compiled (ckpt_tools.ckernels)"


def _decoder() -> str:
    """Which ``.index``/``.meta`` decoder ``ckpt list`` uses: the compiled fast path when
    ``ckpt_tools.cwire`` was built (``pip install``), else Python alone (same output)."""
    try:
        import ckpt_tools.cwire  # noqa: F401
    except ImportError:
        return "Python (ckpt_tools.cwire not built)"
    return "compiled (ckpt_tools.cwire)"


def _same_bytes(a: memoryview, b: memoryview) -> bool:
    if len(a) != len(b):
        return False
    x, y = np.frombuffer(a, dtype=np.uint8), np.frombuffer(b, dtype=np.uint8)
    return all(np.array_equal(x[i : i + _COMPARE_CHUNK], y[i : i + _COMPARE_CHUNK])
               for i in range(0, len(x), _COMPARE_CHUNK))


def compare_bakes(ours: str, theirs: str, source: str, ema_suffix: str) -> dict:
    """Compares two baked checkpoints key by key, byte by byte, with our reader.

    Also checks that the bake did its job: every weight of ``source`` that has a shadow holds
    the shadow's bytes in ``ours``.

    Returns:
        ``{"identical": bool, "ema_applied": bool, "tensors": int, "bytes": int,
        "mismatches": [first few differing keys]}``.
    """
    a, b, src = (BundleReader(p, verify=True) for p in (ours, theirs, source))
    try:
        # ours carries its mark (its plain names hold the averages), which TF's Savers ignore
        mismatches = sorted((set(a.entries) - {RECORD_KEY}) ^ set(b.entries))
        nbytes = 0
        for key in sorted(set(a.entries) & set(b.entries) - {RECORD_KEY}):
            ea, eb = a.entries[key], b.entries[key]
            if (ea.dtype, ea.shape) != (eb.dtype, eb.shape) or not _same_bytes(a.raw(ea),
                                                                              b.raw(eb)):
                mismatches.append(key)
            nbytes += ea.stored_bytes
        applied = True
        for key, entry in src.entries.items():
            shadow = src.entries.get(f"{key}/{ema_suffix}")
            if shadow is not None and key in a.entries:
                applied &= _same_bytes(a.raw(a.entries[key]), src.raw(shadow))
                applied &= not _same_bytes(src.raw(entry), src.raw(shadow))
        return {"identical": not mismatches, "ema_applied": bool(applied),
                "tensors": len(set(a.entries) - {RECORD_KEY}), "bytes": nbytes,
                "mismatches": mismatches[:5]}
    finally:
        for r in (a, b, src):
            r.close()
