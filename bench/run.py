"""Benchmark ckpt_tools against TensorFlow's own tools, side by side, on generated checkpoints.

Measures, at each size (variable count constant, 1,003 tensors by default, in two data shards):

1. list latency: ``ckpt list --json`` vs ``inspect_checkpoint`` vs ``tf.train.list_variables``
   (whole processes);
2. read throughput: every tensor read and every byte touched, ours vs
   ``tf.train.load_checkpoint(...).get_tensor`` vs the physical limit (plain reads, warm cache);
3. EMA bake: ``ckpt restore-ema`` vs ``import_meta_graph`` + EMA ``Saver`` restore + ``save``
   (whole processes), and that both outputs are bit-identical;
4. peak RSS of every child (``wait4``);
5. how each cost grows with size.

Examples::

    python bench/run.py                         # 100M, 300M and 1G
    python bench/run.py --sizes 1G --repeats 5 --json results.json --markdown results.md
    python bench/run.py --quick                 # 4 MB, ~100 tensors, one repeat: a smoke run
    python bench/run.py --only show-full        # ckpt show --full memory, 1M values
    python bench/run.py --only vtr-list         # list/map growth on a TF1 vtr checkpoint
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import make_ckpt
import report
from measure import (
    Run,
    child_env,
    compare_bakes,
    import_profile,
    machine_info,
    median,
    run_child,
)
from measure import warm_page_cache as warm

_HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = os.path.join(_HERE, "tasks.py")
PY = sys.executable
_LIST_VARIABLES = ("import sys, tensorflow as tf; "
                   "v = tf.train.list_variables(sys.argv[1]); print(len(v))")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _round_robin(commands: dict[str, list[str]], repeats: int, env: dict[str, str],
                 after: Callable[[str, int], None] | None = None) -> dict[str, list[Run]]:
    """Runs every command ``repeats`` times, interleaved (A B C A B C ...) so that load from
    elsewhere on the machine spreads over all tools instead of biasing one."""
    runs: dict[str, list[Run]] = {name: [] for name in commands}
    for i in range(repeats):
        for name, cmd in commands.items():
            runs[name].append(run_child(cmd, env))
            if after:
                after(name, i)
    return runs


_BULKY = ("replaced", "files", "dropped", "variables")  # per-key lists of --json outputs


def _summary(runs: list[Run], inner: bool = False) -> dict:
    """Median of whole-process wall times, or (``inner``) of every timed pass of every run."""
    values = ([t for r in runs for t in r.output["pass_s"]] if inner else
              [r.wall_s for r in runs])
    output = {k: v for k, v in runs[-1].output.items() if k not in _BULKY}
    out = {"median_s": median(values), "runs_s": values,
           "maxrss_mb": max(r.maxrss_mb for r in runs), "output": output}
    if inner and all("cpu_s" in r.output for r in runs):  # CPU seconds, every thread
        out["cpu_median_s"] = median([t for r in runs for t in r.output["cpu_s"]])
    return out


def bench_list(prefix: str, repeats: int, env: dict[str, str]) -> dict:
    """1. Whole-process list latency of the three tools (and of ``ckpt list``'s human table),
    plus bare interpreter start-up; then one ``-X importtime`` profile of ``ckpt list``."""
    commands = {
        "ckpt list --json": [PY, "-m", "ckpt_tools", "list", prefix, "--json"],
        "ckpt list (table)": [PY, "-m", "ckpt_tools", "list", prefix],
        "inspect_checkpoint": [PY, "-m", "tensorflow.python.tools.inspect_checkpoint",
                               f"--file_name={prefix}"],
        "tf.train.list_variables": [PY, "-c", _LIST_VARIABLES, prefix],
        "python -c pass": [PY, "-c", "pass"],
    }
    out = {k: _summary(v) for k, v in _round_robin(commands, repeats, env).items()}
    out["ckpt list --json"]["import_ms"] = import_profile(commands["ckpt list --json"], env)
    return out


def bench_read(prefix: str, files: list[str], repeats: int, passes: int,
               env: dict[str, str], only: tuple[str, ...] | None = None) -> dict:
    """2. Read throughput (timed inside each child over ``passes`` passes, imports excluded),
    page cache warm; the median is over every pass of every run. ``only``: these readers."""
    n = str(passes)
    commands = {
        "physical: readinto": [PY, TASKS, "read-phys-read", n, *files],
        "physical: mmap": [PY, TASKS, "read-phys-mmap", n, *files],
        "physical: mmap view per tensor": [PY, TASKS, "read-phys-views", n, prefix],
        "floor: mmap + CRC32C, one core": [PY, TASKS, "read-phys-mmap-crc", n, *files],
        "ckpt_tools chunks(), one pass": [PY, TASKS, "read-ours-stream", n, prefix],
        "ckpt_tools tensor()": [PY, TASKS, "read-ours", n, prefix],
        "ckpt_tools tensor(), verify=False": [PY, TASKS, "read-ours-noverify", n, prefix],
        "tf get_tensor()": [PY, TASKS, "read-tf", n, prefix],
    }
    if only:
        commands = {k: v for k, v in commands.items() if k in only}
    out = {}
    for name, runs in _round_robin(commands, repeats, env).items():
        s = _summary(runs, inner=True)
        s["bytes"] = runs[-1].output["bytes"]
        s["gb_s"] = s["bytes"] / s["median_s"] / 1e9
        out[name] = s
    checksums = {s["output"]["checksum"] for s in out.values()}
    if len(checksums) != 1:
        raise RuntimeError(f"read tasks disagree about the bytes they read: {checksums}")
    return out


def bench_stream(prefix: str, repeats: int, passes: int, env: dict[str, str]) -> dict:
    """``checkpoint_stats`` and ``diff_ema`` timed inside their children like the reads (the
    verified read they are held against comes from :func:`bench_read`, in the same run)."""
    # As many timed passes per child as the reads they are held against: a child's first
    # pass also pays imports, the thread pool and the first mapping (~70 ms of CPU at 1 GB,
    # a third of what stats itself costs now), which the reads' medians leave out.
    n = str(passes)
    commands = {"ckpt stats": [PY, TASKS, "read-stats", n, prefix],
                "ckpt stats --histogram": [PY, TASKS, "read-stats-hist", n, prefix],
                "ckpt diff --ema": [PY, TASKS, "read-diff-ema", n, prefix]}
    out = {}
    for name, runs in _round_robin(commands, repeats, env).items():
        s = _summary(runs, inner=True)
        s["bytes"] = runs[-1].output["bytes"]
        out[name] = s
    return out


def bench_export(prefix: str, outdir: str, env: dict[str, str]) -> dict:
    """Whole-process ``ckpt export`` to each format once: wall time and peak RSS.

    An ``.h5`` export of a model with repeated blocks is refused (exit 5): Keras loads an
    ``.h5`` by layer position, which a TensorFlow checkpoint does not record. The refusal is
    recorded (``"refused"``) and the ``.h5`` writer is measured on the layer of the largest
    tensor alone (``--grep 'embedding/*'``, ``"subset"``), which bounds its peak memory.
    """
    out: dict = {}
    os.makedirs(outdir, exist_ok=True)
    for fmt in ("npz", "safetensors", "h5"):
        target = os.path.join(outdir, f"weights.{fmt}")
        cmd = [PY, "-m", "ckpt_tools", "export", prefix, "--out", target, "--json"]
        run = run_child(cmd, env, allow=(0, 5) if fmt == "h5" else (0,))
        refused = None
        if run.code == 5:
            refused = run.stderr.strip().splitlines()[-1]
            run = run_child([*cmd, "--grep", "embedding/*"], env)
        if refused:
            out[fmt] = {"refused": refused, "subset": "embedding/*", "wall_s": run.wall_s,
                        "maxrss_mb": run.maxrss_mb, "bytes": os.path.getsize(target)}
            os.remove(target)
            continue
        out[fmt] = {"wall_s": run.wall_s, "maxrss_mb": run.maxrss_mb,
                    "bytes": os.path.getsize(target)}
        os.remove(target)
        os.sync()
    return out


def bench_cp(files: list[str], outdir: str, repeats: int, env: dict[str, str]) -> dict:
    """A plain ``cp`` of the checkpoint's files (what any rewrite of every byte costs), and
    ``cp`` then ``sync`` of the copies and their directory (``"cp+sync"``: the durability
    ``restore-ema`` gives its output, which it fsyncs before publishing it), interleaved.

    ``sync FILE...`` fsyncs just those (not every filesystem's dirty data, as a bare ``sync``
    would, which other processes' writes would skew). Outputs are synced to disk (untimed)
    and removed between runs, as :func:`bench_bake` does.
    """
    copies = [os.path.join(outdir, os.path.basename(f)) for f in files]
    cmds = {"cp": ["cp", *files, outdir],
            "cp+sync": ["sh", "-c", 'cp "$@" && sync "$0"/* "$0"',
                        outdir, *files, outdir]}
    runs: dict[str, list[Run]] = {name: [] for name in cmds}
    for _ in range(repeats):
        for name, cmd in cmds.items():
            os.makedirs(outdir, exist_ok=True)
            runs[name].append(run_child(cmd, env))
            if sorted(os.listdir(outdir)) != sorted(os.path.basename(c) for c in copies):
                raise RuntimeError(f"{name} did not copy {files} into {outdir}")
            os.sync()
            shutil.rmtree(outdir)
    out = _summary(runs["cp"])
    out["cp+sync"] = _summary(runs["cp+sync"])
    return out


def bench_many(workdir: str, list_vars: int, quiet_vars: int, repeats: int, meta: bool,
               env: dict[str, str]) -> dict:
    """List latency on many variables: ``--json`` on ``list_vars`` (vs inspect_checkpoint)
    and ``-q`` / the human table on ``quiet_vars`` (small tensors: listing reads no data)."""
    out: dict = {}
    for label, count, with_meta in (("list", list_vars, meta), ("quiet", quiet_vars, False)):
        ckdir = os.path.join(workdir, f"many-{count}")
        prefix = make_ckpt.write_checkpoint(ckdir, max(4 << 20, count * 400),
                                            layers=make_ckpt.layers_for(count))
        if with_meta:
            make_ckpt.write_meta(prefix, env)
        tensors = len(make_ckpt.layout(max(4 << 20, count * 400), make_ckpt.layers_for(count)))
        warm(make_ckpt.data_files(prefix) + [prefix + ".index"])
        if label == "list":
            # Start-up floors beside them: the bare interpreter (any Python tool pays it), and
            # the interpreter without site (-S: site runs .pth files, such as an editable
            # install's import finder).
            commands = {
                "ckpt list --json": [PY, "-m", "ckpt_tools", "list", prefix, "--json"],
                "inspect_checkpoint": [PY, "-m", "tensorflow.python.tools.inspect_checkpoint",
                                       f"--file_name={prefix}"],
                "python -c pass": [PY, "-c", "pass"],
                "python -S -c pass": [PY, "-S", "-c", "pass"],
            }
        else:
            commands = {
                "ckpt list -q": [PY, "-m", "ckpt_tools", "list", prefix, "-q"],
                "ckpt list (table)": [PY, "-m", "ckpt_tools", "list", prefix],
            }
        res = {k: _summary(v) for k, v in _round_robin(commands, repeats, env).items()}
        if label == "list":
            res["ckpt list --json"]["import_ms"] = import_profile(commands["ckpt list --json"],
                                                                  env)
        res["tensors"] = tensors
        res["meta"] = with_meta
        out[label] = res
        shutil.rmtree(ckdir)
    return out


def bench_bake(prefix: str, outdir: str, repeats: int, env: dict[str, str]) -> tuple[dict, dict]:
    """3. Whole-process EMA bake, ours vs TensorFlow's, then the bit-for-bit comparison.

    Between runs (untimed) outputs are synced to disk and removed, so a run never pays for
    the previous run's write-back; the last run's outputs are compared and then removed.
    """
    dirs = {"ckpt restore-ema": os.path.join(outdir, "ours"),
            "tf Saver restore+save": os.path.join(outdir, "tf")}
    name = make_ckpt.PREFIX_NAME
    commands = {
        "ckpt restore-ema": [PY, "-m", "ckpt_tools", "restore-ema", prefix, "--out",
                             dirs["ckpt restore-ema"], "--json"],
        "tf Saver restore+save": [PY, TASKS, "bake-tf", prefix,
                                  os.path.join(dirs["tf Saver restore+save"], name)],
    }

    def after(tool: str, i: int) -> None:
        os.sync()
        if i < repeats - 1:
            shutil.rmtree(dirs[tool])

    runs = _round_robin(commands, repeats, env, after=after)
    identity = compare_bakes(os.path.join(dirs["ckpt restore-ema"], name),
                             os.path.join(dirs["tf Saver restore+save"], name), prefix,
                             make_ckpt.EMA_SUFFIX)
    for d in dirs.values():
        shutil.rmtree(d)
    return {k: _summary(v) for k, v in runs.items()}, identity


_STREAM_READS = ("physical: mmap", "ckpt_tools chunks(), one pass")


def bench_stream_only(label: str, nbytes: int, workdir: str, repeats: int, passes: int,
                      env: dict[str, str]) -> dict:
    """``--only stream``: one checkpoint, the verified read and ``stats``/``diff --ema`` alone,
    interleaved (what those rows need, without TensorFlow's tools)."""
    ckdir = os.path.join(workdir, f"ckpt-{label}")
    prefix = make_ckpt.write_checkpoint(ckdir, nbytes)
    specs = make_ckpt.layout(nbytes)
    warm([*make_ckpt.data_files(prefix), prefix + ".index"])
    _log(f"[{label}] read and stats/diff --ema, interleaved")
    result = {"label": label, "only": "stream", "bytes": sum(s.nbytes for s in specs),
              "tensors": len(specs), "largest_tensor_bytes": max(s.nbytes for s in specs)}
    read, stream = {}, {}
    for _ in range(repeats):  # read and stream rounds alternate: load spreads over both
        for name, value in bench_read(prefix, make_ckpt.data_files(prefix), 1, passes, env,
                                      _STREAM_READS).items():
            read.setdefault(name, []).append(value)
        for name, value in bench_stream(prefix, 1, passes, env).items():
            stream.setdefault(name, []).append(value)
    result["read"] = {k: _merge(v) for k, v in read.items()}
    result["stream"] = {k: _merge(v) for k, v in stream.items()}
    shutil.rmtree(ckdir)
    return result


def _merge(summaries: list[dict]) -> dict:
    """One summary from several one-repeat summaries: medians over all their timed passes."""
    out = dict(summaries[-1])
    out["runs_s"] = [t for s in summaries for t in s["runs_s"]]
    out["median_s"] = median(out["runs_s"])
    if all("cpu_median_s" in s for s in summaries):
        out["cpu_median_s"] = median([s["cpu_median_s"] for s in summaries])
    if "gb_s" in out:
        out["gb_s"] = out["bytes"] / out["median_s"] / 1e9
    return out


def bench_size(label: str, nbytes: int, workdir: str, repeats: int, passes: int,
               env: dict[str, str], layers: int = make_ckpt.NUM_LAYERS) -> dict:
    """Generates one checkpoint (``layers``: see :func:`make_ckpt.layout`) and runs every
    measurement on it."""
    free = shutil.disk_usage(workdir).free
    if free < 3.5 * nbytes + (1 << 30):
        raise SystemExit(f"{workdir}: {free / 1e9:.1f} GB free, a {label} run needs "
                         f"{(3.5 * nbytes + (1 << 30)) / 1e9:.1f} GB (input + two outputs)")
    ckdir = os.path.join(workdir, f"ckpt-{label}")
    t = time.perf_counter()
    prefix = make_ckpt.write_checkpoint(ckdir, nbytes, layers=layers)
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    make_ckpt.write_meta(prefix, env)
    meta_s = time.perf_counter() - t
    specs = make_ckpt.layout(nbytes, layers)
    files = make_ckpt.data_files(prefix)
    _log(f"[{label}] generated {sum(s.nbytes for s in specs) / 1e6:.0f} MB, {len(specs)} "
         f"tensors in {gen_s:.1f} s (.meta by TensorFlow: {meta_s:.1f} s)")
    warm([*files, prefix + ".index", prefix + ".meta"])
    result = {"label": label, "bytes": sum(s.nbytes for s in specs), "tensors": len(specs),
              "largest_tensor_bytes": max(s.nbytes for s in specs), "generate_s": gen_s,
              "meta_s": meta_s, "meta_bytes": os.path.getsize(prefix + ".meta")}
    _log(f"[{label}] 1. list latency")
    result["list"] = bench_list(prefix, repeats, env)
    _log(f"[{label}] 2. read throughput")
    result["read"] = bench_read(prefix, files, repeats, passes, env)
    _log(f"[{label}] 3. restore-ema vs TensorFlow")
    result["bake"], result["bit_identity"] = bench_bake(prefix, os.path.join(workdir, "out"),
                                                        repeats, env)
    _log(f"[{label}] 4. plain cp of the same bytes")
    result["cp"] = bench_cp([*files, prefix + ".index"], os.path.join(workdir, "cp"), repeats,
                            env)
    _log(f"[{label}] 5. stats and diff --ema (streamed, verified)")
    result["stream"] = bench_stream(prefix, repeats, passes, env)
    _log(f"[{label}] 6. export peak RSS")
    result["export"] = bench_export(prefix, os.path.join(workdir, "export"), env)
    shutil.rmtree(ckdir)
    return result


def _warm_up(workdir: str, env: dict[str, str]) -> None:
    """One untimed pass of every tool on a tiny checkpoint: .pyc files, shared libraries."""
    tiny = os.path.join(workdir, "warm-up")
    prefix = make_ckpt.write_checkpoint(tiny, 1 << 20)
    make_ckpt.write_meta(prefix, env)
    bench_list(prefix, 1, env)
    files = make_ckpt.data_files(prefix)
    bench_read(prefix, files, 1, 1, env)
    bench_bake(prefix, os.path.join(workdir, "out"), 1, env)
    shutil.rmtree(tiny)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes",
                        help="comma-separated checkpoint sizes (default: 100M,300M,1G; "
                        "--only show-full: the tensor's, 4M)")
    parser.add_argument("--size", help="a single size (same as --sizes SIZE)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--passes", type=int, default=5,
                        help="timed read passes inside each read child (default: 5)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 4M of about 100 tensors, one repeat, one pass, no "
                        "warm-up pass")
    parser.add_argument("--variables", type=int,
                        help="about this many tensors in each sized checkpoint (default 1,003; "
                        "--quick: 100)")
    parser.add_argument("--list-variables", type=int, default=3000,
                        help="variables of the checkpoint for the --json list row (3000)")
    parser.add_argument("--quiet-variables", type=int, default=100_000,
                        help="variables of the checkpoint for the list -q row (100000)")
    parser.add_argument("--workdir", help="scratch directory (default: a new one in /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--vtr-variables", type=int, default=2000,
                        help="--only vtr-list: variables of the larger vtr checkpoint (2000; "
                        "the smaller has a quarter)")
    parser.add_argument("--only", choices=["stream", "remote-average", "show-full", "vtr-list"],
                        help="stream: only the verified read and the stats/diff --ema rows "
                             "(no list, TensorFlow, bake or export measurements); "
                             "remote-average: only peak RSS of ckpt average from S3 (a local "
                             "moto server) beside the local average, 2 and 5 inputs; "
                             "show-full: only peak RSS of ckpt show --full (and --json) on "
                             "one tensor of each size, beside its bytes; "
                             "vtr-list: only ckpt list/map of a TF1 checkpoint of a "
                             "Saver(ema.variables_to_restore()) with its .meta (bench/vtr_list.py) "
                             "at --vtr-variables and a quarter of them")
    parser.add_argument("--json", dest="json_path", help="write machine-readable results here")
    parser.add_argument("--markdown", help="write the results as a README section here")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.passes = args.size or "4M", 1, 1
        args.list_variables, args.quiet_variables = 300, 3000
        args.variables = args.variables or 100
    elif args.size:
        args.sizes = args.size
    elif args.sizes is None:
        args.sizes = "4M" if args.only == "show-full" else "100M,300M,1G"
    args.size_list = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for s in args.size_list:
        make_ckpt.parse_size(s)
    if args.repeats < 1 or args.passes < 1:
        parser.error("--repeats and --passes must be at least 1")
    if args.vtr_variables < 4:
        parser.error("--vtr-variables must be at least 4")
    if args.variables is not None and args.variables < 1:
        parser.error("--variables must be at least 1")
    args.layers = make_ckpt.layers_for(args.variables) if args.variables else \
        make_ckpt.NUM_LAYERS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", *(sys.argv if argv is None else ["bench/run.py", *argv])])
    made = args.workdir is None
    workdir = args.workdir or tempfile.mkdtemp(prefix="ckpt-bench-")
    os.makedirs(workdir, exist_ok=True)
    env = child_env()
    results = {"command": command, "machine": machine_info(workdir), "sizes": []}
    started = time.perf_counter()
    try:
        if args.only == "remote-average":
            from remote_average import bench_remote_average

            for label in args.size_list:
                results["sizes"].append({
                    "label": label, "only": "remote-average",
                    "averages": bench_remote_average(make_ckpt.parse_size(label), [2, 5],
                                                     workdir, env)})
        elif args.only == "show-full":
            from show_full import bench_show_full

            for label in args.size_list:
                _log(f"[{label}] ckpt show --full peak RSS")
                results["sizes"].append({
                    "label": label, "only": "show-full",
                    "show_full": bench_show_full(make_ckpt.parse_size(label), workdir, env)})
        elif args.only == "vtr-list":
            from vtr_list import bench_vtr_list

            _log(f"ckpt list/map of a vtr checkpoint, {args.vtr_variables:,} variables and a "
                 "quarter of them")
            results["sizes"].append({
                "label": f"{args.vtr_variables:,} vars", "only": "vtr-list",
                "vtr_list": bench_vtr_list(args.vtr_variables, workdir, args.repeats, env)})
        elif args.only == "stream":
            for label in args.size_list:
                results["sizes"].append(bench_stream_only(
                    label, make_ckpt.parse_size(label), workdir, args.repeats, args.passes,
                    env))
        else:
            if not args.quick:
                _log("warm-up pass (untimed)")
                _warm_up(workdir, env)
            _log(f"list on {args.list_variables:,} and {args.quiet_variables:,} variables")
            results["many"] = bench_many(workdir, args.list_variables, args.quiet_variables,
                                         args.repeats, not args.quick, env)
            for label in args.size_list:
                results["sizes"].append(bench_size(label, make_ckpt.parse_size(label),
                                                   workdir, args.repeats, args.passes, env,
                                                   args.layers))
    finally:
        if made and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    results["machine"]["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    results["total_s"] = time.perf_counter() - started
    results["rows"] = report.rows(results)
    results["all_targets_met"] = all(r["met"] for r in results["rows"] if r["met"] is not None)
    report.print_console(results)
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(report.markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
