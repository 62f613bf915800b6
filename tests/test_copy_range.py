"""Large tensors are copied by the kernel (``os.copy_file_range``) with their CRC checked on a
second thread: the output must be byte-for-byte what the user-space copy writes, a CRC
mismatch must still refuse the copy, and a kernel that cannot copy falls back."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from _corpus import write_bundle

from ckpt_tools import CorruptCheckpointError, open_checkpoint
from ckpt_tools.errors import WriteError
from ckpt_tools.formats import bundle_writer
from ckpt_tools.formats.bundle import BundleReader
from ckpt_tools.formats.bundle_writer import BundleWriter


def _source(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"big": rng.normal(size=(3, 300_001)).astype(np.float32),  # 3.6 MB: kernel copy
               "small": np.arange(10, dtype=np.int64)}
    return write_bundle(tmp_path / "src" / "model.ckpt", tensors), tensors


def _copy_all(src, out, verify=True):
    reader = BundleReader(str(src))
    ticks = []
    with BundleWriter(str(out)) as w:
        for name, e in reader.entries.items():
            path = reader.data_files()[e.shard_id]
            w.add_stream(name, e.dtype, e.shape, path, e.offset, e.stored_bytes, e.crc32c,
                         verify=verify, progress=ticks.append)
    reader.close()
    return ticks


def test_kernel_copy_equals_user_space_copy(tmp_path, monkeypatch):
    src, tensors = _source(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    calls = []
    real = os.copy_file_range
    monkeypatch.setattr(os, "copy_file_range", lambda *a: calls.append(a) or real(*a))
    ticks = _copy_all(src, tmp_path / "a" / "m")
    assert calls and sum(ticks) == sum(t.nbytes for t in tensors.values())
    monkeypatch.setattr(bundle_writer, "_RANGE_MIN", 1 << 60)  # user space only
    _copy_all(src, tmp_path / "b" / "m")
    for suffix in (".index", ".data-00000-of-00001"):
        assert (tmp_path / "a" / f"m{suffix}").read_bytes() == \
            (tmp_path / "b" / f"m{suffix}").read_bytes()
    with open_checkpoint(tmp_path / "a" / "m") as ckpt:
        for name, value in tensors.items():
            np.testing.assert_array_equal(ckpt.tensor(name), value)


def test_kernel_copy_still_refuses_a_bad_crc(tmp_path):
    src, _ = _source(tmp_path)
    data = tmp_path / "src" / "model.ckpt.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[2_000_000] ^= 0x10
    data.write_bytes(bytes(raw))
    (tmp_path / "out").mkdir()
    with pytest.raises(CorruptCheckpointError, match="checksum mismatch for tensor 'big'"):
        _copy_all(src, tmp_path / "out" / "m")
    assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("code", [errno.EXDEV, errno.ENOSYS, errno.EINVAL])
def test_a_kernel_that_cannot_copy_falls_back(tmp_path, monkeypatch, code):
    src, tensors = _source(tmp_path)

    def refuse(*args):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "copy_file_range", refuse)
    (tmp_path / "out").mkdir()
    _copy_all(src, tmp_path / "out" / "m")
    with open_checkpoint(tmp_path / "out" / "m") as ckpt:
        np.testing.assert_array_equal(ckpt.tensor("big"), tensors["big"])


def test_a_full_disk_during_a_kernel_copy_is_a_write_error(tmp_path, monkeypatch):
    src, _ = _source(tmp_path)

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "copy_file_range", full)
    (tmp_path / "out").mkdir()
    with pytest.raises(WriteError, match="No space left"):
        _copy_all(src, tmp_path / "out" / "m")
    assert os.listdir(tmp_path / "out") == []


def test_the_disk_write_starts_during_the_copy(tmp_path, monkeypatch):
    """Linux: sync_file_range(SYNC_FILE_RANGE_WRITE) over the bytes copied so far, each time
    _KICK_EVERY more were copied (the final fsync then has only the tail left)."""
    if not bundle_writer._writeback_starter():
        pytest.skip("no sync_file_range here")
    src, tensors = _source(tmp_path)
    real = bundle_writer._writeback_starter()
    kicks = []
    monkeypatch.setattr(bundle_writer, "_sync_file_range",
                        lambda fd, start, n, flags: kicks.append((start, n, flags))
                        or real(fd, start, n, flags))
    monkeypatch.setattr(bundle_writer, "_KICK_EVERY", 1)
    monkeypatch.setattr(os, "fdatasync", lambda fd: pytest.fail("fdatasync thread started"))
    (tmp_path / "ok").mkdir()
    _copy_all(src, tmp_path / "ok" / "m")
    assert kicks == [(0, tensors["big"].nbytes, 2)]  # the first tensor: "big"
    with open_checkpoint(tmp_path / "ok" / "m") as ckpt:
        np.testing.assert_array_equal(ckpt.tensor("big"), tensors["big"])


@pytest.mark.parametrize("starter", ["missing", "refused"])
def test_background_syncs_overlap_the_copy_and_report_their_errors(tmp_path, monkeypatch,
                                                                   starter):
    """Without sync_file_range (not Linux), or where the filesystem refuses it: a background
    fdatasync every _SYNC_EVERY bytes."""
    src, tensors = _source(tmp_path)
    monkeypatch.setattr(bundle_writer, "_KICK_EVERY", 1)
    monkeypatch.setattr(bundle_writer, "_sync_file_range",
                        False if starter == "missing" else lambda *a: -1)
    monkeypatch.setattr(bundle_writer, "_SYNC_EVERY", 1)  # a sync after every large tensor
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(fd) or real(fd))
    (tmp_path / "ok").mkdir()
    _copy_all(src, tmp_path / "ok" / "m")
    assert synced
    with open_checkpoint(tmp_path / "ok" / "m") as ckpt:
        np.testing.assert_array_equal(ckpt.tensor("big"), tensors["big"])

    def failing(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", failing)
    (tmp_path / "bad").mkdir()
    with pytest.raises(WriteError, match="Input/output error"):
        _copy_all(src, tmp_path / "bad" / "m")
    assert os.listdir(tmp_path / "bad") == []
