"""The plain value classes of the list path (formats/_record.py) behave as the dataclasses
they replaced: equality, hashing, immutability, repr, replace."""

from __future__ import annotations

import pickle

import pytest

from ckpt_tools import Variable, open_checkpoint
from ckpt_tools.emamap import ema_map
from ckpt_tools.formats._record import FrozenError, replace
from ckpt_tools.formats.entry import TensorEntry
from ckpt_tools.formats.meta import MetaGraph
from ckpt_tools.locate import Location
from ckpt_tools.roles import RoleInfo
from tests.helpers import FIXTURES


def test_frozen_records_compare_hash_and_refuse_assignment():
    a = Variable("w", "float32", (2, 3), "weight", ema="w/ExponentialMovingAverage")
    b = Variable(name="w", dtype="float32", shape=(2, 3), role="weight",
                 ema="w/ExponentialMovingAverage")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != replace(a, nbytes=24) and a.size == 6
    with pytest.raises(AttributeError):  # FrozenError, an AttributeError like dataclasses'
        a.role = "ema"
    with pytest.raises(FrozenError):
        del a.name
    assert RoleInfo("ema", ema_of="w") != RoleInfo("ema", ema_of="v")
    assert RoleInfo("ema") != ("ema", None, None, None, ())  # other types are never equal
    assert pickle.loads(pickle.dumps(a)) == a


def test_replace_keeps_other_fields_and_refuses_unknown_names():
    loc = Location("p", "v2", None)
    moved = replace(loc, choice="newest")
    assert (moved.prefix, moved.format, moved.choice, loc.choice) == ("p", "v2", "newest", None)
    with pytest.raises(TypeError, match="no field 'nope'"):
        replace(loc, nope=1)


def test_repr_leaves_out_what_the_dataclass_did_and_eq_ignores_extra():
    e = TensorEntry("w", 1, (2,), extra={"path": "x"})
    assert repr(e) == ("TensorEntry(name='w', dtype=1, shape=(2,), shard_id=0, offset=0, "
                       "stored_bytes=0, crc32c=None, slices=())")
    assert e == TensorEntry("w", 1, (2,)) and TensorEntry("w", 1, (2,)).extra == {}
    m = ema_map(FIXTURES / "towers_bn")
    assert "names=" not in repr(m) and "pairs=" not in repr(m)


def test_mutable_records_are_unhashable_and_get_fresh_defaults():
    g, h = MetaGraph("a"), MetaGraph("a")
    assert g == h and g.collections is not h.collections
    with pytest.raises(TypeError):
        hash(g)


def test_variable_to_dict_lists_every_field_in_order():
    with open_checkpoint(FIXTURES / "towers_bn") as ckpt:
        v = ckpt.variables()[0]
    d = v.to_dict()
    assert list(d) == list(Variable._fields) + ["size"]
    assert isinstance(d["shape"], list) and d["size"] == v.size
