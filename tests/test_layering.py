"""Architecture rules: which rooms of the ``fakegpu`` package may import which.

``fakegpu.sharing`` is pure; the two faces (``fakeplugin``, ``dra``) never import each other nor the
harness that drives them (``kubelet``, ``testing``) nor the command line; the plumbing below the faces
(``kube``, ``runtime``, ``control``, ``telemetry``) never reaches up. A new import that breaks a rule
fails here with the file that made it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fakegpu"

ALLOWED: dict[str, set[str]] = {
    "sharing": set(),
    "kubeletapi": set(),
    "runtime": {"kubeletapi"},
    "kube": {"sharing"},
    "control": {"sharing", "runtime"},
    "telemetry": {"sharing", "runtime", "kubeletapi"},
    "fakeplugin": {"sharing", "runtime", "kubeletapi", "kube", "control", "telemetry"},
    "dra": {"sharing", "runtime", "kubeletapi", "kube", "control", "telemetry"},
    "kubelet": {"runtime", "kubeletapi", "sharing", "control"},  # sharing: label_syntax (pure); control: admin ops
    "virtual_nodes": {"sharing", "runtime", "kube", "dra"},
    "scheduling": {"sharing"},
    "testing": {"sharing", "runtime", "kubeletapi", "control", "kubelet", "fakeplugin", "dra", "scheduling"},
    "cli": {
        "sharing",
        "runtime",
        "kubeletapi",
        "kube",
        "control",
        "telemetry",
        "fakeplugin",
        "dra",
        "kubelet",
        "virtual_nodes",
        "testing",
    },
}
"""Room -> the other rooms it may import. Everything not listed is forbidden."""

THIRD_PARTY: dict[str, set[str]] = {
    "sharing": {"pydantic", "yaml"},
    "kubeletapi": {"grpc", "google", "grpc_tools"},
}
"""Rooms whose third-party imports are limited too (others may use any declared dependency)."""


def imports_of(room: str) -> dict[str, set[str]]:
    """Top-level names a room imports (``fakegpu.<x>`` counted as ``fakegpu.<x>``) -> the files importing them."""
    found: dict[str, set[str]] = {}
    for path in (PACKAGE / room).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                parts = name.split(".")
                key = ".".join(parts[:2]) if parts[0] == "fakegpu" and len(parts) > 1 else parts[0]
                found.setdefault(key, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_room_has_rules():
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(ALLOWED), "a room was added or removed: give it a row in ALLOWED"


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_room_imports_only_what_it_may(room):
    imported = imports_of(room)
    inside = {k.removeprefix("fakegpu."): files for k, files in imported.items() if k.startswith("fakegpu.")}
    forbidden = {k: sorted(files) for k, files in inside.items() if k != room and k not in ALLOWED[room]}
    assert forbidden == {}, f"fakegpu.{room} may import only {sorted(ALLOWED[room])}: {forbidden}"
    assert "fakegpu" not in imported, f"fakegpu.{room} imports the bare package: {imported.get('fakegpu')}"


@pytest.mark.parametrize("room", sorted(THIRD_PARTY))
def test_room_third_party_imports_are_limited(room):
    foreign = {
        k: sorted(files)
        for k, files in imports_of(room).items()
        if not k.startswith("fakegpu.") and k not in sys.stdlib_module_names and k not in THIRD_PARTY[room]
    }
    assert foreign == {}, f"fakegpu.{room} may import only the stdlib and {sorted(THIRD_PARTY[room])}: {foreign}"


def test_sharing_imports_neither_grpc_nor_kubernetes_nor_telemetry():
    """The design's first rule, spelled out: both faces see the same inventory because the core is pure."""
    imported = imports_of("sharing")
    for name in ("grpc", "lightkube", "kubernetes", "prometheus_client", "fakegpu.telemetry"):
        assert name not in imported, f"fakegpu.sharing imports {name}: {imported[name]}"


def test_only_fakegpu_is_installed():
    """The wheel's one top-level name: nothing beside ``fakegpu/`` holds Python the package would install."""
    stray = sorted(
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and (p / "__init__.py").exists() and p.name not in {"fakegpu", "tests"}
    )
    assert stray == [], f"top-level Python packages outside fakegpu/: {stray}"


def test_only_scheduling_imports_celpy():
    """cel-python is the allocator's alone (and a test-only dependency): no other room may import it."""
    users = {room: sorted(imports_of(room)["celpy"]) for room in ALLOWED if "celpy" in imports_of(room)}
    assert set(users) <= {"scheduling"}, f"only fakegpu.scheduling may import celpy: {users}"


def test_the_daemons_and_the_cli_load_neither_celpy_nor_the_allocator():
    """Importing the command line, the DRA daemon or the pytest plugin leaves cel-python and
    ``fakegpu.scheduling`` unloaded: they come only with the manifest applier, which the tests import."""
    probe = (
        "import sys\n"
        "import fakegpu.cli.main, fakegpu.dra.daemon, fakegpu.testing.pytest_plugin\n"
        "print(sorted(m for m in sys.modules if m == 'celpy' or m.startswith(('celpy.', 'fakegpu.scheduling'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout
