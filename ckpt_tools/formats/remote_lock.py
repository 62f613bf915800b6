"""The writer lock of an S3 output directory (``.ckpt-write.lock``, created with
``If-None-Match: *``): one writer at a time per directory.

A lock is broken (``--force``) only when its writer is proven gone:

* **dead, proven here**: the lock records the writer's boot id, pid namespace and process
  start time; on the same boot and in the same pid namespace, a pid that no longer runs, or
  runs with another start time (reused), or is a zombie, is a dead writer. Host name and pid
  alone prove nothing: containers with host networking and Kubernetes ``hostNetwork`` pods
  share the host name while their pids live in other namespaces.
* **lease expired**: a live writer renews its lock every quarter of its lease (rewriting it
  with ``If-Match``, so its ``LastModified`` moves on); a lock not renewed for longer than the
  lease it records (measured by the server's clock) belongs to no running writer, wherever
  it ran.

Any other lock is left alone, its owner named with the advice that fits. Breaking one prints
a ``note:`` naming its owner and aborts the unfinished multipart uploads it left in the
directory. A writer whose lock was broken (its renewal failed) stops before it uploads
anything readable.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import CheckpointNotFoundError, OutputError
from ..wording import counted
from . import remote_s3
from .remote import normalize, session, url_join
from .remote_errors import deadline, translate

#: Seconds a lock stays valid without renewal (a writer renews it every quarter of this).
LEASE_S = 120.0
LEASE_ENV = "CKPT_TOOLS_LOCK_LEASE"


def _lease_s() -> float:
    try:
        value = float(os.environ.get(LEASE_ENV, ""))
    except ValueError:
        return LEASE_S
    return value if 0 < value < 86400 else LEASE_S


# -- who holds a lock, and whether it still runs ---------------------------------------------
def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of ``pid`` from ``/proc``, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    head, _, rest = text.rpartition(")")  # the command name may hold spaces and ')'
    fields = rest.split()
    try:
        if int(head.split(" (", 1)[0]) != pid:
            return None
        return fields[0], int(fields[19])
    except (ValueError, IndexError):
        return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def this_process() -> dict:
    """What identifies this process uniquely on this machine: ``boot`` (the kernel's boot
    id), ``pidns`` (its pid namespace) and ``start`` (its start time in clock ticks since
    boot); empty where ``/proc`` does not show them for this very process (another
    namespace's ``/proc`` mounted here: its pids are not ours)."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = None
    if stat is None or not boot or not pidns:
        return {}
    return {"boot": boot, "pidns": pidns, "start": stat[1]}


def lock_body(beat: int = 0) -> dict:
    """The owner a new lock records: host, pid, time, a random token, the lease it keeps
    (``lease_s``), how often it was renewed (``beat``) and :func:`this_process`."""
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "token": uuid.uuid4().hex, "lease_s": _lease_s(), "beat": beat,
            **this_process()}


def liveness(owner: dict | None) -> str:
    """Whether the writer a lock names runs: ``"alive"`` or ``"dead"`` when proven (same boot
    and pid namespace as this process: its pid and start time are checked), else
    ``"unknown"`` (another machine, container or namespace, an older ckpt that recorded no
    identity, a pid <= 0)."""
    if owner is None or owner["pid"] <= 0:
        return "unknown"
    me = this_process()
    start = owner.get("start")
    if not me or owner.get("boot") != me["boot"] or owner.get("pidns") != me["pidns"] or \
            not isinstance(start, int) or isinstance(start, bool):
        return "unknown"
    stat = _proc_stat(owner["pid"])
    if stat is None:
        try:
            os.kill(owner["pid"], 0)
        except ProcessLookupError:
            return "dead"
        except OSError:
            return "unknown"  # it runs, but /proc hides it (hidepid): its start is unknown
        return "unknown"
    state, started = stat
    if started != start or state in ("Z", "X"):
        return "dead"  # the pid was reused by another process, or it has exited
    return "alive"


def lease_left(owner: dict | None, age: float | None) -> float | None:
    """Seconds until the lease of a lock last written ``age`` seconds ago expires (<= 0:
    expired); None when the lock records no lease or its age is unknown."""
    if owner is None or age is None:
        return None
    lease = owner.get("lease_s")
    if not isinstance(lease, (int, float)) or isinstance(lease, bool) or not lease > 0:
        return None
    return float(lease) - age


def _owner(body: bytes) -> dict | None:
    """The owner a lock object's body records, or None when it is not ours or unreadable."""
    try:
        owner = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or \
            isinstance(owner.get("pid"), bool) or not isinstance(owner.get("host"), str):
        return None
    return owner


