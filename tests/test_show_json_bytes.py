"""``show --json`` of a string tensor whose bytes are not UTF-8 (review-30-user-u32 F7): TF's
``b"a\\x00b\\xff\\xfe"`` came out as the text ``a\\x00b\\xff\\xfe`` with the last two bytes
spelled as backslash escapes, which a stored string holding a backslash spells too. Such a
value is now ``{"base64": ...}`` of its bytes; UTF-8 values stay JSON strings. The checkpoint is
``fixtures/dtypes`` (``tf.raw_ops.SaveV2`` in ``fixtures/_fx_eager.py``)."""

from __future__ import annotations

import base64
import json

import numpy as np
from _corpus import FIXTURES, run_cli

from ckpt_tools.cli.values_json_stream import stream_values_json

#: The values fixtures/_fx_eager.py saved as dtype/string, row by row.
SAVED = [[b"", "héllo wörld ✓".encode()], [b"x" * 200, b"a\x00b\xff\xfe"]]


def _decoded(value) -> bytes:
    return base64.b64decode(value["base64"]) if isinstance(value, dict) else value.encode()


def test_show_json_string_bytes_round_trip(capsys):
    code, out, err = run_cli(["show", str(FIXTURES / "dtypes"), "dtype/string", "--full",
                              "--json"], capsys)
    assert code == 0, err
    [tensor] = json.loads(out)["tensors"]
    values = tensor["values"]
    assert values[1][1] == {"base64": base64.b64encode(SAVED[1][1]).decode()}, values[1][1]
    assert values[0][1] == "héllo wörld ✓", values  # UTF-8 text stays a string
    assert [[_decoded(v) for v in row] for row in values] == SAVED
    array = np.array(SAVED, dtype=object)
    pieces = "".join(stream_values_json(array, json.dumps, part=1))  # --full's streamed parts
    assert json.loads(pieces) == values, pieces
