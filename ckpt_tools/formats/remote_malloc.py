"""Returning freed read-ahead buffers to the system: glibc's malloc told to map every
buffer of 1 MiB or more itself, once per process (:mod:`.remote_readahead`'s windows).
"""

from __future__ import annotations

_MMAP_THRESHOLD = 1 << 20
_malloc_tuned = False


def return_freed_buffers() -> None:
    """Makes glibc's malloc serve every buffer of 1 MiB or more by its own mapping, returned
    to the system when freed (once per process, when the first remote file is opened).

    Windows and tensors come and go in sizes up to tens of MiB, allocated on the storage
    library's I/O thread and freed on the reader's. glibc's default raises its mapping
    threshold to the largest buffer freed so far (up to 32 MiB), after which such buffers come
    from heaps that freeing does not shrink: ``ckpt average`` of two 300 MB checkpoints from S3
    held 451 MB at peak, 337 MB with a fixed threshold. No-op off glibc."""
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
        if mallopt is not None:
            mallopt(-3, _MMAP_THRESHOLD)  # M_MMAP_THRESHOLD (also stops its raising)
    except (OSError, AttributeError, ValueError):  # not glibc, no libc: left as it is
        pass
