"""Daemon restarts: the soaks of ``tests/reliability/daemon_soak.py`` (whose docstring says what each kill
and restart must keep) at the profile's length, and the soak's hook into ``dra/gpu_prepare.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.dra.gpu_prepare import PHASE_PAUSE_ENV, phase_pause_from_env
from tests.reliability.daemon_soak import DaemonSoakFigures, soak_dra_restarts, soak_plugin_restarts
from tests.reliability.profile import Profile


def assert_clean(figures: DaemonSoakFigures, restarts: int) -> None:
    assert figures.restarts == restarts
    assert figures.problems == [], f"{len(figures.problems)} problems, first ones:\n" + "\n".join(figures.problems[:8])
    assert (figures.lost, figures.duplicated, figures.half_prepared, figures.stale_sockets_left) == (0, 0, 0, 0)
    assert figures.leaks() == [], (
        f"{figures.leaks()}; before: {figures.kubelet_before and figures.kubelet_before.describe()}, "
        f"after: {figures.kubelet_after and figures.kubelet_after.describe()}"
    )


async def test_plugin_restarts_lose_no_allocation(profile: Profile, root: Path) -> None:
    figures = await soak_plugin_restarts(profile.plugin_restarts, root=root)
    assert_clean(figures, profile.plugin_restarts)
    assert figures.acknowledged > 0 and figures.cut_off > 0 and figures.retried_ok == figures.cut_off
    assert figures.stale_sockets_replaced > 0, "no SIGKILL left a stale socket for the next start to replace"
    assert figures.kubelet_before is not None and figures.kubelet_after is not None


async def test_dra_restarts_lose_no_claim_and_prepare_none_twice(profile: Profile, root: Path) -> None:
    figures = await soak_dra_restarts(profile.dra_restarts, root=root)
    assert_clean(figures, profile.dra_restarts)
    assert figures.acknowledged > 0 and figures.cut_off > 0
    assert figures.stale_sockets_replaced > 0, "no SIGKILL left a stale socket for the next start to replace"
    between_phases = sum(n for k, n in figures.kills.items() if "after-prepare-started" in k or "after-cdi" in k)
    assert between_phases > 0, "no kill landed between the two checkpoint phases"


def test_phase_pause_hook_is_off_unless_asked(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The soak's hook into dra/gpu_prepare.py: unset means no pause; nonsense is refused, not obeyed."""
    monkeypatch.delenv(PHASE_PAUSE_ENV, raising=False)
    assert phase_pause_from_env() == 0.0
    monkeypatch.setenv(PHASE_PAUSE_ENV, "0.25")
    assert phase_pause_from_env() == 0.25
    for bad in ("soon", "-1", "nan", "3600"):
        monkeypatch.setenv(PHASE_PAUSE_ENV, bad)
        assert phase_pause_from_env() == 0.0
    assert sum(PHASE_PAUSE_ENV in r.getMessage() and r.levelname == "ERROR" for r in caplog.records) == 4
