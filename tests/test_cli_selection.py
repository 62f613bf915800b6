"""Name filters (``--grep``/``--regex``) that select no variable are exit 3 in ``list`` and
``stats`` too, as the README's exit-code table says for every command; a role or collection
filter that leaves nothing is an answer (exit 0)."""

from __future__ import annotations

import pytest
from _corpus import run_cli
from helpers import FIXTURES

TOWERS = str(FIXTURES / "towers_bn")


@pytest.mark.parametrize("argv", [
    ["list", TOWERS, "--grep", ".*Momentum"], ["list", TOWERS, "--grep", ".*Momentum", "-q"],
    ["list", TOWERS, "--regex", "nomatch", "--json"], ["stats", TOWERS, "--grep", ".*Momentum"],
    ["stats", TOWERS, "--regex", "nomatch", "--json"], ["diff", TOWERS, "--ema", "-g", "x*"],
])
def test_name_filters_selecting_nothing_exit_3(argv, capsys):
    code, out, err = run_cli(argv, capsys)
    assert code == 3 and out == "", (out, err)
    assert err.startswith("error: ") and "the name filters select no variable" in err, err
    if ".*Momentum" in argv:  # the README example of a regex given to --grep
        assert "--grep takes a shell glob" in err and "--regex" in err, err


def test_filters_that_select_something_still_list(capsys):
    code, out, _ = run_cli(["list", TOWERS, "--regex", "Momentum$", "-q"], capsys)
    assert code == 0 and out.split() == ["conv1/BatchNorm/beta/Momentum",
                                         "conv1/weights/Momentum", "logits/biases/Momentum",
                                         "logits/weights/Momentum"]
    # The names match, the role filter leaves nothing: an empty answer, not an error.
    code, out, err = run_cli(["list", TOWERS, "--grep", "*Momentum", "--role", "ema"], capsys)
    assert code == 0 and "0 of 29 variables" in out, err
