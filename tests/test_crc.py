"""CRC32C backends, combine and the parallel path against the ``crc32c`` package (a second,
independent implementation) and the standard check value."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from ckpt_tools.formats import crc

_reference = crc._load_crc32c_package()  # the crc32c package's C core


def test_check_value_and_backend():
    assert crc.crc32c(b"123456789") == 0xE3069283
    assert crc.BACKEND in ("fastcrc", "crc32c")


@pytest.mark.parametrize("n", [0, 1, 7, 4096, 100_003])
def test_matches_the_crc32c_package_and_continues(n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    assert crc.crc32c(data) == _reference(data)
    cut = n // 3
    assert crc.crc32c(data[cut:], crc.crc32c(data[:cut])) == _reference(data)
    assert crc.crc32c(memoryview(data)[cut:]) == _reference(data[cut:])


@pytest.mark.parametrize("cut", [0, 1, 5, 1000, 65_537])
def test_combine_equals_crc_of_concatenation(cut):
    data = np.random.default_rng(cut).integers(0, 256, 70_000, dtype=np.uint8).tobytes()
    a, b = data[:cut], data[cut:]
    assert crc.combine(_reference(a), _reference(b), len(b)) == _reference(data)


def test_parallel_equals_serial_on_a_mapped_file(tmp_path):
    n = crc.PARALLEL_MIN + 3 * crc.PIECE // 2 + 13  # several pieces and a short last one
    data = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    path = tmp_path / "blob"
    data.tofile(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        assert crc.crc32c_parallel(view[5:]) == _reference(data[5:].tobytes())
        assert crc.crc32c_parallel(view[:100]) == _reference(data[:100].tobytes())
        del view
