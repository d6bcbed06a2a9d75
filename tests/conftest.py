"""Suite-wide options, markers and fixtures.

Options: ``--soak`` runs the reliability suites' long profile; ``--timing`` also enforces wall-clock limits
(see tests/timing.py). Every test gets one of the markers ``unit``, ``integration``, ``reliability`` or
``e2e`` from where it lives (``pytest -m unit`` runs the fast tests only). Fixtures: ``profile``,
``timing``, ``root``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.profile import LONG, SHORT, Profile
from tests.timing import Timing

TESTS = Path(__file__).resolve().parent

MARKER_BY_DIRECTORY = {
    "unit": "unit",
    "apiserver": "unit",  # the fake API server's own tests: one component, in this process
    "deploy": "unit",  # the manifests under deploy/, rendered and checked statically
    "integration": "integration",
    "packaging": "integration",  # fakegpu built and installed into a fresh venv, used by a user's project
    "reliability": "reliability",
    "e2e": "e2e",
}
MARKER_BY_TOP_LEVEL_FILE = {"test_demo.py": "integration"}
"""Tests at the top of tests/ are unit tests (the CLI, the layering, the README, the generated code), but
the demo: it runs the whole product end to end in a subprocess."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run the reliability suites' long profile (100 process restarts per daemon, more fuzzing)",
    )
    parser.addoption(
        "--timing",
        action="store_true",
        default=False,
        help="also enforce wall-clock limits (re-registration within 1 s, ...): meaningful on an unloaded machine",
    )


def marker_for(path: Path) -> str:
    """The marker of a test file under tests/; a new directory must be added to MARKER_BY_DIRECTORY."""
    relative = path.relative_to(TESTS)
    if len(relative.parts) == 1:
        return MARKER_BY_TOP_LEVEL_FILE.get(relative.name, "unit")
    top = relative.parts[0]
    if top not in MARKER_BY_DIRECTORY:
        raise pytest.UsageError(f"tests/{top}/ has no marker: add it to MARKER_BY_DIRECTORY in {__file__}")
    return MARKER_BY_DIRECTORY[top]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(TESTS):
            item.add_marker(marker_for(item.path))


@pytest.fixture(scope="session")
def profile(request: pytest.FixtureRequest) -> Profile:
    return LONG if request.config.getoption("--soak") else SHORT


@pytest.fixture(scope="session")
def timing(request: pytest.FixtureRequest) -> Timing:
    return Timing(enforced=bool(request.config.getoption("--timing")))


@pytest.fixture
def root() -> Iterator[Path]:
    """A fresh directory with a short path under /tmp: Unix socket paths must fit in 108 bytes, and pytest's
    own tmp_path is often longer once a kubelet's sub-directories are added."""
    path = Path(tempfile.mkdtemp(prefix="fg-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
