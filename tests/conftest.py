"""Suite-wide options and fixtures: ``--soak`` runs the reliability suites' long profile; ``root``."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.profile import LONG, SHORT, Profile


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run the reliability suites' long profile (100 process restarts per daemon, more fuzzing)",
    )


@pytest.fixture(scope="session")
def profile(request: pytest.FixtureRequest) -> Profile:
    return LONG if request.config.getoption("--soak") else SHORT


@pytest.fixture
def root() -> Iterator[Path]:
    """A fresh directory with a short path under /tmp: Unix socket paths must fit in 108 bytes, and pytest's
    own tmp_path is often longer once a kubelet's sub-directories are added."""
    path = Path(tempfile.mkdtemp(prefix="fg-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
