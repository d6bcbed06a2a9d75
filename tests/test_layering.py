"""Architecture rules: sharing/ is pure; fakeplugin/ and dra/ never import each other; kubeapi/ is below both."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED_THIRD_PARTY_IN_SHARING = {"pydantic", "yaml"}


def imported_roots(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        if "generated" in path.parts:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def test_sharing_is_pure():
    roots = imported_roots("sharing")
    stdlib = sys.stdlib_module_names
    foreign = {
        r: files
        for r, files in roots.items()
        if r not in stdlib and r != "sharing" and r not in ALLOWED_THIRD_PARTY_IN_SHARING
    }
    assert foreign == {}, f"sharing/ must import only the stdlib, pydantic and yaml: {foreign}"
    assert "grpc" not in roots and "lightkube" not in roots and "kubernetes" not in roots


@pytest.mark.parametrize(("package", "forbidden"), [("fakeplugin", "dra"), ("dra", "fakeplugin")])
def test_faces_do_not_import_each_other(package, forbidden):
    assert forbidden not in imported_roots(package)


@pytest.mark.parametrize("forbidden", ["fakeplugin", "dra", "fakegpu", "grpc"])
def test_kubeapi_serves_both_faces_without_depending_on_them(forbidden):
    """kubeapi/ is the API-server plumbing both faces share, so it may lean on sharing/ only."""
    assert forbidden not in imported_roots("kubeapi")


@pytest.mark.parametrize("forbidden", ["fakeplugin", "dra", "fakegpu"])
def test_telemetry_serves_both_faces_without_depending_on_them(forbidden):
    """telemetry/ (metrics, DCGM exporter, logs) is used by both daemons, so it sits below both."""
    assert forbidden not in imported_roots("telemetry")
