"""``ckpt list`` and ``ckpt map`` of a TF1 "vtr" checkpoint (``bench/vtr_ckpt.py``: small
variables, ``ema.apply()`` over each, a ``Saver(ema.variables_to_restore())`` beside a
training ``Saver``, the ``.meta`` beside it) at two sizes, ``variables`` and a quarter of
them: how the cost grows with the variables. Each pairing step that read the graph once per
pair (``refuse_mixed_parts``, ``never_averaged``) made 2,000 variables take ~20-33 s; a
linear reading takes 4x as long for 4x the variables (less, with the interpreter's start-up).

Each command runs as a fresh process, ``repeats`` times interleaved; wall time and CPU time
(user + sys from ``wait4``, what the load on a shared machine changes least) are recorded,
medians. ``map`` of this checkpoint refuses (exit 6: the keys hold the raw weights a
training graph's vtr Saver wrote), which is its answer: the refusal is timed like an answer.
Used by ``bench/run.py --only vtr-list`` (``--vtr-variables``), or::

    python bench/vtr_list.py --variables 2000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import child_env, median  # noqa: E402

PY = sys.executable
_HERE = os.path.dirname(os.path.abspath(__file__))
#: The commands timed, by row name, and the exit codes each may give.
COMMANDS = {"ckpt list --json": (["list"], (0,)), "ckpt map --json": (["map"], (0, 6))}
#: Growth allowed from a quarter of the variables to all of them: 4x is linear.
GROWTH_TARGET = 5.0


def _timed(cmd: list[str], env: dict[str, str], allow: tuple[int, ...]) -> tuple[float, float]:
    """Runs ``cmd`` (stdout, stderr discarded); returns ``(wall s, CPU s)``.

    Raises:
        RuntimeError: it exited with a status not in ``allow``.
    """
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a long message never blocks
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code not in allow:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} exited with {code}:\n"
                               f"{err.read().decode('utf-8', 'replace')[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def make(directory: str, variables: int, env: dict[str, str]) -> str:
    """Writes the vtr checkpoint of ``variables`` weights (a TensorFlow child; kept from an
    earlier run in the same ``--workdir --keep``, which took minutes to write); returns the
    prefix."""
    kept = os.path.join(directory, "model.ckpt-1")  # one training step: global_step 1
    if os.path.exists(kept + ".index") and os.path.exists(kept + ".meta"):
        return kept
    done = subprocess.run([PY, os.path.join(_HERE, "vtr_ckpt.py"), directory, "--variables",
                           str(variables)], env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["prefix"]


def bench_vtr_list(variables: int, workdir: str, repeats: int, env: dict[str, str]) -> dict:
    """Returns ``{"variables": {N: {command: {"wall_s", "cpu_s", "runs"}}}}`` for ``variables``
    and a quarter of them (``tensors`` each: the keys stored)."""
    out: dict = {"variables": {}}
    for count in (max(1, variables // 4), variables):
        prefix = make(os.path.join(workdir, f"vtr-{count}"), count, env)
        for args, allow in COMMANDS.values():  # untimed: bytecode, the page cache
            _timed([PY, "-m", "ckpt_tools", *args, prefix, "--json"], env, allow)
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
        for _ in range(repeats):  # interleaved: load spreads over both commands
            for name, (args, allow) in COMMANDS.items():
                runs[name].append(_timed([PY, "-m", "ckpt_tools", *args, prefix, "--json"],
                                         env, allow))
        out["variables"][str(count)] = {
            name: {"wall_s": median([w for w, _ in r]), "cpu_s": median([c for _, c in r]),
                   "runs": r} for name, r in runs.items()}
    return out


def vtr_list_rows(result: dict, row) -> list[dict]:
    """Each command's time at the larger count beside its time at the quarter: the ratio is
    how it grew (4x is linear), in CPU seconds (the target) and wall time (info).

    Args:
        row: ``report._row``.

    Returns:
        `list[dict]`: the rows.
    """
    counts = sorted(result["variables"], key=int)
    few, many = counts[0], counts[-1]
    label = f"{int(many):,} vars (vtr, .meta)"
    out = []
    for name in COMMANDS:
        big, small = result["variables"][many][name], result["variables"][few][name]
        for unit, info in (("cpu_s", False), ("wall_s", True)):
            ratio = big[unit] / small[unit]
            out.append(row(label, f"{name}, {'CPU' if unit == 'cpu_s' else 'wall'} seconds",
                           big[unit], small[unit], "s", ratio,
                           "(info: load-dependent)" if info else
                           f"<= {GROWTH_TARGET:g}x for 4x the variables",
                           None if info else ratio <= GROWTH_TARGET,
                           f"the same at {int(few):,} vars"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variables", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        result = bench_vtr_list(args.variables, work, args.repeats, child_env())
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
