"""One regular expression for "holds one of these names", built as the names' trie.

``re.compile(b"|".join(names))`` tries every name at each byte searched: a ``.meta`` whose
function library holds thousands of functions (TF1 builds a ``cond`` pair for each shadow
``ema.apply()`` makes) searched over every node took time growing as functions x nodes.
"""

from __future__ import annotations

import re


def any_of(names: list[bytes]) -> re.Pattern:
    """A pattern found in a byte string exactly where one of ``names`` is (an empty list:
    everywhere, as an empty alternation is), as ``b"|".join`` of them escaped is, built as
    their trie: that alternation tried every name at each byte, so a graph of 2,000 averaged
    variables (4,000 ``cond_N_true_M`` functions, 82,000 nodes) took ~1 s; the trie follows
    one branch. A name that ends where a longer one goes on ends the pattern there: only
    whether some name is found is asked."""
    trie: dict = {}
    for name in names:
        node = trie
        for byte in name:
            if node.get(None):
                break  # a shorter name already ends here: it is found first
            node = node.setdefault(byte, {})
        else:
            node.clear()  # longer names through this one: found once this one is
            node[None] = True

    def pattern(node: dict, depth: int) -> bytes | None:
        # iterative over runs of one child, a group only where the trie branches; None
        # where groups nest deeper than _TRIE_DEPTH (a crafted library of names branching
        # at every byte: the regex parser recurses per group)
        out = b""
        while len(node) == 1 and None not in node:
            ((byte, node),) = node.items()
            out += re.escape(bytes([byte]))
        if None in node or not node:
            return out
        if depth >= _TRIE_DEPTH:
            return None
        alts = [pattern(child, depth + 1) for _b, child in sorted(node.items())]
        if any(a is None for a in alts):
            return None
        return out + b"(?:" + b"|".join(re.escape(bytes([b])) + a for (b, _c), a
                                        in zip(sorted(node.items()), alts, strict=True)) + b")"

    found = pattern(trie, 0)
    return re.compile(b"|".join(re.escape(n) for n in names) if found is None else found)


_TRIE_DEPTH = 48  # nested groups of any_of's trie; deeper: the plain alternation
