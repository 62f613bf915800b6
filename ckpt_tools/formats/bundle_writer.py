"""Native writer for V2 checkpoints (tensor bundles), bit-compatible with TensorFlow's.

Files are written under temporary names in the destination directory and renamed into place
only when complete — data shard first, ``.index`` last, since TensorFlow treats a present
``.index`` as a finished checkpoint — so an interrupted write never leaves a partial checkpoint
under the output name. Every rename goes through the writer discipline of ``_write.py``
(test pause hook, OS errors naming the output path); slices are checked with
:func:`~ckpt_tools.formats.slices.check_partition` before they are written.
"""

from __future__ import annotations

import os
import sys
import threading

from ..errors import OutputError, WriteError
from . import crc, dtypes
from ._io import is_url, remove_quietly, temp_name
from ._protos import BundleEntryProto, BundleHeaderProto
from ._write import os_errors, replace
from .bundle import data_path
from .bundle_copy import SourceCopies
from .slices import FULL, TensorSlice, check_partition, encode_key
from .strings import encode_strings
from .table_builder import build_table

TYPE_CHECKING = False  # typing.TYPE_CHECKING: NumPy only for add_array (restore-ema never)
if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

# Tensors from this size up are copied by the kernel (os.copy_file_range) with the CRC on a
# second thread; below it a pread and a write cost less than the hand-off.
_RANGE_MIN = 1 << 20
# Written bytes after which the disk write of the data file is started (sync_file_range on
# Linux, without waiting for it), so the disk writes the data while the copy goes on and the
# final fsync (kept: the index never points at unsynced data) has only the tail left. Where
# sync_file_range is missing, a background fdatasync every _SYNC_EVERY bytes does it.
_KICK_EVERY = 8 << 20
_SYNC_EVERY = 128 << 20
_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writing dirty pages out, do not wait
_sync_file_range = None  # libc's, looked up on first use (False: not available)


def _writeback_starter():
    """Returns libc's ``sync_file_range`` (through ctypes; ``os`` has no binding), or ``None``
    where there is none (not Linux)."""
    global _sync_file_range
    if _sync_file_range is None:
        _sync_file_range = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                fn = ctypes.CDLL(None, use_errno=True).sync_file_range
                fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
                fn.restype = ctypes.c_int
                _sync_file_range = fn
            except (OSError, AttributeError):
                pass
    return _sync_file_range or None
def _shape_proto(proto, shape) -> None:
    for d in shape:
        proto.dim.add(size=int(d))


