"""README's layout and CONTRIBUTING.md name only paths that exist, and the layout names every room."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP = ("fakegpu/", "tests/", "scenarios/", "bench/", "deploy/", "protos/", ".ci/")


def layout_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def named_paths(text: str) -> list[str]:
    """Backticked repository paths (``fakegpu/x.py``, ``tests/unit/``), without globs or placeholders."""
    found = [m for m in re.findall(r"`([^`\s]+)`", text) if m.startswith(TOP)]
    return sorted({p for p in found if not any(c in p for c in "*<>{}[]")})


@pytest.mark.parametrize("doc", ["CONTRIBUTING.md", "README.md"])
def test_every_path_a_doc_names_exists(doc):
    text = (ROOT / doc).read_text()
    paths = named_paths(text)
    assert paths, f"{doc} names no repository path: the check would prove nothing"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert missing == [], f"{doc} names paths that do not exist: {missing}"


def test_the_layout_names_every_room_of_the_package():
    rooms = sorted(p.name for p in (ROOT / "fakegpu").iterdir() if (p / "__init__.py").exists())
    layout = layout_section()
    unnamed = [room for room in rooms if f"`fakegpu/{room}/`" not in layout]
    assert unnamed == [], f"README's layout does not name these rooms: {unnamed}"
