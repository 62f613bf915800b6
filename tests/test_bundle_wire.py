"""The hand-rolled BundleEntryProto/BundleHeaderProto decoder against protobuf's own encoder.

Protobuf (the real library) serializes messages with arbitrary field values, unknown fields
and repeated occurrences; our varint walk must decode exactly what protobuf's parser does.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_tools.formats import bundle_wire
from ckpt_tools.formats._protos import (
    BundleEntryProto,
    BundleHeaderProto,
    TensorShapeProto,
    TensorSliceProto,
)
from ckpt_tools.formats.bundle_wire import WireError, decode_entry, decode_header

_I32 = st.integers(-(1 << 31), (1 << 31) - 1)
_I64 = st.integers(-(1 << 63), (1 << 63) - 1)


def _unknown_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field protobuf does not know (kept as an unknown field)."""
    return bytes([(number << 3) | 2, len(payload)]) + payload


@st.composite
def entries(draw):
    p = BundleEntryProto()
    if draw(st.booleans()):
        p.dtype = draw(_I32)
    for d in draw(st.lists(_I64, max_size=5)):
        p.shape.dim.add(size=d, name=draw(st.sampled_from(["", "batch"])))
    if draw(st.booleans()):
        p.shape.unknown_rank = draw(st.booleans())
    for field in ("shard_id", "offset", "size"):
        if draw(st.booleans()):
            setattr(p, field, draw(_I32 if field == "shard_id" else _I64))
    if draw(st.booleans()):
        p.crc32c = draw(st.integers(0, (1 << 32) - 1))
    for _ in range(draw(st.integers(0, 2))):
        s = p.slices.add()
        s.extent.add(start=draw(st.integers(0, 100)), length=draw(st.integers(1, 100)))
    raw = p.SerializeToString()
    if draw(st.booleans()):  # unknown fields anywhere, as a newer TensorFlow might write
        raw = _unknown_field(draw(st.integers(8, 15)), b"xyz") + raw
    return raw


@settings(max_examples=300, deadline=None)
@given(entries())
def test_decode_entry_matches_protobuf(raw):
    p = BundleEntryProto.FromString(raw)
    dtype, shape, unknown, shard, offset, size, crc, slices = decode_entry(raw)
    assert dtype == p.dtype
    assert shape == tuple(d.size for d in p.shape.dim)
    assert unknown == p.shape.unknown_rank
    assert (shard, offset, size) == (p.shard_id, p.offset, p.size)
    assert crc == (p.crc32c if p.HasField("crc32c") else None)
    assert [TensorSliceProto.FromString(s) for s in slices] == list(p.slices)


@st.composite
def tf_entries(draw):
    """Entries as TensorFlow writes them (small dtype enums, dims mostly below 128), which
    the canonical fast path decodes; variations it must hand to the general walk."""
    p = BundleEntryProto()
    p.dtype = draw(st.integers(0, 130))
    shape = p.shape
    for d in draw(st.lists(st.integers(0, 300), max_size=6)):
        shape.dim.add(size=d)
    shape.SetInParent()
    p.shard_id = draw(st.integers(0, 200))
    p.offset = draw(st.one_of(st.integers(0, 200), st.integers(0, 1 << 62), _I64))
    p.size = draw(st.one_of(st.integers(0, 200), st.integers(0, 1 << 40), _I64))
    if draw(st.booleans()):
        p.crc32c = draw(st.integers(0, (1 << 32) - 1))
    return p.SerializeToString() + draw(st.sampled_from([b"", b"\x08\x05", b"\x35"]))


@settings(max_examples=400, deadline=None)
@given(tf_entries())
def test_canonical_fast_path_matches_protobuf_and_general_walk(raw):
    try:
        p = BundleEntryProto.FromString(raw)
    except Exception:  # noqa: BLE001 - a truncated trailer: both of ours must refuse it
        with pytest.raises(WireError):
            decode_entry(raw)
        assert bundle_wire._decode_canonical(raw) is None
        return
    fast = bundle_wire._decode_canonical(raw)
    general = bundle_wire._decode_general(raw)
    assert decode_entry(raw) == general
    if fast is not None:
        assert fast == general
    assert general[:7] == (p.dtype, tuple(d.size for d in p.shape.dim), False, p.shard_id,
                           p.offset, p.size, p.crc32c if p.HasField("crc32c") else None)


def test_canonical_fast_path_takes_tensorflow_entries():
    p = BundleEntryProto(dtype=1, shard_id=1, offset=123456, size=4096, crc32c=7)
    for d in (4, 16, 16):
        p.shape.dim.add(size=d)
    assert bundle_wire._decode_canonical(p.SerializeToString()) == (
        1, (4, 16, 16), False, 1, 123456, 4096, 7, [])


# Every varint length boundary of the offset (decoded inline up to 4 bytes) and the size (up
# to 2), as protobuf encodes them, truncated at every byte too.
_EDGES = sorted({0, 1} | {(1 << k) + d for k in (7, 14, 21, 28, 35, 56, 62) for d in (-1, 0, 1)}
                | {(1 << 63) - 1})


@pytest.mark.parametrize("offset", _EDGES)
def test_canonical_fast_path_decodes_every_varint_length_like_protobuf(offset):
    for size in _EDGES:
        p = BundleEntryProto(dtype=1, shard_id=1, offset=offset, size=size, crc32c=9)
        p.shape.dim.add(size=3)
        raw = p.SerializeToString()
        assert bundle_wire._decode_canonical(raw) == bundle_wire._decode_general(raw) == (
            1, (3,), False, 1, offset, size, 9, [])
        for cut in range(1, len(raw)):
            fast = bundle_wire._decode_canonical(raw[:cut])
            assert fast is None or fast == bundle_wire._decode_general(raw[:cut])


def test_canonical_fast_path_reads_padded_varints_like_protobuf():
    """Over-long encodings (a varint padded with 0x80 bytes) are valid protobuf."""
    for offset_bytes in (b"\x80\x00", b"\x81\x80\x00", b"\xff\xff\xff\x7f",
                         b"\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x80\x00"):
        for size_bytes in (b"\x04", b"\x80\x00", b"\xff\x7f", b"\xff\xff\x01"):
            raw = b"\x08\x01\x12\x00\x20" + offset_bytes + b"\x28" + size_bytes
            p = BundleEntryProto.FromString(raw)
            fast = bundle_wire._decode_canonical(raw)
            assert fast is not None
            assert fast[4:6] == (p.offset, p.size)
            assert fast == bundle_wire._decode_general(raw)


def test_repeated_shape_fields_merge_like_protobuf():
    a = BundleEntryProto(dtype=1, size=8)
    a.shape.dim.add(size=2)
    b = BundleEntryProto(dtype=3, offset=16)
    b.shape.dim.add(size=4)
    raw = a.SerializeToString() + b.SerializeToString()  # concatenation = protobuf merge
    p = BundleEntryProto.FromString(raw)
    assert decode_entry(raw)[:6] == (p.dtype, (2, 4), False, 0, p.offset, p.size) == (
        3, tuple(d.size for d in p.shape.dim), False, 0, 16, 8)


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), _I32), _I32, _I32, st.lists(_I32, max_size=3))
def test_decode_header_matches_protobuf(num_shards, endianness, min_consumer, bad):
    h = BundleHeaderProto(endianness=endianness)
    if num_shards is not None:
        h.num_shards = num_shards
    h.version.producer = 1
    h.version.min_consumer = min_consumer
    h.version.bad_consumers.extend(bad)
    raw = h.SerializeToString()
    p = BundleHeaderProto.FromString(raw)
    assert decode_header(raw) == (p.num_shards if p.HasField("num_shards") else None,
                                  p.endianness, p.version.min_consumer)


@pytest.mark.parametrize("raw", [
    b"\x08",  # tag without its varint
    b"\x12\x05\x12\x01",  # shape longer than the message
    b"\x35\x01\x02",  # truncated fixed32
    b"\x08" + b"\xff" * 11,  # varint over 10 bytes
    b"\x0b",  # group start: wire type 3
])
def test_malformed_entries_raise(raw):
    with pytest.raises(Exception):  # noqa: B017 - protobuf's own error type is not public
        BundleEntryProto.FromString(raw)
    with pytest.raises(WireError):
        decode_entry(raw)


def test_shape_proto_is_the_one_protobuf_reads():
    shape = TensorShapeProto()
    shape.dim.add(size=7)
    raw = BundleEntryProto(shape=shape).SerializeToString()
    assert decode_entry(raw)[1] == (7,)


def test_canonical_fast_path_refuses_a_truncated_dim_varint():
    """``\\x12\\x02\\x08\\xff``: a dim whose one-byte varint has its continuation bit set
    is truncated, which protobuf refuses; the fast path must not read it as size 255."""
    raw = b"\x08\x01" + b"\x12\x04" + b"\x12\x02\x08\xff" + b"\x20\x00\x28\x04"
    with pytest.raises(Exception):  # noqa: B017 - protobuf's DecodeError
        BundleEntryProto.FromString(raw)
    assert bundle_wire._decode_canonical(raw) is None
    with pytest.raises(WireError):
        decode_entry(raw)
