"""formats.graph_def reads a ``.meta``'s graph once for the questions asked of it, and again
where the file changed: a graph kept from before a rewrite would prove a pairing from
another graph. The graphs are TensorFlow's (committed fixtures)."""

from __future__ import annotations

import os
import shutil

from helpers import FIXTURES

from ckpt_tools.formats import graph_def


def test_a_rewritten_meta_is_read_again(tmp_path):
    path = tmp_path / "model.ckpt.meta"
    shutil.copy(FIXTURES / "custom_ema_name" / "model.ckpt.meta", path)
    first = graph_def.read_graph(str(path))
    assert first is not None and graph_def.read_graph(str(path)) is first  # kept
    assert any(n.op == "VariableV2" or n.op == "VarHandleOp" for n in first.nodes.values())
    replacement = tmp_path / "other.meta"
    shutil.copy(FIXTURES / "partitioned" / "model.ckpt.meta", replacement)
    os.replace(replacement, path)  # as a Saver writes it: a new file under the old name
    second = graph_def.read_graph(str(path))
    assert second is not first and set(second.nodes) != set(first.nodes)
