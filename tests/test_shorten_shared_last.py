"""80 columns: where every shortened name of a column ends with the same segment
(``ExponentialMovingAverage``), the segment before it, which says which variable, is kept
rather than a segment the rows share (u16 F15: ``map``/``restore-ema --dry-run`` showed
``…/BatchNorm/…/ExponentialMovingAverage`` for ``conv1/BatchNorm/moving_variance``'s shadow).
The names are TensorFlow's own: tf.compat.v1.train.ExponentialMovingAverage names a shadow
``<variable>/ExponentialMovingAverage`` (fixtures/towers_bn)."""

from __future__ import annotations

from ckpt_tools.cli._shorten import shorten_column

EMA = "ExponentialMovingAverage"
NAMES = [f"conv1/BatchNorm/{n}/{EMA}" for n in ("beta", "moving_mean", "moving_variance")]


def _shown(names, width):
    return shorten_column(names, width, lambda s: s, len)


def test_the_segment_naming_the_variable_is_kept():
    shown = _shown(NAMES, 39)
    assert all(len(s) <= 39 for s in shown)
    for name, text in zip(NAMES, shown, strict=True):
        assert name.split("/")[2] in text, (name, text)
    assert len(set(shown)) == len(shown)


def test_the_shared_last_segment_stays_where_both_fit():
    shown = _shown([f"conv1/BatchNorm/{n}/{EMA}" for n in ("beta", "gamma")], 34)
    assert shown == [f"…/beta/{EMA}", f"…/gamma/{EMA}"]


def test_distinct_last_segments_keep_the_old_rule():
    names = ["model/block_1/layer_with_weights-1/kernel", "model/block_1/layer_with_weights-1/bias"]
    assert all(s.endswith(("/kernel", "/bias")) for s in _shown(names, 30))
