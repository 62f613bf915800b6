"""``Listing.to_json`` (the compact ``ckpt list --json`` line) against json.dumps itself."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_tools.checkpoint import Variable
from ckpt_tools.cli._json_text import json_default
from ckpt_tools.formats._record import replace
from ckpt_tools.listing import Listing, list_variables


def _dumps(listing: Listing) -> str:
    return json.dumps(listing.to_dict(), separators=(",", ":"), ensure_ascii=False,
                      default=json_default)


_TEXT = st.text(st.characters(blacklist_categories=()), max_size=12)
_MAYBE = st.none() | _TEXT


@st.composite
def variables(draw):
    return Variable(
        draw(_TEXT), draw(st.sampled_from(["float32", "int64", "string", "\u202e\x1b"])),
        tuple(draw(st.lists(st.integers(0, 1 << 40), max_size=4))),
        draw(st.sampled_from(["weight", "ema", "other"])),
        tuple(draw(st.lists(_TEXT, max_size=3))), draw(_MAYBE), draw(_MAYBE), draw(_MAYBE),
        draw(st.integers(0, 1 << 62)), draw(st.integers(0, 9)), draw(_MAYBE), draw(_MAYBE),
        tuple(draw(st.lists(_TEXT, max_size=3))))


@settings(max_examples=200, deadline=None)
@given(st.lists(variables(), max_size=6), _TEXT, _MAYBE)
def test_to_json_is_json_dumps_of_to_dict(vs, path, meta):
    """Names with quotes, backslashes, controls, U+2028, lone surrogates, astral characters;
    repeated values (encoded once) and empty tuples."""
    listing = Listing(path, "v2", meta, variables=vs + vs[:2], total=len(vs),
                      shards=[{"file": path, "tensors": 1, "bytes": 2}],
                      unproven={"option": None, "reason": path})
    assert listing.to_json(json_default) == _dumps(listing)


@pytest.mark.parametrize("change", [
    {"shape": (np.int64(3), 4)}, {"nbytes": True}, {"shape": (True,)}, {"partitions": False},
    {"collections": ["variables"]}, {"ema_of": 3}, {"ema_candidates": ("a", None)},
    {"shape": (2.0,)}, {"dtype": b"float32"},
], ids=str)
def test_to_json_falls_back_to_json_dumps_for_other_types(change):
    """A field of another type than Variable's (json.dumps writes a bool as true, a list as a
    list...) gives json.dumps' bytes, or its error."""
    v = replace(Variable("w", "float32", (2, 3), "weight", nbytes=24), **change)
    listing = Listing("ck", "v2", None, variables=[v])
    try:
        expected = _dumps(listing)
    except TypeError:
        with pytest.raises(TypeError):
            listing.to_json(json_default)
        return
    assert listing.to_json(json_default) == expected


@pytest.mark.parametrize("case", sorted(p.name for p in FIXTURES.iterdir()
                                        if p.is_dir() and not p.name.startswith("_")))
def test_to_json_of_every_fixture(case):
    try:
        listing = list_variables(FIXTURES / case)
    except Exception:  # noqa: BLE001 - fixtures `list` refuses (no checkpoint): nothing to print
        pytest.skip("not listable")
    assert listing.to_json(json_default) == _dumps(listing)
