"""Property-based fuzzing: mutated real ``.index``, V1 and ``.meta`` files never crash the reader.

Every example copies one TensorFlow-written checkpoint (from the session corpus, plus the
committed fixtures when generated), applies random byte flips, truncations and insertions to one
file, and then opens it, lists its variables, reads every tensor and verifies it. The only
acceptable outcomes are data or a :class:`~ckpt_tools.CheckpointError`; anything else (an
``IndexError``, ``MemoryError``, ``BufferError``…) or a hang is a reader bug.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from _corpus import FIXTURES, build_table, real_index_files, real_meta_files, tf_corpus
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_tools import CheckpointError, open_checkpoint
from ckpt_tools.formats.table import Table
from ckpt_tools.verify import verify

EXAMPLES = 80  # per test; the whole module stays well under 30 s on 2 cores
TIME_LIMIT_S = 10  # one example taking longer than this is treated as a hang

_POS = st.integers(min_value=0, max_value=2**31)
MUTATIONS = st.lists(st.one_of(
    st.tuples(st.just("flip"), _POS, st.integers(0, 7)),
    st.tuples(st.just("truncate"), _POS),
    st.tuples(st.just("insert"), _POS, st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("set"), _POS, st.integers(0, 255)),
    st.tuples(st.just("delete"), _POS, st.integers(1, 64)),
), min_size=1, max_size=6)


def mutate(data: bytes, ops) -> bytes:
    """Applies ``ops`` (positions taken modulo the current length) to ``data``."""
    buf = bytearray(data)
    for op in ops:
        at = op[1] % (len(buf) + 1)
        if op[0] == "flip" and buf:
            buf[at % len(buf)] ^= 1 << op[2]
        elif op[0] == "set" and buf:
            buf[at % len(buf)] = op[2]
        elif op[0] == "truncate":
            del buf[at:]
        elif op[0] == "insert":
            buf[at:at] = op[2]
        elif op[0] == "delete":
            del buf[at : at + op[2]]
    return bytes(buf)


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> dict[str, list[Path]]:
    corpus = tf_corpus(tmp_path_factory.getbasetemp())
    indexes = real_index_files(corpus)
    v1 = [corpus / "v1" / "model.ckpt-1", corpus / "v1" / "model.ckpt-2"]
    v1 += [p for p in [FIXTURES / "linear_v1" / "model.ckpt"] if p.is_file()]
    data = [p for p in (corpus / "strings", corpus / "v2", FIXTURES / "dtypes")
            if p.is_dir() for p in sorted(p.glob("*.data-*"))[-1:]]
    return {"index": indexes, "v1": v1, "meta": real_meta_files(corpus), "data": data,
            "tables": indexes + v1}


def _prefix_of(path: Path) -> str:
    name = path.name
    for suffix in (".index", ".meta"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _alarm(signum, frame):
    raise TimeoutError(f"reader did not finish within {TIME_LIMIT_S} s (hang?)")


def exercise(prefix: Path, check_crc: bool = True) -> None:
    """Opens, lists, reads and verifies; only CheckpointError may escape (and is swallowed).

    With ``check_crc=False`` the reader skips block and tensor checksums, so mutated bytes
    reach the entry, slice-key and string decoders instead of stopping at a CRC mismatch.
    """
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        try:
            with open_checkpoint(prefix, verify=check_crc) as ckpt:
                ckpt.variables()
                for key in ckpt.keys():
                    try:
                        ckpt.tensor(key)
                    except CheckpointError:
                        pass
        except CheckpointError:
            pass
        try:
            verify(prefix)
        except CheckpointError:
            pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _run(source: Path, change, check_crc: bool = True) -> None:
    """Copies ``source``'s checkpoint, rewrites ``source`` with ``change(bytes)``, exercises it."""
    prefix = _prefix_of(source).split(".data-")[0]
    with tempfile.TemporaryDirectory() as tmp:
        for f in source.parent.iterdir():  # only this checkpoint's files, not expected.npz
            if f.name.startswith(prefix) or f.name == "checkpoint":
                shutil.copy(f, tmp)
        victim = Path(tmp) / source.name
        victim.write_bytes(change(victim.read_bytes()))
        exercise(Path(tmp) / prefix, check_crc)