def describe(owner: dict | None, lock_url: str) -> str:
    """Names a lock's owner as an error or note says it (its host quoted; messages are
    printed with control characters escaped)."""
    if owner is None:
        return f"its lock {lock_url} exists"
    since = f" since {owner['time']}" if isinstance(owner.get("time"), str) else ""
    return (f"lock {lock_url} held by pid {owner['pid']} on host "
            f"{owner['host']!r}{since}")


def advice(owner: dict | None, alive: str, left: float | None) -> str:
    """What to do about a lock that was not broken."""
    if alive == "alive":
        return ("That process is still running on this host (same boot, pid namespace and "
                "start time): wait for it to finish")
    if alive == "dead":
        return ("That process is no longer running (interrupted, e.g. kill -9): pass --force "
                "to break its lock and write")
    if left is not None and left <= 0:
        return (f"Its lease expired {-left:.0f} s ago (a running writer renews it), so no "
                "writer holds it any more: pass --force to break it and write")
    if left is not None:
        return ("Its owner cannot be proven alive or dead from here (another machine, "
                "container or pid namespace), and it renewed its lease recently: wait for it "
                "to finish; if no writer runs, pass --force once the lease expires (in "
                f"{left:.0f} s), or delete that object")
    return ("Its owner cannot be proven alive or dead from here (another machine, container "
            "or pid namespace, or a ckpt that records no lease): delete that object once no "
            "writer runs, and retry")


