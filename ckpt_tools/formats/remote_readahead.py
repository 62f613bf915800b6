"""Data shards behind URLs, read by byte ranges with read-ahead under one byte budget.

:class:`RemoteFile` is what :func:`ckpt_tools.formats._io.open_ranged` returns for a URL: a
shard read tensor by tensor. Reading in storage order fetches the following tensors too, in
one batch of range requests (back-to-back tensors cost a request per ``PIECE``, not one per
tensor). Everything read ahead, and the tensors kept for a second look, is counted by one
process-wide :class:`Budget`: however many inputs, shards, sessions and threads read at once,
the bytes held stay under :data:`READ_AHEAD_BUDGET`. Each file's window is a fair share of
it (``ckpt average`` of 5 inputs in 2 shards reads 10 files in step: ~5 MiB each, not 32), and
room for a new window comes first from tensors kept for a second look, then from the far end
of other files' windows: what they would read last.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..errors import CheckpointNotFoundError
from .remote_malloc import return_freed_buffers  # also re-exported: remote.py

#: Most bytes one file reads ahead at once, and the piece big tensors are split into.
WINDOW = 32 << 20
#: Bytes of read-ahead and kept tensors every remote file of the process holds together.
READ_AHEAD_BUDGET = 2 * WINDOW
_MAX_GAP = 1 << 20  # bytes between tensors fetched anyway rather than paying a request
_SMALL_SHARD = 1 << 20  # a shard whose tensors span no more is read whole on its first read


class Budget:
    """The read-ahead all :class:`RemoteFile` objects hold together, bounded by
    :data:`READ_AHEAD_BUDGET` (read when asked, so tests may patch it).

    ``held`` is what is held now; ``peak`` the most held at any moment since :meth:`reset`
    (what tests and benchmarks check). One lock guards every file's cached bytes, so a file
    may trim another's while that one is fetching.
    """

    def __init__(self):
        self.lock = threading.RLock()
        self._files: OrderedDict[int, RemoteFile] = OrderedDict()  # holding bytes, LRU first
        self.held = 0
        self.peak = 0
        self._clock = 0
        self._reading: OrderedDict[int, int] = OrderedDict()  # id(file) -> tick of last read

    def reset(self) -> None:
        """Starts a new peak measurement (the current holding is its floor)."""
        with self.lock:
            self.peak = self.held

    @staticmethod
    def limit() -> int:
        return READ_AHEAD_BUDGET

    def touch(self, f: RemoteFile) -> None:
        """Notes a read of ``f``. A file counts as reading until the others have been read
        more than four times as often as there are reading files (a logical clock: files
        read in step, however slowly, all count; a finished shard stops counting)."""
        with self.lock:
            self._clock += 1
            self._reading.pop(id(f), None)
            self._reading[id(f)] = self._clock
            for key, tick in list(self._reading.items()):
                if self._clock - tick <= 4 * len(self._reading) + 16:
                    break
                del self._reading[key]

    def share(self, f: RemoteFile) -> int:
        """Returns the bytes a file may read ahead now: three quarters of the budget split
        evenly over the files reading (``f`` among them), at most :data:`WINDOW`; the rest
        keeps tensors for a second look (``stats --histogram``, an EMA shadow's drift)."""
        with self.lock:
            active = len(self._reading) + (id(f) not in self._reading)
            return max(0, min(WINDOW, self.limit() * 3 // 4 // active))

    def changed(self, f: RemoteFile, delta: int) -> None:
        """Records that ``f`` now holds ``delta`` more bytes (called under :attr:`lock`)."""
        self.held += delta
        if f._ahead_bytes or f._kept_bytes:
            self._files[id(f)] = f
            self._files.move_to_end(id(f))
        else:
            self._files.pop(id(f), None)
        if self.held > self.peak:
            self.peak = self.held

    def make_room(self, f: RemoteFile, nbytes: int, windows: bool = True) -> bool:
        """Frees bytes until ``nbytes`` more fit: kept tensors first (oldest files first,
        ``f``'s own too), then (``windows``) the far end of other files' windows: those over
        an even share down to it, largest first, then the least recently read; never ``f``'s
        own window. Returns whether they fit."""
        with self.lock:
            # Tensors a plan reads again (pinned) go last: fetching one again costs a request.
            for pinned in (False, True):
                for g in list(self._files.values()):
                    if self.held + nbytes <= self.limit():
                        return True
                    g._shed_kept(self.held + nbytes - self.limit(), pinned=pinned)
            # Windows over an even share first (taken while fewer files were reading), down to
            # it, largest first; then the least recently read files' windows. Always from the
            # far end: what that file would read last.
            others = [g for g in self._files.values() if g is not f] if windows else []
            share = self.share(f)
            for g in sorted(others, key=lambda g: g._ahead_bytes, reverse=True):
                need = self.held + nbytes - self.limit()
                if need <= 0 or g._ahead_bytes <= share:
                    break
                g._shed_ahead(min(need, g._ahead_bytes - share))
            for g in others:
                need = self.held + nbytes - self.limit()
                if need <= 0:
                    break
                g._shed_ahead(need)
            return self.held + nbytes <= self.limit()

    def forget(self, f: RemoteFile) -> None:
        """Drops everything ``f`` holds (and stops counting it as reading)."""
        with self.lock:
            self._reading.pop(id(f), None)
            f._shed_kept(f._kept_bytes)
            f._shed_ahead(f._ahead_bytes)


#: The process's one budget (sessions come and go per command; memory is the process's).
BUDGET = Budget()

class RemoteFile:
    """A data shard behind a URL, read by byte ranges: ``len()`` and :meth:`read_range`
    (what :func:`ckpt_tools.formats._io.view` uses instead of slicing a memory map).

    Read-ahead: ``extents`` (every tensor's ``(start, end)`` in the shard, from the index)
    lets a read that follows the previous one in storage order fetch the next tensors too,
    up to the file's share of :data:`READ_AHEAD_BUDGET`, in one concurrent batch; a random
    read fetches only itself. ``store`` is the session that listed the shard (its ETags pin
    every read, even after a later command started another).
    """

    def __init__(self, url: str, size: int | None,
                 extents: list[tuple[int, int]] | None = None, store=None):
        self.url = url
        return_freed_buffers()
        if store is None:
            from .remote import session

            store = session()
        self._store = store
        self._size = size  # None: an http(s) shard's, learnt from its first read
        self._extents = sorted(set(extents or ()))
        self._order = {span: i for i, span in enumerate(self._extents)}
        self._cache: dict[tuple[int, int], bytes] = {}  # read ahead, not yet asked for
        # Tensors already handed out, newest last: what `stats` asks for again soon (an EMA
        # shadow's raw variable for its drift, the histogram's second pass, the same tensor
        # on another thread). Shed first when the budget needs room.
        self._kept: dict[tuple[int, int], bytes] = {}
        self._ahead_bytes = 0  # bytes in _cache and _buffer
        self._kept_bytes = 0
        self._seen: set[int] = set()  # extents handed out at least once
        # A read plan (plan()): the tensors a command will read, in its order; reading one
        # fetches the following ones, however they lie in the shard. ``_due`` counts the
        # planned reads still to come of each tensor: one read again later is kept (pinned)
        # until then, whatever else is handed out in between.
        self._plan: list[tuple[int, int]] = []
        self._plan_at: dict[tuple[int, int], int] = {}
        self._due: dict[tuple[int, int], int] = {}
        self._end = -1  # where the previous read ended, for read-ahead without extents
        self._buffer: tuple[int, bytes] = (0, b"")
        # Worker threads (stats, diff) read one shard at once: one of them fetches a window
        # while the others wait for it instead of fetching the same bytes again.
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """The object's size (an http(s) shard not read yet: asked with a HEAD)."""
        if self._size is None:
            size = self._store.size(self.url)
            if size is None:
                raise CheckpointNotFoundError(f"{self.url}: not found")
            self._size = size
        return self._size

    @property
    def size_known(self) -> bool:
        """Whether :attr:`size` needs no request (known, or learnt from a read)."""
        return self._size is not None or self._store.known(self.url)

    def __len__(self) -> int:
        return self.size

    @property
    def has_extents(self) -> bool:
        return bool(self._extents)

    @property
    def held(self) -> int:
        """Bytes of read-ahead and kept tensors this file holds."""
        return self._ahead_bytes + self._kept_bytes

    def plan(self, spans: list[tuple[int, int]]) -> None:
        """Notes the tensors (``(start, end)`` extents) a command is about to read, in the
        order it will: each read of one of them fetches the next ones too, up to the file's
        window, in as few requests as their layout allows (``export`` reads the weights or
        their averages only, in the graph's order, never the storage order alone). A tensor
        named more than once is kept after each read until its last (``stats`` reads an EMA
        shadow's variable again for its drift), shed only when the budget has nothing else
        to give: several threads may hand out other tensors in between, more than the
        recently-read tensors a file keeps otherwise."""
        with self._lock:
            known = [span for span in spans if span in self._order]
            self._plan = list(dict.fromkeys(known))
            self._plan_at = {span: k for k, span in enumerate(self._plan)}
            due: dict[tuple[int, int], int] = {}
            for span in known:
                due[span] = due.get(span, 0) + 1
            with BUDGET.lock:  # other files' make_room reads it
                self._due = due

    def drop(self) -> None:
        """Forgets the read-ahead and kept tensors (fetched again if asked for)."""
        BUDGET.forget(self)

    def close(self) -> None:
        """Releases what the file holds (the reader that opened it is closed), unless its
        session outlives the reader (:func:`.remote.one_session`: the command opens the
        checkpoint again and its session drops the files at its end)."""
        if not getattr(self._store, "keep_bodies", False):
            self.drop()

    # -- bookkeeping, always under BUDGET.lock ----------------------------------------------
    def _put_ahead(self, span: tuple[int, int], data: bytes) -> None:
        if span not in self._cache:
            self._cache[span] = data
            self._ahead_bytes += len(data)
            BUDGET.changed(self, len(data))

    def _take_ahead(self, span: tuple[int, int]) -> bytes | None:
        data = self._cache.pop(span, None)
        if data is not None:
            self._ahead_bytes -= len(data)
            BUDGET.changed(self, -len(data))
        return data

    def _set_buffer(self, lo: int, buf: bytes) -> None:
        delta = len(buf) - len(self._buffer[1])
        self._buffer = (lo, buf)
        self._ahead_bytes += delta
        BUDGET.changed(self, delta)

    def _shed_kept(self, need: int, pinned: bool = True) -> None:
        """Frees at least ``need`` bytes of kept tensors, oldest first, those a plan reads
        again last (and only with ``pinned``)."""
        freed = 0
        due = self._due
        for span in sorted(self._kept, key=lambda span: span in due):  # stable: oldest first
            if freed >= need or (not pinned and span in due):
                break
            freed += len(self._kept.pop(span))
        self._kept_bytes -= freed
        BUDGET.changed(self, -freed)

    def _shed_ahead(self, need: int) -> None:
        """Frees at least ``need`` bytes of the window from its far end (what this file
        would read last), then the through-read buffer."""
        freed = 0
        for span in sorted(self._cache, reverse=True):
            if freed >= need:
                break
            freed += len(self._cache.pop(span))
        if freed < need and self._buffer[1]:
            freed += len(self._buffer[1])
            self._buffer = (0, b"")
        self._ahead_bytes -= freed
        BUDGET.changed(self, -freed)

    def _keep(self, span: tuple[int, int], data: bytes) -> None:
        """Keeps ``data`` among the recently handed-out tensors (newest last), up to
        :data:`WINDOW` bytes per file, where the budget has room (windows have the first
        claim on it: kept tensors are shed first)."""
        old = self._kept.pop(span, None)
        if old is not None:
            self._kept_bytes -= len(old)
            BUDGET.changed(self, -len(old))
        pinned = span in self._due
        if (len(data) > WINDOW and not pinned) or not BUDGET.make_room(self, len(data),
                                                                          windows=False):
            return
        self._kept[span] = data
        self._kept_bytes += len(data)
        BUDGET.changed(self, len(data))
        if self._kept_bytes > WINDOW:  # the cap applies to what no plan reads again
            self._shed_kept(self._kept_bytes - WINDOW, pinned=False)

    # -- reading -----------------------------------------------------------------------------
    def read_range(self, start: int, end: int) -> bytes:
        """Returns bytes ``[start, end)`` of the shard.

        Raises:
            CheckpointNotFoundError, RemoteAccessError: as :meth:`.remote.Session.ranges`.
        """
        BUDGET.touch(self)
        with self._lock:
            span = (start, end)
            i = self._order.get(span)
            if i is None:
                return self._read_through(span)
            with BUDGET.lock:
                data = self._take_ahead(span)
                if data is None:
                    data = self._kept.get(span)
            if data is None:
                data = self._fetch(i, span)
            self._seen.add(i)
            with BUDGET.lock:
                left = self._due.get(span)
                if left is not None:  # one planned read done
                    if left > 1:
                        self._due[span] = left - 1
                    else:
                        del self._due[span]
                self._keep(span, data)
            return data

    def _fetch(self, i: int, span: tuple[int, int]) -> bytes:
        """Fetches extent ``i`` and, when reading follows a plan (:meth:`plan`) or the
        storage order (the extent before it was read, by one thread or by several a few
        tensors apart), the following ones not fetched yet, up to the file's share of the
        budget, in one batch; a small shard (:data:`_SMALL_SHARD`) comes whole. A random read
        fetches only itself."""
        batch = [span]
        with BUDGET.lock:
            k = self._plan_at.get(span)
            if self._extents[-1][1] - self._extents[0][0] <= _SMALL_SHARD:
                following, skip = self._extents, True  # a small shard: whole, at once
            elif k is not None:
                following, skip = self._plan[k + 1 :], True
            elif i > 0 and (i - 1 in self._seen or self._extents[i - 1] in self._cache):
                following, skip = self._extents[i + 1 :], False
            else:
                following, skip = [], False
            room = BUDGET.share(self) - self._ahead_bytes
            ahead = 0
            for nxt in following:
                size = nxt[1] - nxt[0]
                if ahead + size > room:
                    break
                if nxt == span or nxt in self._cache or self._order[nxt] in self._seen:
                    if skip:  # a plan may name a tensor twice or one read already
                        continue
                    break
                batch.append(nxt)
                ahead += size
            if ahead:
                BUDGET.make_room(self, ahead)
        got = dict(zip(batch, self._get(batch), strict=True))
        with BUDGET.lock:
            for other in batch[1:]:
                self._put_ahead(other, got[other])
        return got[span]

    def _get(self, spans: list[tuple[int, int]]) -> list[bytes]:
        """Returns the bytes of ``spans``: tensors less than :data:`_MAX_GAP` apart come in
        one range (a request per ``PIECE``, not one per tensor), all ranges concurrently."""
        order = sorted(range(len(spans)), key=lambda n: spans[n])
        runs: list[list[int]] = []
        for n in order:
            if runs and spans[n][0] - spans[runs[-1][-1]][1] <= _MAX_GAP:
                runs[-1].append(n)
            else:
                runs.append([n])
        bounds = [(spans[run[0]][0], max(spans[n][1] for n in run)) for run in runs]
        fetched = self._store.pieces(self.url, bounds)
        out: list[bytes] = [b""] * len(spans)
        for run, (lo, _), pieces in zip(runs, bounds, fetched, strict=True):
            for n, data in zip(run, _cut(pieces, lo, [spans[n] for n in run]), strict=True):
                out[n] = data
        return out

    def _read_through(self, span: tuple[int, int]) -> bytes:
        """A read that is not one tensor (a copy going through the file in chunks): from
        the window when it holds it, else a new window when it follows the previous read."""
        start, end = span
        lo, buf = self._buffer
        if lo <= start and end <= lo + len(buf):
            self._end = end
            if end == lo + len(buf):  # consumed: kept no longer than it is needed
                with BUDGET.lock:
                    self._set_buffer(0, b"")
            return buf[start - lo : end - lo]
        sequential, self._end = start == self._end, end
        if not sequential:
            return self._store.ranges(self.url, [span])[0]
        with BUDGET.lock:
            self._set_buffer(0, b"")
            hi = min(self.size, max(end, start + BUDGET.share(self)))
            if hi > end:  # the window, the bytes asked for included, is held until read
                BUDGET.make_room(self, hi - start)
        buf = self._store.ranges(self.url, [(start, hi)])[0]
        with BUDGET.lock:
            self._set_buffer(*((start, buf) if hi > end else (0, b"")))
        return buf[: end - start]


def _cut(pieces: list[bytes], lo: int, spans: list[tuple[int, int]]) -> list[bytes]:
    """Returns the bytes of each of ``spans`` (sorted, inside the consecutive ``pieces`` that
    start at offset ``lo``), dropping each piece once cut past: the window is held about once,
    not as its pieces, their join and the tensors cut out of it."""
    out = []
    k, base = 0, lo  # the first piece still needed, and its offset
    for s, e in spans:
        while k < len(pieces) and base + len(pieces[k]) <= s and e > s:
            base += len(pieces[k])
            pieces[k] = b""
            k += 1
        parts, j, pos = [], k, base
        while j < len(pieces) and pos < e:
            piece = pieces[j]
            a, b = max(s - pos, 0), min(e - pos, len(piece))
            if b > a:
                parts.append(piece if (a, b) == (0, len(piece)) else memoryview(piece)[a:b])
            pos += len(piece)
            j += 1
        out.append(parts[0] if len(parts) == 1 and isinstance(parts[0], bytes)
                   else b"".join(parts))
    return out
