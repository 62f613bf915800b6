"""Generate a realistic two-shard TF1-style checkpoint quickly, without TensorFlow.

The checkpoint has a constant number of variables at every size (so listing costs can be
compared across sizes): 334 float32 weights, each with an EMA shadow
(``<var>/ExponentialMovingAverage``) and a momentum slot (``<var>/Momentum``), plus an int64
``global_step`` -- 1,003 tensors. Two weights (an embedding and a softmax matrix) hold 60% of
the bytes, so at 1 GB six tensors are ~100 MB each; the rest are kernels, biases and layer-norm
vectors of mixed sizes. Data is written by a small two-shard bundle writer built on
``ckpt_tools.formats.table_builder.build_table`` (the library's ``BundleWriter`` writes one
shard only); the
``.meta`` graph, which TensorFlow baselines need, is written by a TensorFlow child process.

Example::

    python bench/make_ckpt.py /tmp/ckpt-1g --size 1G
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass

import numpy as np

from ckpt_tools.formats import crc
from ckpt_tools.formats._protos import BundleEntryProto, BundleHeaderProto
from ckpt_tools.formats.bundle import data_path
from ckpt_tools.formats.bundle_writer import write_state_file
from ckpt_tools.formats.table_builder import build_table

PREFIX_NAME = "model.ckpt-1000"
EMA_SUFFIX = "ExponentialMovingAverage"
SLOT_SUFFIX = "Momentum"
NUM_SHARDS = 2
NUM_LAYERS = 83  # x 4 weights + 2 big weights = 334 weights -> 1,003 tensors
BIG_SHARE = 0.3  # of the weight bytes, for each of the two big weights
_DT_FLOAT, _DT_INT64 = 1, 9  # TensorFlow DataType enum values
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True)
class TensorSpec:
    """One tensor to write: checkpoint key, shape, dtype name and role."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # "float32" or "int64"
    role: str  # "weight", "ema", "slot" or "step"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * (8 if self.dtype == "int64" else 4)


