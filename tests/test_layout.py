"""The package's layers, as ``ls`` and the import graph show them (see formats/__init__.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import FIXTURES, prefix

import ckpt_tools
from ckpt_tools.formats import READERS, Reader, open_reader

PACKAGE = Path(ckpt_tools.__file__).parent
# Modules of the layers above formats/: a reader importing one of these inverts the layering.
UPPER = {"checkpoint", "roles", "emamap", "keras_ema", "bake", "restore", "export", "verify",
         "stats", "diff", "cli", "train"}


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path):
    """Yields (absolute module imported from, names) for every ``from X import names``."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield module, [a.name for a in node.names]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_names_cross_modules(path):
    for module, names in _imports(path):
        if not module.startswith("ckpt_tools"):
            continue
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        assert not private, f"{path.name} imports private {private} from {module}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "formats").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_formats_do_not_import_upper_layers(path):
    for module, names in _imports(path):
        parts = module.split(".")
        if parts[0] != "ckpt_tools" or len(parts) < 2:
            continue
        targets = [parts[1]] if len(parts) > 1 and parts[1] != "formats" else []
        if module == "ckpt_tools":
            targets = names
        assert not UPPER.intersection(targets), f"{path} imports {module} {names}"


def test_readers_live_in_formats():
    names = {p.name for p in (PACKAGE / "formats").iterdir()}
    assert {"table.py", "table_builder.py", "bundle.py", "bundle_writer.py", "v1.py", "meta.py",
            "objgraph.py", "savedmodel.py", "_io.py", "strings.py", "keras"} <= names
    flat = {p.stem for p in PACKAGE.glob("*.py")}
    assert not flat & {"table", "bundle", "writer", "v1", "meta", "objgraph", "h5", "crc"}


def test_one_string_codec_and_one_mmap_helper():
    """The string-tensor codec and the mmap open/close code exist once (formats/strings, _io)."""
    for path in _modules():
        text = path.read_text()
        if path.name not in ("_io.py",):
            assert "mmap.mmap(" not in text, f"{path} maps a file itself; use formats._io"
            assert "mm.close()" not in text and ".close()\n            except BufferError" \
                not in text, path
        if path.name != "strings.py":
            assert 'struct.pack("<Q", n)' not in text, f"{path} re-implements the string codec"


@pytest.mark.parametrize("path", [p for p in _modules() if "train" not in p.parts],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_library_reads_variables_unwarned(path):
    """Checkpoint.variables() warns its caller (AssumptionWarning) wherever an EMA link is
    assumed; the library's own steps say that in their notes or their own warning, and read
    the variables with variables_unwarned() (train/ calls Keras optimizers' variables())."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert node.func.attr != "variables", (
                f"{path.name}:{node.lineno} calls .variables(): use .variables_unwarned()")


@pytest.mark.parametrize("fmt,path", [
    ("v2", prefix("linear_v2")), ("v1", prefix("linear_v1")),
    ("h5", str(FIXTURES / "keras_ema" / "model.weights.h5")),
    ("keras", str(FIXTURES / "keras_ema" / "model.keras")),
])
def test_every_reader_implements_the_protocol(fmt, path):
    assert fmt in READERS
    reader = open_reader(fmt, path)
    try:
        assert isinstance(reader, Reader)
        assert reader.format == fmt
        assert all(Path(f).is_file() for f in reader.files())
        name = next(iter(reader.entries))
        assert reader.read(name).shape == reader.entries[name].shape
    finally:
        reader.close()


def test_public_api_is_all():
    for name in ckpt_tools.__all__:
        assert getattr(ckpt_tools, name) is not None, name
    for name in ("verify", "diff_checkpoints", "diff_ema", "checkpoint_stats", "VerifyReport",
                 "DiffReport", "StatsRecord", "ExitCode", "VariableNotFoundError"):
        assert name in ckpt_tools.__all__
    assert ckpt_tools.VariableNotFoundError.exit_code == ckpt_tools.ExitCode.NOT_FOUND == 3


def test_lazy_names_resolve_in_any_order():
    """``verify`` is a function even after its submodule was imported for ``VerifyReport``."""
    import subprocess
    import sys

    code = ("import ckpt_tools as c; c.VerifyReport; c.Problem; "
            "assert callable(c.verify) and c.verify.__name__ == 'verify'; "
            "from ckpt_tools import *; assert callable(verify) and verify.__module__ == "
            "'ckpt_tools.verify'; r = c.verify('fixtures/towers_bn'); assert r.ok")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=PACKAGE.parent)
    assert proc.returncode == 0, proc.stderr


def test_exit_code_enum_is_the_readme_table():
    """errors.ExitCode has exactly the codes of the README's exit-code table (130 included),
    and the CLI's interrupt code is the enum's."""
    import re

    from ckpt_tools import ExitCode
    from ckpt_tools.cli import EXIT_INTERRUPTED

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    table = readme.split("## Exit codes and errors", 1)[1].split("\n## ", 1)[0]
    codes = [int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)]
    assert sorted(int(c) for c in ExitCode) == codes
    assert ExitCode.INTERRUPTED == EXIT_INTERRUPTED == 130
