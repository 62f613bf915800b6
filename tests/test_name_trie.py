"""``name_trie.any_of`` (the function-library prefilter of ``formats.graph_def``) finds a name
exactly where the plain alternation of the names does: names that are prefixes of others,
shared prefixes, bytes that regular expressions read as syntax, no names at all, and names
that branch deeper than the trie is built (the plain alternation then)."""

from __future__ import annotations

import random
import re

from ckpt_tools.formats.name_trie import any_of


def _plain(names: list[bytes]) -> re.Pattern:
    return re.compile(b"|".join(re.escape(n) for n in names))


def _same(names: list[bytes], texts: list[bytes]) -> None:
    ours, plain = any_of(names), _plain(names)
    for text in texts:
        assert bool(ours.search(text)) == bool(plain.search(text)), (names, text)


def test_tf_function_names():
    names = [f"cond_{i}_{b}_{9000 + 7 * i}".encode() for i in range(300)
             for b in ("true", "false")]
    texts = [b"\n\x0bcond_12_true_9084\x12\x02If", b"cond_12_true_9085", b"cond_1",
             b"xxcond_299_false_11093yy", b"", b"cond_", b"Identity"]
    _same(names, texts)
    assert any_of(names).search(b"\x0acond_12_true_9084")
    assert not any_of(names).search(b"cond_12_true_9085")


def test_prefixes_syntax_and_empty():
    _same([b"ab", b"abc", b"a.c", b"(x|", b"\\", b"[", b"a*"],
          [b"a", b"ab", b"zabz", b"a.c", b"abc", b"aXc", b"(x|y", b"\\", b"a*", b"aa", b"["])
    _same([b"abc", b"ab"], [b"ab", b"a", b"abd"])  # the longer name first
    _same([], [b"", b"anything"])  # no names: found everywhere, as b"" is


def test_random_against_alternation():
    rng = random.Random(7)
    for _ in range(200):
        names = [bytes(rng.choice(b"ab_1/") for _ in range(rng.randint(1, 6)))
                 for _ in range(rng.randint(1, 12))]
        texts = [bytes(rng.choice(b"ab_1/x") for _ in range(rng.randint(0, 20)))
                 for _ in range(20)]
        _same(names, texts)


def test_deep_branching_falls_back():
    # each name branches from the previous at its last byte: groups would nest 200 deep
    names = [b"a" * i + b"b" for i in range(1, 200)]
    _same(names, [b"a" * 150 + b"b", b"a" * 250, b"b", b"ab", b"c" * 10])
