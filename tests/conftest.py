"""Suite-wide options: ``--soak`` runs the reliability suites' long profile (tests/reliability/)."""

from __future__ import annotations

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
