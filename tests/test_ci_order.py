"""The slow-first collection order (conftest.SLOW_FIRST) names files that exist: a renamed
or split file would silently fall back to its alphabetical place and the CI run would again
end on one busy worker."""

from __future__ import annotations

from pathlib import Path

from conftest import SLOW_FIRST


def test_every_slow_first_file_exists():
    here = Path(__file__).parent
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
    assert [n for n in SLOW_FIRST if not (here / n).is_file()] == []


def test_slow_files_are_collected_first():
    from types import SimpleNamespace

    from conftest import pytest_collection_modifyitems

    def item(name, test):
        return SimpleNamespace(path=Path("tests") / name, test=test)

    items = [item("test_a.py", 1), item(SLOW_FIRST[1], 1), item("test_a.py", 2),
             item(SLOW_FIRST[0], 1), item(SLOW_FIRST[1], 2), item("test_z.py", 1)]
    pytest_collection_modifyitems(None, None, items)
    assert [(i.path.name, i.test) for i in items] == [
        (SLOW_FIRST[0], 1), (SLOW_FIRST[1], 1), (SLOW_FIRST[1], 2),
        ("test_a.py", 1), ("test_a.py", 2), ("test_z.py", 1)]
