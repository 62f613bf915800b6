"""Peak RSS of ``ckpt average`` from S3 against the same average of local copies, at 2 and 5
inputs side by side: the remote read-ahead is one budget for the whole command, so memory must
not grow with the number of inputs (review-16-attack-r3: 503 MB for 2 inputs of 300 MB, 873 MB
for 5, local 181 MB).

Also the same averages written into S3 (``--out s3://``: written locally, then uploaded):
of the local copies, and of the S3 inputs. The upload goes one 8 MiB part at a time
(review-16-attack-r4: s3fs's ``_put_file`` held up to 10 x 50 MiB, 1,027 MB peak RSS for a
450 MB output against 253 MB into a local directory).

Starts moto's S3 server on a free loopback port, writes one make_ckpt.py checkpoint (1,003
tensors, two shards), uploads it under ``s3://ckpts/in0/`` and server-side copies ``in1/`` ...,
keeps local copies beside it, and runs each ``ckpt average`` as a fresh child (``launch.py``:
wall time and the child's own peak RSS). Used by ``bench/run.py --only remote-average``, or::

    python bench/remote_average.py --size 300M --counts 2 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_ckpt import parse_size, write_checkpoint  # noqa: E402
from measure import child_env, run_child  # noqa: E402

PY = sys.executable


def _start_moto() -> tuple[object, dict[str, str]]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
                    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"}


def bench_remote_average(nbytes: int, counts: list[int], workdir: str,
                         env: dict[str, str]) -> dict:
    """Returns ``{count: {"local": {...}, "remote": {...}, "local_to_s3": {...},
    "remote_to_s3": {...}, "outputs_equal": bool, "s3_outputs_equal": bool}}``: wall seconds
    and peak RSS (MB) of ``ckpt average`` of ``count`` copies of one ``nbytes`` checkpoint,
    local and from S3, into a local directory and into S3; every output is checked
    byte-identical to the local one."""
    import boto3

    server, aws = _start_moto()
    env = {**env, **aws}
    saved = {k: os.environ.get(k) for k in aws}
    os.environ.update(aws)
    try:
        src = os.path.join(workdir, "in0")
        write_checkpoint(src, nbytes)
        client = boto3.client("s3")
        client.create_bucket(Bucket="ckpts")
        names = sorted(os.listdir(src))
        for name in names:
            client.upload_file(os.path.join(src, name), "ckpts", f"in0/{name}")
        for i in range(1, max(counts)):
            shutil.copytree(src, os.path.join(workdir, f"in{i}"))
            for name in names:
                client.copy({"Bucket": "ckpts", "Key": f"in0/{name}"}, "ckpts",
                            f"in{i}/{name}")
        out: dict = {}
        for count in counts:
            row = {}
            # where: inputs (local copies or S3) -> output (local directory or S3)
            for where in ("local", "remote", "local_to_s3", "remote_to_s3"):
                inputs = [f"s3://ckpts/in{i}/" if where.startswith("remote") else
                          os.path.join(workdir, f"in{i}") for i in range(count)]
                target = (f"s3://ckpts/out-{where}-{count}/" if where.endswith("_to_s3")
                          else os.path.join(workdir, f"out-{where}-{count}"))
                run = run_child([PY, "-m", "ckpt_tools", "average", *inputs, "--newest",
                                 inputs[-1], "--out", target, "-q"], env)
                row[where] = {"wall_s": round(run.wall_s, 2),
                              "maxrss_mb": round(run.maxrss_mb)}
            local = os.path.join(workdir, f"out-local-{count}")
            row["outputs_equal"] = _same_dirs(local, os.path.join(workdir,
                                                                  f"out-remote-{count}"))
            row["s3_outputs_equal"] = all(
                _same_objects(client, f"out-{where}-{count}/", local)
                for where in ("local_to_s3", "remote_to_s3"))
            out[count] = row
        return out
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _same_dirs(a: str, b: str) -> bool:
    names = sorted(os.listdir(a))
    if names != sorted(os.listdir(b)):
        return False
    for name in names:
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            if fa.read() != fb.read():
                return False
    return True


def _same_objects(client, prefix: str, directory: str) -> bool:
    """Returns whether the objects under ``s3://ckpts/<prefix>`` are the files of
    ``directory``, byte for byte."""
    listed = client.list_objects_v2(Bucket="ckpts", Prefix=prefix).get("Contents", [])
    names = sorted(o["Key"][len(prefix):] for o in listed)
    if names != sorted(os.listdir(directory)):
        return False
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            body = client.get_object(Bucket="ckpts", Key=prefix + name)["Body"].read()
            if body != f.read():
                return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="300M", help="bytes per checkpoint")
    parser.add_argument("--counts", type=int, nargs="+", default=[2, 5])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        result = bench_remote_average(parse_size(args.size), args.counts, work, child_env())
    print(json.dumps({"size": args.size, "averages": result}, indent=1))


if __name__ == "__main__":
    main()