def _rebuild(data: bytes, path: str, entry_ops) -> bytes:
    """Mutates keys/values of a table's entries, then writes a table with valid checksums."""
    items = [(bytes(k), bytes(v)) for k, v in Table(data, path).items()]
    for index, part, ops in entry_ops:
        if not items:
            break
        i = index % len(items)
        key, value = items[i]
        items[i] = (mutate(key, ops), value) if part == "key" else (key, mutate(value, ops))
    return build_table(items)


_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])


@_SETTINGS
@given(data=st.data(), ops=MUTATIONS, check_crc=st.booleans())
def test_mutated_index_and_v1_bytes(targets, data, ops, check_crc):
    source = data.draw(st.sampled_from(targets["tables"]), label="table file")
    _run(source, lambda b: mutate(b, ops), check_crc)


ENTRY_OPS = st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["key", "value"]),
                               MUTATIONS), min_size=1, max_size=4)


@_SETTINGS
@given(data=st.data(), entry_ops=ENTRY_OPS)
def test_mutated_entries_with_valid_checksums(targets, data, entry_ops):
    """Entry-level mutations behind correct block CRCs reach the protobuf/slice decoders."""
    source = data.draw(st.sampled_from(targets["tables"]), label="table file")
    _run(source, lambda b: _rebuild(b, str(source), entry_ops))


@_SETTINGS
@given(data=st.data(), ops=MUTATIONS)
def test_mutated_meta_files(targets, data, ops):
    _run(data.draw(st.sampled_from(targets["meta"]), label="meta file"), lambda b: mutate(b, ops))


@settings(max_examples=EXAMPLES // 2, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), ops=MUTATIONS)
def test_mutated_data_without_checksums(targets, data, ops):
    """Corrupt tensor bytes read with CRCs off (string lengths, counts) still only raise."""
    _run(data.draw(st.sampled_from(targets["data"]), label="data file"),
         lambda b: mutate(b, ops), check_crc=False)


def test_mutate_is_what_the_fuzzer_thinks():
    assert mutate(b"abcd", [("flip", 0, 0)]) == b"`bcd"
    assert mutate(b"abcd", [("truncate", 2)]) == b"ab"
    assert mutate(b"abcd", [("insert", 4, b"xy")]) == b"abcdxy"
    assert mutate(b"abcd", [("delete", 1, 2), ("set", 0, 65)]) == b"Ad"
    assert mutate(b"", [("flip", 3, 1), ("set", 0, 1)]) == b""


def test_object_graph_naming_a_tensor_the_index_lacks_is_no_keras_pairing(tmp_path):
    """A damaged index that lost one of an optimizer's ``_trainable_variables`` (the object graph
    still names it) must not crash the Keras positional pairing (it raised KeyError, found by
    the fuzz above) nor pair by shifted positions: it is a CheckpointError or no such pair."""
    from ckpt_tools.formats.bundle_writer import BundleWriter

    lost = "optimizer/_trainable_variables/5/.ATTRIBUTES/VARIABLE_VALUE"
    with open_checkpoint(FIXTURES / "keras3_object") as src, \
            BundleWriter(str(tmp_path / "ckpt-1")) as w:
        assert lost in src.keys()
        for key in src.keys():
            if key != lost:
                w.add_array(key, src.tensor(key))
    try:
        with open_checkpoint(tmp_path / "ckpt-1") as ckpt:
            shadows = {v.name: v.ema_of for v in ckpt.variables() if v.ema_of}
    except CheckpointError:
        return
    assert all(of != lost for of in shadows.values())
