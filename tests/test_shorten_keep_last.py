"""80 columns: the ``ema`` column of ``list`` names the variable's last segment (README: "always
with its last segment"), even where no whole-segment form that keeps it fits and tells the rows
apart: review-16-user-u18 F6 showed ``of transformer_block_0/…`` (which of the block's
variables?) and ``of classifier_head/…`` beside ``of classifier_head/bias``. Such a target is
cut by characters instead (``of trans…_0/…tput/kernel``). The names are Keras 3's own
``Variable.path`` of a transformer-like model built here."""

from __future__ import annotations

import os

import pytest

from ckpt_tools.cli._shorten import ELLIPSIS, shorten_column

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="module")
def paths():
    keras = pytest.importorskip("keras")

    class Block(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.attn = keras.layers.MultiHeadAttention(2, 4, name="mha")
            self.ff = keras.layers.Dense(8, name="ff")

        def call(self, h):
            return self.ff(h + self.attn(h, h))

    inp = keras.Input((6, 8))
    h = Block(name="transformer_block_1")(Block(name="transformer_block_0")(inp))
    out = keras.layers.Dense(2, name="classifier_head")(h)
    return [v.path for v in keras.Model(inp, out).trainable_variables]


def _shown(names, width):
    return shorten_column([f"of {n}" for n in names], width, lambda s: s, len, lead="of ")


@pytest.mark.parametrize("width", [24, 22])
def test_the_last_segment_is_kept_where_a_cut_keeping_it_fits(paths, width):
    rows = [p for p in paths if p.endswith("attention_output/kernel")
            or p.startswith("classifier_head/") or p.endswith("ff/kernel")]
    assert len(rows) == 6, paths
    shown = _shown(rows, width)
    assert len(set(shown)) == len(shown), shown
    for name, text in zip(rows, shown, strict=True):
        assert len(text) <= width and text.startswith("of "), text
        assert text.endswith("/" + name.rsplit("/", 1)[-1]), (name, text)
        assert text.count(ELLIPSIS) <= 3, text


def test_every_target_of_the_model_keeps_its_last_segment_at_24(paths):
    shown = _shown(paths, 24)
    assert len(set(shown)) == len(shown), shown
    for name, text in zip(paths, shown, strict=True):
        assert len(text) <= 24 and text.endswith("/" + name.rsplit("/", 1)[-1]), (name, text)
