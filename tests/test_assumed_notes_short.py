"""The assumptions a mid-training Keras file's pairing rests on are said where they apply (kept
with ``-q``), so in the ordinary case they are short: one line each on stderr naming the
options that decide, not paragraphs (review-13-user-u14 F7). ``--json`` still lists them
under ``"assumed"``; the Python ``AssumptionWarning`` keeps the full explanation."""

from __future__ import annotations

import json
import warnings

import pytest
from helpers import FIXTURES, run_cli

MODEL = FIXTURES / "keras_ema" / "model.keras"  # fit() with use_ema=True, saved mid-training


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("note: ")]


def test_each_assumption_is_one_short_line_in_list():
    code, _, err = run_cli(["list", str(MODEL), "-q"])
    assert code == 0, err
    swap = [n for n in _notes(err) if "SwapEMAWeights" in n]
    fit = [n for n in _notes(err) if "fit() builds the optimizer" in n]
    assert len(swap) == 1 and len(fit) == 1, err
    assert len(swap[0]) <= 180 and "--not-swapped" in swap[0] and "--raw" in swap[0], swap
    # the fit_order note names the weights that could trade copies, then the options
    assert len(fit[0]) <= 240, fit
    assert "--fit-order" in fit[0] and "--trainable NAMES --loop-order" in fit[0], fit
    # the [8] group is too small for the copies' values to be compared: said, as the README
    # says it (review-21-user-u23 F4: a loop's traded Dense(8) biases went out exit 0)
    assert "([8] float32) could trade EMA copies unchecked (under 16 elements):" in fit[0], fit


@pytest.mark.parametrize("command", ["map", "export"])
def test_commands_that_hand_back_values_refuse_the_swap_in_one_line(command, tmp_path):
    """The swap question is refused where values are handed back (539f16a): one error line
    naming both ways out; stated, only the fit_order note is left, one line."""
    extra = ["--out", str(tmp_path / "w.npz")] if command == "export" else []
    code, _, err = run_cli([command, str(MODEL), "-q", *extra])
    assert code == 6 and len(err.strip().splitlines()) == 1, err
    assert "--not-swapped" in err and "--raw" in err, err
    code, _, err = run_cli([command, str(MODEL), "-q", "--not-swapped", *extra])
    assert code == 0, err
    fit = [n for n in _notes(err) if "fit() builds the optimizer" in n]
    assert len(fit) == 1 and len(fit[0]) <= 240, err
    assert not [n for n in _notes(err) if "SwapEMAWeights(swap_on_epoch=True) swapped" in n], err


def test_json_still_lists_them(tmp_path):
    code, text, _ = run_cli(["list", str(MODEL), "--json"])
    assert code == 0
    assert json.loads(text)["assumed"] == ["fit_order", "not_swapped"], text
    code, text, _ = run_cli(["export", str(MODEL), "--out", str(tmp_path / "w.npz"), "--json",
                             "--not-swapped"])
    assert code == 0
    assert json.loads(text)["assumed"] == ["fit_order"], text


def test_the_python_warning_keeps_the_full_explanation():
    pytest.importorskip("numpy")
    import ckpt_tools
    from ckpt_tools.errors import AssumptionWarning

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", AssumptionWarning)
        ckpt_tools.ema_map(str(MODEL), not_swapped=True)
    text = " ".join(str(w.message) for w in said if issubclass(w.category, AssumptionWarning))
    assert "a custom training loop whose first apply_gradients()" in text, text
    # a Python caller is told the keywords, not only the CLI's options (review-16-user-u18 F9)
    assert "(in Python: fit_order=True; trainable=[...], loop_order=True)" in text, text
    with ckpt_tools.open_checkpoint(str(MODEL)) as ckpt, warnings.catch_warnings(record=True) \
            as said:
        warnings.simplefilter("always", AssumptionWarning)
        ckpt.variables()
    text = " ".join(str(w.message) for w in said if issubclass(w.category, AssumptionWarning))
    assert "its EMA copies the raw weights, which the file cannot show" in text, text
