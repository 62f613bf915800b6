"""LazyPattern: patterns only some paths use are compiled on first use, not at import."""

from __future__ import annotations

import re
import subprocess
import sys

from helpers import FIXTURES

from ckpt_tools.lazy_re import LazyPattern


def test_lazy_pattern_compiles_on_first_use_and_behaves_as_the_compiled_pattern():
    lazy = LazyPattern(r"(^|/)\.?optimizer[^/]*(/|$)", re.IGNORECASE)
    assert "_compiled" not in lazy.__dict__ and lazy.pattern.startswith("(^|/)")
    compiled = re.compile(lazy.pattern, re.IGNORECASE)
    for text in ["model/Optimizer/iter", "a/b", ".optimizer", "x/optimizerx"]:
        assert bool(lazy.search(text)) == bool(compiled.search(text))
        assert lazy.sub("#", text) == compiled.sub("#", text)
    assert lazy.compiled() is lazy.compiled()
    assert lazy.__dict__["search"] == lazy.compiled().search  # cached: no __getattr__ again


def test_lazy_pattern_raises_attribute_error_for_unknown_names():
    lazy = LazyPattern("a")
    for name in ("nope", "__len__"):
        try:
            getattr(lazy, name)
        except AttributeError:
            pass
        else:
            raise AssertionError(name)


def test_list_json_process_compiles_no_lazy_pattern():
    """``ckpt list --json`` on a TF1 checkpoint compiles none of the patterns only Keras
    files, TF2 object graphs, errors, shell quoting or the human table use (~1 ms a process
    when compiled at import)."""
    code = ("import sys; import ckpt_tools.cli as cli\n"
            "from ckpt_tools import checkpoint, errors, roles\n"
            "from ckpt_tools.cli import _text\n"
            "run = cli.run_list\n"
            "def spy(*a):\n"
            "    try:\n        return run(*a)\n"
            "    finally:\n"
            "        mods = (checkpoint, errors, roles, _text)\n"
            "        lazy = [(m.__name__, n, v) for m in mods for n, v in vars(m).items()\n"
            "                if v.__class__.__name__ == 'LazyPattern']\n"
            "        done = [(m, n) for m, n, v in lazy if '_compiled' in vars(v)]\n"
            "        print('LAZY', len(lazy), 'COMPILED', done, file=sys.stderr)\n"
            "cli.run_list = spy; sys.argv = ['ckpt', 'list', *sys.argv[1:]]; cli.main()")
    proc = subprocess.run([sys.executable, "-c", code, str(FIXTURES / "towers_bn"), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "COMPILED []" in proc.stderr and "LAZY 0 " not in proc.stderr, proc.stderr
    assert proc.stdout.startswith("{")
