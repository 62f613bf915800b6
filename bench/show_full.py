"""Peak RSS of ``ckpt show CKPT VAR --full`` (and ``--full --json``) on one large tensor,
beside the tensor's own bytes: the values are written as they are formatted, so memory grows
with the tensor (read whole for its statistics), never with its text (review-29-user-u31 F2:
1M values took 530 MB printed as text; s29g: 154 MB as one JSON document).

Writes one V2 checkpoint (``model/w``, float32 of about ``nbytes``, rows of 1,000 values, and
``model/b``, 3 values) with the library's own writer (no TensorFlow, no download), runs each
command as a fresh child (``launch.py``: wall time and the child's own peak RSS) with stdout
into a file, and ``show model/b --full`` (3 values) for the start-up peak the others are
measured above. Used by ``bench/run.py --only show-full`` (``--sizes``: the tensor's bytes),
or::

    python bench/show_full.py --size 4M
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_ckpt import parse_size  # noqa: E402
from measure import child_env, run_child  # noqa: E402

PY = sys.executable
TENSOR = "model/w"
ROW = 1000
STARTUP = "show --full, 3 values (start-up)"
#: The commands measured on the large tensor, by row name.
SHOWN = {"show --full": ["--full"], "show --full --json": ["--full", "--json"]}


def write_one_tensor(directory: str, nbytes: int, seed: int = 0) -> str:
    """Writes the checkpoint (created in ``directory``); returns its prefix.

    Returns:
        `str`: the prefix (``directory/model.ckpt``).
    """
    import numpy as np

    from ckpt_tools.formats.bundle_writer import BundleWriter

    os.makedirs(directory, exist_ok=True)
    rows = max(1, nbytes // (4 * ROW))
    rng = np.random.default_rng(seed)
    prefix = os.path.join(directory, "model.ckpt")
    with BundleWriter(prefix) as writer:
        writer.add_array("model/b", np.array([0.5, -1.0, 2.0], dtype=np.float32))
        writer.add_array(TENSOR, rng.standard_normal((rows, ROW), dtype=np.float32))
    return prefix


def bench_show_full(nbytes: int, workdir: str, env: dict[str, str]) -> dict:
    """Returns ``{"tensor_bytes", "values", STARTUP: {...}, "show --full": {...},
    "show --full --json": {...}}``, each run's ``wall_s``, ``maxrss_mb`` and ``out_bytes``
    (the text written)."""
    prefix = write_one_tensor(os.path.join(workdir, "show-full"), nbytes)
    rows = max(1, nbytes // (4 * ROW))
    out: dict = {"tensor_bytes": rows * ROW * 4, "values": rows * ROW}
    sink = os.path.join(workdir, "show-full.out")
    runs = {STARTUP: ["model/b", "--full"], **{k: [TENSOR, *v] for k, v in SHOWN.items()}}
    for name, args in runs.items():
        run = run_child(["sh", "-c", 'exec "$@" > "$0"', sink, PY, "-m", "ckpt_tools", "show",
                         prefix, *args], env)
        out[name] = {"wall_s": round(run.wall_s, 2), "maxrss_mb": round(run.maxrss_mb, 1),
                     "out_bytes": os.path.getsize(sink)}
        os.remove(sink)
    return out


def show_full_rows(size: str, result: dict, row) -> list[dict]:
    """Each command's peak RSS beside the tensor's bytes: the ratio is its growth over the
    start-up peak to the tensor's size, and the target bounds that growth by the tensor
    read whole, a float64 working copy of it for the statistics, and one part of 64K values
    formatted (3x the tensor + 32 MB); the whole text (10 to 21 bytes a value) is never
    held.

    Args:
        row: ``report._row``.

    Returns:
        `list[dict]`: the rows.
    """
    tensor_mb = result["tensor_bytes"] / (1 << 20)
    base = result[STARTUP]["maxrss_mb"]
    out = []
    for name in SHOWN:
        rss = result[name]["maxrss_mb"]
        grow = rss - base
        text_mb = result[name]["out_bytes"] / (1 << 20)
        out.append(row(size, f"peak RSS, ckpt {name} ({result['values']:,} values, "
                       f"{text_mb:.0f} MB of text, {result[name]['wall_s']:.1f} s)", rss,
                       f"{tensor_mb:.2f} MB", "MB", grow / tensor_mb,
                       f"growth over start-up ({base:.0f} MB) <= 3x tensor + 32 MB",
                       grow <= 3 * tensor_mb + 32, "the tensor's bytes"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="4M", help="bytes of the tensor (4M: 1M values)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        result = bench_show_full(parse_size(args.size), work, child_env())
    print(json.dumps({"size": args.size, "show_full": result}, indent=1))


if __name__ == "__main__":
    main()