def _note(text: str) -> None:
    """A ``note:`` line on stderr, control characters escaped (said even with ``-q``)."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    try:
        sys.stderr.write(f"note: {shown}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# -- holding a lock ---------------------------------------------------------------------------
class Held:
    """A lock this process holds, renewed in the background every quarter of its lease
    (``If-Match`` its last ETag). When a renewal finds the lock gone or replaced (another
    writer broke it) or cannot renew it within the lease, :meth:`check` refuses to go on."""

    def __init__(self, fs, path: str, url: str, body: dict, etag: str):
        self.fs, self.path, self.url = fs, path, url
        self._body, self.etag = body, etag
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="ckpt-lock-lease",
                                        daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        lease = float(self._body["lease_s"])
        renewed = time.monotonic()
        while not self._stop.wait(lease / 4):
            self._body["beat"] += 1
            try:
                etag = remote_s3.renew_lock(self.fs, self.path,
                                            json.dumps(self._body).encode(), self.etag,
                                            self._body["token"], min(deadline(), lease / 2))
            except Exception:  # noqa: BLE001 - a network hiccup: try again, within the lease
                if time.monotonic() - renewed > lease:
                    self.lost = f"it could not be renewed for {lease:.0f} s (network)"
                    return
                continue
            if etag is None:
                self.lost = "another writer broke it (it was gone or replaced when renewed)"
                return
            self.etag, renewed = etag, time.monotonic()

    def check(self, directory: str) -> None:
        """Raises OutputError (exit 7) when this lock was lost."""
        if self.lost:
            raise OutputError(f"{directory.rstrip('/')}/: this command's lock {self.url} was "
                              f"lost ({self.lost}); stopped before uploading more")

    def release(self) -> None:
        """Stops renewing and deletes the lock if it is still this one (best effort)."""
        self._stop.set()
        self._thread.join(timeout=deadline())
        if self.lost:
            return  # not ours any more: never delete another writer's lock
        try:
            remote_s3.remove_if(self.fs, self.path, self.etag, deadline())
        except Exception:  # noqa: BLE001 - the write's own outcome is what matters
            pass


#: Locks this process holds: normalized directory URL -> Held; and those that
#: :func:`reserved` holds (a nested :func:`lock_directory` then takes nothing).
_LOCKS: dict[str, Held] = {}
_RESERVED: set[str] = set()


def check_held(directory: str) -> None:
    """Refuses (exit 7) to go on writing into URL ``directory`` when this process's lock on
    it was lost (broken by another writer); nothing when it holds none."""
    held = _LOCKS.get(normalize(directory))
    if held is not None:
        held.check(directory)


@contextmanager
def reserved(directory: str, *, overwrite: bool = False) -> Iterator[None]:
    """Holds URL ``directory``'s writer lock (S3) from before the command reads any tensor
    until it has uploaded (:func:`upload` inside uses it): a missing bucket or another
    writer is refused up front, not after minutes of work. Other stores: nothing to hold.

    Raises:
        CheckpointNotFoundError: the bucket does not exist.
        OutputError: another writer holds the lock (its owner is named); with ``overwrite``
            a lock whose writer is proven gone (:func:`lock_directory`) is broken instead.
        RemoteAccessError: forbidden, or the network failed.
    """
    fs, _ = session().fs(directory)
    key = normalize(directory)
    if not remote_s3.is_s3(fs) or key in _RESERVED:
        yield
        return
    lock = lock_directory(directory, overwrite=overwrite)
    _RESERVED.add(key)
    try:
        yield
    finally:
        _RESERVED.discard(key)
        unlock_directory(fs, lock)


def unlock_directory(fs, lock: Held | None) -> None:
    """Releases the lock :func:`lock_directory` took (None: nothing)."""
    if lock is None:
        return
    for key, held in list(_LOCKS.items()):
        if held is lock:
            del _LOCKS[key]
    lock.release()


def lock_directory(directory: str, *, overwrite: bool = False) -> Held | None:
    """Creates the writer lock object in S3 URL ``directory`` (``If-None-Match: *``), recording
    its owner (:func:`lock_body`), and returns it, renewed until :func:`unlock_directory`;
    None when this process holds it already (:func:`reserved`). With ``overwrite``
    (--force) a lock whose writer is proven gone (:func:`liveness` "dead", or its lease
    expired) is broken: a ``note:`` names its owner, and the unfinished multipart uploads it
    left in ``directory`` are aborted. Any other existing lock is refused, naming its owner.

    Raises:
        OutputError: another writer holds it (exit 7).
        CheckpointNotFoundError: the bucket does not exist.
        RemoteAccessError: forbidden, or the network failed.
    """
    key = normalize(directory)
    if key in _RESERVED or key in _LOCKS:
        return None
    store = session()
    fs, dir_path = store.fs(directory)
    lock_url = url_join(directory, remote_s3.LOCK_NAME)
    lock_path = fs._strip_protocol(lock_url)
    shown = directory.rstrip("/") + "/"
    broken = None
    for _attempt in range(3):
        body = lock_body()
        try:
            store.requests += 1
            with translate(lock_url, deadline()):
                path, etag = remote_s3.lock(fs, dir_path, json.dumps(body).encode(),
                                            deadline())
        except CheckpointNotFoundError:
            bucket = directory.split("://", 1)[0] + "://" + \
                directory.split("://", 1)[1].split("/", 1)[0]
            raise CheckpointNotFoundError(
                f"{bucket}/: the bucket does not exist (--out {directory}); create it first, "
                "or check the name; nothing was written") from None
        except OutputError:
            store.requests += 1
            with translate(lock_url, deadline()):
                state = remote_s3.read_lock(fs, lock_path, deadline())
            if state is None:
                continue  # released meanwhile: try again
            owner = _owner(state["body"])
            alive = liveness(owner)
            left = lease_left(owner, state["age"])
            gone = alive == "dead" or (alive == "unknown" and left is not None and left <= 0)
            if not (overwrite and gone):
                raise OutputError(f"{shown}: another ckpt command is writing there "
                                  f"({describe(owner, lock_url)}); nothing was written. "
                                  f"{advice(owner, alive, left)}") from None
            store.requests += 1
            with translate(lock_url, deadline()):
                if remote_s3.remove_if(fs, lock_path, state["etag"], deadline()):
                    broken = (owner, alive, left, state)
            continue
        held = Held(fs, path, lock_url, body, etag)
        _LOCKS[key] = held
        if broken is not None:
            _after_breaking(fs, dir_path, shown, lock_url, *broken)
        return held
    raise OutputError(f"{shown}: another ckpt command took its lock {lock_url} meanwhile; "
                      "nothing was written")


def _after_breaking(fs, dir_path: str, shown: str, lock_url: str, owner, alive: str,
                    left: float | None, state: dict) -> None:
    """Aborts the unfinished multipart uploads a broken lock's writer left in the directory
    (started while it could hold the lock: no later than its lease's end) and says so."""
    import datetime

    why = ("that process no longer runs" if alive == "dead" else
           f"its lease expired {-left:.0f} s ago")
    until = None
    if alive != "dead" and state.get("modified") is not None:
        until = state["modified"] + datetime.timedelta(seconds=float(owner["lease_s"]))
    try:
        aborted = remote_s3.abort_unfinished(fs, dir_path, until, deadline())
    except Exception as exc:  # noqa: BLE001 - the write goes on; say what was not cleaned
        aborted, failed = [], f"; its unfinished multipart uploads could not be listed ({exc})"
    else:
        failed = ""
    uploads = (f"; aborted {counted(len(aborted), 'unfinished multipart upload')} it left: "
               f"{', '.join(aborted)}" if aborted else "")
    _note(f"{shown}: broke {describe(owner, lock_url)} ({why}; --force){uploads}{failed}")


__all__ = ["LEASE_ENV", "LEASE_S", "Held", "check_held", "liveness", "lock_body",
           "lock_directory", "reserved", "this_process", "unlock_directory"]
