"""Checkpoint.reopened(): apply_ema re-reads a file under trainable= with every statement and
setting the caller opened it with (the tf_keras case with verify=False is in
tests/test_tfk_loop_order_tf.py)."""

from __future__ import annotations

from helpers import FIXTURES

from ckpt_tools import open_checkpoint


def test_a_reopened_checkpoint_keeps_the_callers_statements():
    with open_checkpoint(FIXTURES / "custom_ema_name", meta=False,
                         averages_only=True) as ckpt, ckpt.reopened() as again:
        assert again.averages_only and again.meta is None
