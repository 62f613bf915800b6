"""review-26-attack-r92 F4: a sibling ``.meta``'s reading is kept by its file's stamp, which
lacked the ctime: the file rewritten in place (same inode, same size) with its mtime put back
(``os.utime``, ``touch -d``) was served from the stale reading in the same process. Made by
real TensorFlow (tf.compat.v1 graph mode)."""

from __future__ import annotations

import os
import time

from helpers_tf1_saver import tf1_two_var_ema

from ckpt_tools import meta_sibling
from ckpt_tools.checkpoint import open_checkpoint


def test_a_sibling_rewritten_in_place_with_its_mtime_put_back_is_read_again(tf, tmp_path):
    prefix, _, _ = tf1_two_var_ema(tf, tmp_path / "model.ckpt-3")
    sibling = tmp_path / "model.ckpt-2.meta"  # another step's graph: this prefix has none
    os.rename(prefix + ".meta", sibling)
    with open_checkpoint(prefix) as ckpt:
        entries = ckpt.entries()
    assert [s.path for s in meta_sibling.siblings(prefix, entries)] == [str(sibling)]
    st = os.stat(sibling)
    time.sleep(0.05)  # past the clock's tick: the rewrite's ctime differs
    with open(sibling, "r+b") as f:  # in place, same size: no graph any more
        f.write(b"\0" * st.st_size)
    os.utime(sibling, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(sibling)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        st.st_size, st.st_mtime_ns, st.st_ino)
    assert meta_sibling.siblings(prefix, entries) == ()
