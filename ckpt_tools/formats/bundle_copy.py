"""How :class:`~ckpt_tools.formats.bundle_writer.BundleWriter` copies a tensor's stored bytes
from a source data file (``add_stream``): through user space in chunks (pread, CRC, write) or
in the kernel with ``os.copy_file_range`` while a second thread computes the CRC32C from a
read-only map. A mixin of the writer (its file, sink, maps and CRC pool), kept apart so that
the writer's module holds the entries, the writeback and the publishing."""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager

from . import crc
from ._io import close_map, is_url, map_file, open_binary, open_ranged, release_pages, view
from ._write import os_errors

_COPY_CHUNK = 8 * 1024 * 1024

# copy_file_range's refusals that mean "not between these files" (cross-device on old
# kernels, filesystems without it): nothing was copied, so the bytes go through user space.
_NO_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP,
             errno.EBADF, errno.EPERM}


@contextmanager
def _source(path: str):
    """Yields ``pread(size, offset) -> bytes`` over a data file: ``os.pread`` on a regular
    local file (never a FIFO or device), byte-range requests for a URL (read ahead when the
    copy goes through the file in order)."""
    if is_url(path):
        remote = open_ranged(path)
        yield lambda n, pos: bytes(view(remote, pos, min(pos + n, len(remote))))
        return
    with open_binary(path) as src:
        fd = src.fileno()
        yield lambda n, pos: os.pread(fd, n, pos)


class SourceCopies:
    """The source-copying half of :class:`~ckpt_tools.formats.bundle_writer.BundleWriter`."""

    def _copy_user(self, name: str, src_path: str, offset: int, size: int, need_crc: bool,
                   progress) -> int:
        """Copies through user space in chunks (pread, CRC, write); returns the raw CRC."""
        from ..errors import CorruptCheckpointError

        running = 0
        with _source(src_path) as pread:
            pos, end = offset, offset + size
            while pos < end:
                chunk = pread(min(_COPY_CHUNK, end - pos), pos)
                if not chunk:
                    raise CorruptCheckpointError(f"data ends before tensor {name!r} does",
                                                 path=src_path, offset=pos)
                if need_crc:
                    running = crc.crc32c(chunk, running)
                self._write(chunk)
                pos += len(chunk)
                if progress:
                    progress(len(chunk))
        return running

    def _copy_range(self, name: str, src_path: str, offset: int, size: int, need_crc: bool,
                    progress) -> int | None:
        """Copies with ``os.copy_file_range`` (in the kernel, page cache to page cache, as
        ``cp`` does: no pread copy, no write copy) while a second thread computes the CRC32C
        of the same bytes from a read-only map of the source (one map per source file and one
        CRC thread per writer, kept until :meth:`finish`).

        Returns:
            the raw CRC32C (0 when not ``need_crc``), or ``None`` when the kernel cannot copy
            between these files (nothing was written: the caller copies through user space).

        Raises:
            CorruptCheckpointError: if the source ends before ``offset + size``.
            WriteError: if writing fails (disk full...).
        """
        from ..errors import CorruptCheckpointError

        with os_errors(self._shown(self.data_path), "writing"):
            self._f.flush()  # then the data file's own offset is where the copy goes
        out_fd = self._f.fileno()
        with open_binary(src_path) as src:
            pending = self._checksum(src_path, offset, size) if need_crc else None
            try:
                pos, end = offset, offset + size
                while pos < end:
                    try:
                        n = os.copy_file_range(src.fileno(), out_fd, min(_COPY_CHUNK, end - pos),
                                               pos)
                    except OSError as exc:
                        if pos == offset and exc.errno in _NO_RANGE:
                            return None
                        with os_errors(self._shown(self.data_path), "writing"):
                            raise
                    if n == 0:
                        raise CorruptCheckpointError(f"data ends before tensor {name!r} does",
                                                     path=src_path, offset=pos)
                    pos += n
                    if progress:
                        progress(n)
            finally:
                if pending is not None:
                    pending.exception()  # waits for it; a copy error is the one raised
        running = pending.result() if pending is not None else 0  # or the CRC's error
        self._sync_behind(size)
        return running

    def _checksum(self, src_path: str, offset: int, size: int):
        """Starts the CRC32C of ``size`` bytes of ``src_path`` from ``offset`` on this
        writer's CRC thread; returns its future (``result()`` raises what the CRC raised)."""
        mapping = self._maps.get(src_path)
        if mapping is None:
            mapping = self._maps[src_path] = map_file(src_path)
        if self._crc_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._crc_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-crc")

        def checksum() -> int:
            with memoryview(mapping) as whole, whole[offset : offset + size] as part:
                value = crc.crc32c(part)  # fastcrc releases the GIL
            release_pages(mapping, offset, size)  # resident memory: one tensor, not the file
            return value

        return self._crc_pool.submit(checksum)

    def _release_sources(self) -> None:
        """Stops the CRC and writeback threads (the file must not close under them) and
        unmaps the sources (finish and abort)."""
        for pool in (self._crc_pool, self._kick_pool):
            if pool is not None:
                pool.shutdown(wait=True)
        self._crc_pool = self._kick_pool = None
        maps, self._maps = self._maps, {}
        for mapping in maps.values():
            close_map(mapping)