def parse_size(text: str) -> int:
    """Parses ``"1G"``, ``"200M"``, ``"5M"``, ``"512K"`` or a byte count (binary units).

    Raises:
        ValueError: for anything else.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)i?B?\s*", text.upper())
    if not m:
        raise ValueError(f"invalid size {text!r}: expected a number with K, M or G (e.g. 200M)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _matrix(name: str, elements: int, cols: int) -> TensorSpec:
    cols = max(1, min(cols, elements))
    return TensorSpec(name, (max(1, elements // cols), cols), "float32", "weight")


def weight_layout(total_bytes: int, layers: int = NUM_LAYERS) -> list[TensorSpec]:
    """Returns the ``4 * layers + 2`` weights (334 by default) of a checkpoint of about
    ``total_bytes`` (all copies included).

    Layer widths are 256/512/1024, narrowed for small sizes so that the bias and layer-norm
    vectors stay under 10% of the bytes; the kernels take the rest.
    """
    weight_bytes = total_bytes / 3  # weight + EMA shadow + momentum slot
    big = int(weight_bytes * BIG_SHARE / 4)
    weights = [_matrix("embedding/weights", big, 512), _matrix("softmax/weights", big, 512)]
    widths = [(256, 512, 1024)[i % 3] for i in range(layers)]
    vector_elems = 3 * sum(widths)
    scale = min(1.0, 0.1 * weight_bytes / 4 / vector_elems)
    widths = [max(1, int(w * scale)) for w in widths]
    kernel_elems = weight_bytes * (1 - 2 * BIG_SHARE) / 4 - 3 * sum(widths)
    rel = [(1 + i % 4) ** 2 * (1 + (i % 7) / 3) for i in range(layers)]
    for i, (r, width) in enumerate(zip(rel, widths, strict=True)):
        scope = f"encoder/layer_{i:03d}" if layers <= 1000 else f"encoder/layer_{i:05d}"
        elems = max(width, int(kernel_elems * r / sum(rel)) // width * width)
        weights += [_matrix(f"{scope}/dense/kernel", elems, width)]
        weights += [TensorSpec(f"{scope}/{n}", (width,), "float32", "weight")
                    for n in ("dense/bias", "LayerNorm/gamma", "LayerNorm/beta")]
    return weights


def layers_for(variables: int) -> int:
    """Returns the layer count whose checkpoint holds about ``variables`` tensors."""
    return max(1, math.ceil(((variables - 1) / 3 - 2) / 4))


def layout(total_bytes: int, layers: int = NUM_LAYERS) -> list[TensorSpec]:
    """Returns every tensor of the checkpoint (weights, shadows, slots, ``global_step``):
    ``3 * (4 * layers + 2) + 1`` of them (1,003 by default)."""
    out = [TensorSpec("global_step", (), "int64", "step")]
    for w in weight_layout(total_bytes, layers):
        out += [w, TensorSpec(f"{w.name}/{EMA_SUFFIX}", w.shape, w.dtype, "ema"),
                TensorSpec(f"{w.name}/{SLOT_SUFFIX}", w.shape, w.dtype, "slot")]
    return sorted(out, key=lambda t: t.name)


def _values(spec: TensorSpec, rng: np.random.Generator, step: int = 1000) -> np.ndarray:
    """Random finite float32 values (random sign and mantissa, magnitude ~0.01), fast;
    ``step`` for the int64 ``global_step``."""
    if spec.dtype == "int64":
        return np.array(step, dtype="<i8")
    bits = rng.integers(0, 1 << 32, size=math.prod(spec.shape), dtype=np.uint32)
    bits &= np.uint32(0x807FFFFF)
    bits |= np.uint32(120 << 23)
    return bits.view("<f4").reshape(spec.shape)


def assign_shards(specs: list[TensorSpec], num_shards: int = NUM_SHARDS) -> list[int]:
    """Greedy byte balance: each tensor (largest first) goes to the emptiest shard; big
    tensors are never split, so a shard is at least the biggest tensor."""
    loads = [0] * num_shards
    shard = [0] * len(specs)
    for i in sorted(range(len(specs)), key=lambda i: -specs[i].nbytes):
        shard[i] = loads.index(min(loads))
        loads[shard[i]] += specs[i].nbytes
    return shard


def write_checkpoint(directory: str, total_bytes: int, *, seed: int = 0,
                     layers: int = NUM_LAYERS, step: int = 1000) -> str:
    """Writes the two-shard checkpoint and its ``checkpoint`` state file; returns the prefix.

    Args:
        directory: output directory (created if missing).
        total_bytes: approximate total tensor bytes.
        seed: random seed for the values.
        layers: layer count (see :func:`layout`; the default gives 1,003 tensors).
        step: the value of ``global_step``.
    """
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, PREFIX_NAME)
    specs = layout(total_bytes, layers)
    shards = assign_shards(specs)
    rng = np.random.default_rng(seed)
    files = [open(data_path(prefix, s, NUM_SHARDS), "wb") for s in range(NUM_SHARDS)]
    offsets = [0] * NUM_SHARDS
    items = []
    try:
        for spec, shard in zip(specs, shards, strict=True):
            data = np.ascontiguousarray(_values(spec, rng, step)).reshape(-1).view(np.uint8)
            files[shard].write(data)
            entry = BundleEntryProto(dtype=_DT_INT64 if spec.dtype == "int64" else _DT_FLOAT,
                                     shard_id=shard, offset=offsets[shard], size=len(data),
                                     crc32c=crc.mask(crc.crc32c(data)))
            for d in spec.shape:
                entry.shape.dim.add(size=d)
            offsets[shard] += len(data)
            items.append((spec.name.encode(), entry.SerializeToString()))
    finally:
        for f in files:
            f.close()
    header = BundleHeaderProto(num_shards=NUM_SHARDS, endianness=0)
    header.version.producer = 1
    with open(prefix + ".index", "wb") as f:
        f.write(build_table([(b"", header.SerializeToString()), *sorted(items)]))
    write_state_file(directory, PREFIX_NAME)
    return prefix


def data_files(prefix: str) -> list[str]:
    """Returns the data shard paths of a generated checkpoint."""
    return [data_path(prefix, s, NUM_SHARDS) for s in range(NUM_SHARDS)]


def write_meta(prefix: str, env: dict[str, str] | None = None) -> str:
    """Writes ``<prefix>.meta`` (a tf.compat.v1 graph of the same variables) in a TF child."""
    spec_path = prefix + ".layout.json"
    weights = [asdict(w) for w in weight_layout_of(prefix)]
    with open(spec_path, "w", encoding="utf-8") as f:
        json.dump(weights, f)
    tasks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks.py")
    subprocess.run([sys.executable, tasks, "make-meta", spec_path, prefix + ".meta"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    os.remove(spec_path)
    return prefix + ".meta"


def weight_layout_of(prefix: str) -> list[TensorSpec]:
    """Reads back the weights (not shadows, slots or the step) of a generated checkpoint."""
    from ckpt_tools.formats.bundle import BundleReader

    reader = BundleReader(prefix, verify=False)
    try:
        return [TensorSpec(e.name, e.shape, "float32", "weight") for e in reader.entries.values()
                if e.name != "global_step" and not e.name.endswith((EMA_SUFFIX, SLOT_SUFFIX))]
    finally:
        reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--size", default="1G", help="total tensor bytes (1G, 200M, 5M)")
    parser.add_argument("--variables", type=int, help="about this many tensors (default 1,003)")
    parser.add_argument("--no-meta", action="store_true", help="skip the .meta (needs TF)")
    args = parser.parse_args()
    layers = layers_for(args.variables) if args.variables else NUM_LAYERS
    prefix = write_checkpoint(args.directory, parse_size(args.size), layers=layers)
    if not args.no_meta:
        write_meta(prefix)
    print(prefix)


if __name__ == "__main__":
    main()
