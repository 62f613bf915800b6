"""``ckpt list`` through a local S3 API: the same requests and nearly the same time at any size.

Starts moto's S3 server on a free loopback port, writes bench/make_ckpt.py's 1,003-tensor
two-shard checkpoint layout at each size (an index with real extents, its ``.meta`` from a
TensorFlow child, the state file; sparse, all-zero data shards), uploads all of it and times
``ckpt list`` as a fresh process, counting requests from the server's log. moto holds each
multipart upload in this process's memory (twice the object's size at once), so sizes above
a few GB are not practical in two shards; ``--shards 16`` spreads 10 GB over 640 MB objects
(each held twice only while it is assembled), which this machine can spare.

Example::

    python bench/remote_list.py --sizes 1G 10G --shards 16 --repeat 5
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_ckpt import (  # noqa: E402
    NUM_SHARDS,
    PREFIX_NAME,
    assign_shards,
    layout,
    parse_size,
    write_meta,
)

from ckpt_tools.formats._protos import BundleEntryProto, BundleHeaderProto  # noqa: E402
from ckpt_tools.formats.bundle import data_path  # noqa: E402
from ckpt_tools.formats.bundle_writer import write_state_file  # noqa: E402
from ckpt_tools.formats.table_builder import build_table  # noqa: E402


def sparse_checkpoint(directory: str, total: int, num_shards: int = NUM_SHARDS) -> str:
    """Writes make_ckpt's layout with sparse (all-zero, unallocated) data shards; returns the
    prefix. The index's extents are real; its CRCs are not (``list`` reads no data)."""
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, PREFIX_NAME)
    specs = layout(total)
    offsets = [0] * num_shards
    items = []
    for spec, shard in zip(specs, assign_shards(specs, num_shards), strict=True):
        entry = BundleEntryProto(dtype=9 if spec.dtype == "int64" else 1, shard_id=shard,
                                 offset=offsets[shard], size=spec.nbytes)
        for d in spec.shape:
            entry.shape.dim.add(size=d)
        offsets[shard] += spec.nbytes
        items.append((spec.name.encode(), entry.SerializeToString()))
    for shard, size in enumerate(offsets):
        with open(data_path(prefix, shard, num_shards), "wb") as f:
            f.truncate(size)
    header = BundleHeaderProto(num_shards=num_shards, endianness=0)
    header.version.producer = 1
    with open(prefix + ".index", "wb") as f:
        f.write(build_table([(b"", header.SerializeToString()), *sorted(items)]))
    write_state_file(directory, PREFIX_NAME)
    write_meta(prefix)
    return prefix


class Log(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["10M", "1G"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shards", type=int, default=NUM_SHARDS,
                        help="data shards (several keep each uploaded object small)")
    args = parser.parse_args()
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
           "AWS_DEFAULT_REGION": "us-east-1"}
    os.environ.update(env)
    log = Log()
    logging.getLogger("werkzeug").setLevel(logging.INFO)
    logging.getLogger("werkzeug").addHandler(log)
    try:
        import boto3

        client = boto3.client("s3")
        client.create_bucket(Bucket="ckpts")
        from boto3.s3.transfer import TransferConfig

        transfer = TransferConfig(multipart_chunksize=64 << 20)
        print("| checkpoint | objects uploaded | requests | `ckpt list s3://…` (median of "
              f"{args.repeat}) | `ckpt list` on the local copy |\n|---|---|---|---|---|")
        for size in args.sizes:
            with tempfile.TemporaryDirectory() as tmp:
                prefix = sparse_checkpoint(tmp, parse_size(size), args.shards)
                uploaded = []
                for name in sorted(os.listdir(tmp)):
                    path = os.path.join(tmp, name)
                    client.upload_file(path, "ckpts", f"{size}/{name}", Config=transfer)
                    uploaded.append(name)
                times, counts = [], set()
                for _ in range(args.repeat):
                    start_lines = len(log.lines)
                    t0 = time.perf_counter()
                    out = subprocess.run([sys.executable, "-m", "ckpt_tools", "list",
                                          f"s3://ckpts/{size}/", "--json"],
                                         capture_output=True, env=env)
                    if out.returncode:
                        sys.exit(out.stderr.decode())
                    times.append(time.perf_counter() - t0)
                    counts.add(len(log.lines) - start_lines)
                assert b"global_step" in out.stdout
                local = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    subprocess.run([sys.executable, "-m", "ckpt_tools", "list", tmp, "--json"],
                                   capture_output=True, env=env, check=True)
                    local.append(time.perf_counter() - t0)
                data = f"index, .meta, state file, {args.shards} data shards"
                print(f"| {size} ({os.path.basename(prefix)}, 1,003 tensors) | {data} | "
                      f"{'/'.join(map(str, sorted(counts)))} | "
                      f"{statistics.median(times):.2f} s | {statistics.median(local):.2f} s |",
                      flush=True)
                for name in uploaded:
                    client.delete_object(Bucket="ckpts", Key=f"{size}/{name}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
