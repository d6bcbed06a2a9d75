"""Each catalog scenario that reproduces a bug through a bug-compatible mode fails with that mode off:
its expectations depend on the bug, not on a state that has not changed yet (issue 15, section 1)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from fakegpu.sharing.bug_modes import BUG_MODES
from fakegpu.testing.scenario import EXIT_FAIL, EXIT_PASS, Scenario, load_scenario, run_scenario
from fakegpu.testing.scenario.cluster_model import is_cluster_data, read_scenario_data

ROOT = Path(__file__).resolve().parents[2]
CATALOG = [
    load_scenario(p)
    for p in sorted((ROOT / "scenarios").glob("*.yaml"))
    if not is_cluster_data(read_scenario_data(p))  # cluster scenarios start no node
]
WITH_MODES = [(s, mode) for s in CATALOG for mode in s.node.bugs]


def without(scenario: Scenario, mode: str) -> Scenario:
    bugs = [b for b in scenario.node.bugs if b != mode]
    return dataclasses.replace(scenario, node=scenario.node.model_copy(update={"bugs": bugs}))


async def run(scenario: Scenario) -> tuple[int, str]:
    out = io.StringIO()
    return await run_scenario(scenario, out), out.getvalue()


def test_the_catalog_reproduces_the_bug_modes_with_an_issue():
    """Every mode whose description names an upstream issue has a scenario (random-device-ids names none)."""
    used = {mode for _, mode in WITH_MODES}
    with_issue = {mode for mode, text in BUG_MODES.items() if "#" in text}
    assert with_issue <= used, with_issue - used


@pytest.mark.parametrize(("scenario", "mode"), WITH_MODES, ids=lambda x: x if isinstance(x, str) else x.name)
async def test_a_bug_scenario_passes_with_its_mode_and_fails_without(scenario: Scenario, mode: str):
    status, out = await run(scenario)
    assert status == EXIT_PASS, out
    status, out = await run(without(scenario, mode))
    assert status == EXIT_FAIL, f"{scenario.name} passes with {mode} off, so it does not show the bug:\n{out}"