class BundleWriter(SourceCopies):
    """Writes one single-shard V2 checkpoint at ``prefix``.

    Use as a context manager; on an exception the temporary files are removed and nothing
    appears under ``prefix``.

    Args:
        prefix: output checkpoint prefix (``out/model.ckpt-1000``).
        shown: maps a path written here to the name to show in errors (a staged directory's
            files are named by their final place).

    Raises:
        OutputError: if the destination directory does not exist or is not writable.

    Example:
        >>> with BundleWriter("/tmp/out/model.ckpt") as w:  # doctest: +SKIP
        ...     w.add_array("W", np.ones([2, 2], np.float32))
    """

    def __init__(self, prefix: str, shown=None, sink=None):
        self.prefix = prefix
        self._shown = shown or (lambda p: p)
        self.index_path = prefix + ".index"
        self.data_path = data_path(prefix, 0, 1)
        # sink: a write-only file object the data goes to instead of a local file (a remote
        # multipart upload; see finish_stream). Its errors are its own (they name a URL).
        self._sink = sink
        self._tmp_data = None
        if sink is not None:
            self._f = sink
        else:
            directory = os.path.dirname(os.path.abspath(prefix))
            if not os.path.isdir(directory):
                raise OutputError(f"{directory}: output directory does not exist")
            self._tmp_data = temp_name(self.data_path)
            try:
                self._f = open(self._tmp_data, "wb")
            except OSError as exc:
                raise OutputError(f"{directory}: cannot write there ({exc.strerror})") from None
        self._entries: dict[bytes, bytes] = {}
        self._full_shapes: dict[str, tuple[int, ...]] = {}
        self._offset = 0
        self._done = False
        self._unsynced = 0  # bytes written since the last background sync started
        self._syncer: threading.Thread | None = None
        self._sync_error: OSError | None = None
        self._kicked = 0  # data file bytes whose disk write was started (sync_file_range)
        self._kick_pool: ThreadPoolExecutor | None = None  # runs those starts
        self._kick_refused = False
        self._maps: dict[str, object] = {}  # source path -> read-only map, for the CRC
        self._crc_pool: ThreadPoolExecutor | None = None

    # -- adding tensors --------------------------------------------------------------------
    def _entry(self, key: bytes, dtype: int, shape, size: int, crc32c: int,
               slices: tuple[TensorSlice, ...] = ()) -> None:
        if key in self._entries:
            raise OutputError(f"duplicate tensor {key!r} in output checkpoint")
        p = BundleEntryProto(dtype=dtype)
        _shape_proto(p.shape, shape)
        if size:
            p.offset, p.size = self._offset, size
        p.crc32c = crc32c
        for s in slices:
            sp = p.slices.add()
            for start, length in s.extents:
                ext = sp.extent.add(start=start)
                if length != FULL:
                    ext.length = length
        self._entries[key] = p.SerializeToString()
        self._offset += size

    def add_bytes(self, name: str, dtype: int, shape, data, crc32c: int | None = None, *,
                  slice_of: TensorSlice | None = None) -> None:
        """Adds a tensor from its stored bytes (for copies: no decoding, CRC reused)."""
        data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        if crc32c is None:
            crc32c = crc.mask(crc.crc32c(data))
        key = self._key(name, shape, slice_of)
        self._write(data)
        self._entry(key, dtype, shape, len(data), crc32c)

    def _key(self, name: str, shape, slice_of: TensorSlice | None) -> bytes:
        """Returns the entry key, checking a slice against its partitioned tensor's shape."""
        if slice_of is None:
            return name.encode("utf-8")
        full = self._full_shapes.get(name)
        if full is not None:
            if slice_of.shape(full) != tuple(int(d) for d in shape):
                from ..errors import CorruptCheckpointError

                raise CorruptCheckpointError(
                    f"tensor {name!r}: slice {slice_of} has shape {list(shape)}, expected "
                    f"{list(slice_of.shape(full))}")
        return encode_key(name, slice_of)

    def _write(self, data) -> None:
        if self._sink is not None:
            self._f.write(data)
            return
        with os_errors(self._shown(self.data_path), "writing"):
            self._f.write(data)

    def add_stream(self, name: str, dtype: int, shape, src_path: str, offset: int, size: int,
                   crc32c: int | None, *, slice_of: TensorSlice | None = None,
                   verify: bool = True, progress=None, source: str | None = None) -> None:
        """Copies ``size`` bytes of ``src_path`` from ``offset`` in chunks (bounded memory).
        ``source`` is the key those bytes are stored under in ``src_path`` (``name`` where
        not given): the one a checksum error names, as ``ckpt verify`` does.

        Raises:
            CorruptCheckpointError: if ``verify`` and the bytes fail the stored CRC.
        """
        from ..errors import CorruptCheckpointError

        key = self._key(name, shape, slice_of)
        running = None
        if size >= _RANGE_MIN and self._sink is None and not is_url(src_path) and \
                hasattr(os, "copy_file_range"):
            running = self._copy_range(name, src_path, offset, size,
                                       verify or crc32c is None, progress)
        if running is None:
            running = self._copy_user(name, src_path, offset, size, verify or crc32c is None,
                                      progress)
        actual = crc.mask(running)
        if verify and crc32c is not None and actual != crc32c:
            # the key read, not the one written (another variable's, for an average)
            raise CorruptCheckpointError(
                f"checksum mismatch for tensor {source or name!r} (stored 0x{crc32c:08x}, "
                f"computed 0x{actual:08x}): the data file is corrupt", path=src_path,
                offset=offset)
        self._entry(key, dtype, shape, size, crc32c if crc32c is not None else actual)

    def _sync_behind(self, nbytes: int) -> None:
        """Starts the disk write of the data file's new bytes every :data:`_KICK_EVERY` bytes
        (``sync_file_range(SYNC_FILE_RANGE_WRITE)``: queued, not waited for), so the disk
        writes while the copy goes on. Where that call is missing or refused: an
        ``fdatasync`` on a background thread every :data:`_SYNC_EVERY` bytes (one at a time),
        whose error :meth:`finish` raises (Linux reports a writeback error to an open file
        once, so the final ``fsync`` would not see it again). A failed start needs no report:
        the pages stay dirty and the final ``fsync`` writes them or fails."""
        self._unsynced += nbytes
        start_writeback = _writeback_starter() if not self._kick_refused else None
        if start_writeback is not None:
            if self._unsynced < _KICK_EVERY:
                return
            end = self._offset + nbytes  # add_stream records the entry (and offset) after
            start, self._kicked, self._unsynced = self._kicked, end, 0
            if self._kick_pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._kick_pool = ThreadPoolExecutor(max_workers=1,
                                                     thread_name_prefix="ckpt-writeback")
            self._kick_pool.submit(self._kick, start_writeback, start, end - start)
            return
        if self._unsynced < _SYNC_EVERY or (self._syncer and self._syncer.is_alive()):
            return
        self._join_syncer()  # finished: collect its error now
        self._unsynced = 0
        fd = self._f.fileno()

        def sync() -> None:
            try:
                os.fdatasync(fd)
            except OSError as exc:
                self._sync_error = exc

        self._syncer = threading.Thread(target=sync, name="ckpt-sync", daemon=True)
        self._syncer.start()

    def _kick(self, start_writeback, start: int, length: int) -> None:
        """Starts the disk write of ``length`` bytes of the data file from ``start`` (on the
        writeback thread: the kernel prepares the write in the caller, ~0.1 s of CPU per GB,
        which would otherwise hold up the copy). Where it is refused (a filesystem without
        it): an ``fdatasync`` here instead, and :meth:`_sync_behind` uses the fdatasync thread
        from then on; that sync's error is raised by :meth:`finish`."""
        fd = self._f.fileno()
        if start_writeback(fd, start, length, _SYNC_FILE_RANGE_WRITE) == 0:
            return
        self._kick_refused = True
        try:
            os.fdatasync(fd)
        except OSError as exc:
            self._sync_error = exc

    def _join_syncer(self) -> None:
        """Waits for the background sync (the file must not close under it).

        Raises:
            WriteError: if it failed.
        """
        if self._syncer is not None:
            self._syncer.join()
            self._syncer = None
        error, self._sync_error = self._sync_error, None
        if error is not None:
            with os_errors(self._shown(self.data_path), "writing"):
                raise error

    def add_array(self, name: str, array: np.ndarray, *,
                  slice_of: TensorSlice | None = None) -> None:
        """Adds a NumPy array (numeric, bool, or object/bytes array for DT_STRING)."""
        import numpy as np  # deferred: restore-ema copies stored bytes and never needs it

        array = np.asarray(array)
        dtype = dtypes.enum_of_numpy(array.dtype)
        if dtype == dtypes.STRING:
            data, c = encode_strings(array.reshape(-1))
            self.add_bytes(name, dtype, array.shape, data, c, slice_of=slice_of)
            return
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        raw = np.ascontiguousarray(little).reshape(-1).view(np.uint8)
        self.add_bytes(name, dtype, array.shape, raw.data, slice_of=slice_of)

    def add_partitioned(self, name: str, dtype: int, shape, slices: list[TensorSlice], *,
                        complete: bool = True) -> None:
        """Adds the full-name entry of a partitioned tensor (its slices are added separately).

        ``complete=False`` writes one part of a tensor TF1 saved under one key per part (see
        :func:`~ckpt_tools.formats.slices.fragment_groups`): its slices leave a gap.

        Raises:
            CorruptCheckpointError: if ``slices`` do not tile ``shape`` exactly (outside it,
                overlapping, or leaving a gap unless not ``complete``): a bad partition is
                never written.
        """
        check_partition(name, tuple(int(d) for d in shape), slices, complete=complete)
        self._full_shapes[name] = tuple(int(d) for d in shape)
        self._entry(name.encode("utf-8"), dtype, shape, 0, 0, tuple(slices))

    # -- finishing -------------------------------------------------------------------------
    def _index_items(self) -> list[tuple[bytes, bytes]]:
        header = BundleHeaderProto(num_shards=1, endianness=0)
        header.version.producer = 1
        return [(b"", header.SerializeToString())] + sorted(self._entries.items())

    def finish_stream(self) -> bytes:
        """With a ``sink``: closes it (the data object is complete) and returns the bytes of
        the ``.index`` for the caller to write after it."""
        try:
            self._f.close()
        except BaseException:
            self.abort()
            raise
        self._done = True
        return build_table(self._index_items())

    def finish(self) -> list[str]:
        """Writes the index and renames both files into place. Returns the written paths."""
        if self._sink is not None:
            raise ValueError("a BundleWriter with a sink is finished by finish_stream()")
        items = self._index_items()
        try:
            self._release_sources()
            with os_errors(self._shown(self.data_path), "writing"):
                self._f.flush()
                self._join_syncer()
                os.fsync(self._f.fileno())
                self._f.close()
        except BaseException:  # nothing is left under a temporary name either
            self.abort()
            raise
        tmp_index = temp_name(self.index_path)
        try:
            with os_errors(self._shown(self.index_path), "writing"):
                with open(tmp_index, "wb") as f:
                    f.write(build_table(items))
                    f.flush()
                    os.fsync(f.fileno())
            with os_errors(self._shown(self.data_path), "renaming into place"):
                replace(self._tmp_data, self.data_path)
            with os_errors(self._shown(self.index_path), "renaming into place"):
                replace(tmp_index, self.index_path)
        except BaseException:
            remove_quietly(tmp_index)
            raise
        self._done = True
        return [self.index_path, self.data_path]

    def abort(self) -> None:
        """Removes temporary files; nothing is left under the output name."""
        self._release_sources()
        if self._sink is not None:
            self._sink.abort()  # an unfinished upload leaves nothing
            return
        try:
            self._join_syncer()
        except WriteError:  # already failing: the files are removed anyway
            pass
        if not self._f.closed:
            try:
                self._f.close()
            except OSError:  # flushing buffered bytes onto a full disk: nothing to keep
                pass
        remove_quietly(self._tmp_data)

    def __enter__(self) -> BundleWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and not self._done:
            if self._sink is not None:
                self.abort()  # never finished: finish_stream() was not called
                raise ValueError("a BundleWriter with a sink must end with finish_stream()")
            self.finish()
        elif exc_type is not None:
            self.abort()
            if isinstance(exc, WriteError) and not self._done:
                exc.clean = True


def state_file_text(prefix_name: str) -> str:
    """Returns the text of a ``checkpoint`` state file naming ``prefix_name`` (relative)."""
    quoted = prefix_name.replace("\\", "\\\\").replace('"', '\\"')
    return (f'model_checkpoint_path: "{quoted}"\n'
            f'all_model_checkpoint_paths: "{quoted}"\n')


def write_state_file(directory: str, prefix_name: str, shown=None) -> str:
    """Writes a ``checkpoint`` state file naming ``prefix_name`` (relative), atomically.

    Returns:
        the state file's path.

    Raises:
        WriteError: an OS error, naming ``shown(path)``.
    """
    path = os.path.join(directory, "checkpoint")
    shown_path = (shown or (lambda p: p))(path)
    tmp = temp_name(path)
    try:
        with os_errors(shown_path, "writing"):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(state_file_text(prefix_name))
                f.flush()
                os.fsync(f.fileno())
        with os_errors(shown_path, "renaming into place"):
            replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    return path

