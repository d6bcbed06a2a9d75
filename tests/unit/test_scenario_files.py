"""The scenario catalog: every file parses, names the issue it reproduces and says what it shows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fakegpu.dra.admin_ops import DRA_FAULTS
from fakegpu.sharing.errors import SpecError
from fakegpu.testing.scenario import load_scenario
from fakegpu.testing.scenario.cluster_model import is_cluster_data, read_scenario_data
from fakegpu.testing.scenario.model import (
    STEP_KINDS,
    AllocateStep,
    FaultStep,
    PluginsLookedStep,
    parse_scenario,
    step_kind,
)
from fakegpu.testing.scenario.output import describe_step

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
EVERY_FILE = sorted(SCENARIOS.glob("*.yaml"))
CATALOG = [p for p in EVERY_FILE if not is_cluster_data(read_scenario_data(p))]
"""The node scenarios; the cluster ones are checked in tests/integration/test_cluster_scenarios_files.py."""
ISSUE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#\d+$")


def test_catalog_is_not_empty():
    assert len(CATALOG) >= 12


@pytest.mark.parametrize("path", CATALOG, ids=lambda p: p.stem)
def test_catalog_file_parses_and_names_an_issue(path: Path):
    scenario = load_scenario(path)
    assert ISSUE.match(scenario.issue), f"issue should look like owner/repo#123, found {scenario.issue!r}"
    assert scenario.name == path.stem
    assert len(scenario.description.split()) >= 15, "say what the scenario shows and what it approximates"
    assert scenario.steps or scenario.expect_start_error


def test_catalog_names_are_unique_and_every_file_is_in_the_readme():
    names = [load_scenario(p).name for p in CATALOG]
    assert len(names) == len(set(names))
    readme = (SCENARIOS / "README.md").read_text()
    missing = [p.name for p in CATALOG if p.name not in readme]
    assert missing == [], f"scenarios/README.md should list {missing}"
    undocumented = [k for k in STEP_KINDS if f"`{k}`" not in readme]
    assert undocumented == [], f"scenarios/README.md should document the step kinds {undocumented}"


def test_the_required_reproductions_are_in_the_catalog():
    issues = {load_scenario(p).issue for p in CATALOG}
    required = {
        "NVIDIA/k8s-device-plugin#210",
        "NVIDIA/k8s-device-plugin#368",
        "NVIDIA/k8s-device-plugin#1014",
        "NVIDIA/gpu-operator#386",
        "NVIDIA/k8s-device-plugin#240",
        "kubernetes/kubernetes#62773",
        "kubernetes/kubernetes#121994",
        "kubernetes/kubernetes#116125",
        "NVIDIA/k8s-device-plugin#2038",
        "NVIDIA/gpu-operator#460",
    }
    assert required <= issues, required - issues


def _header(**extra: object) -> dict[str, object]:
    return {"name": "t", "issue": "a/b#1", "description": "d", **extra}


def test_steps_parse_into_typed_models():
    scenario = parse_scenario(
        _header(steps=[{"allocate": {"pod": "p", "resources": {"nvidia.com/gpu": 2}}}, {"advance_clock": 301}]),
        "x.yaml",
    )
    first = scenario.steps[0]
    assert isinstance(first, AllocateStep) and first.allocate.container == "main" and first.allocate.wants_admission
    assert [step_kind(s) for s in scenario.steps] == ["allocate", "advance_clock"]


def test_plugins_looked_is_a_step_of_its_own():
    scenario = parse_scenario(_header(steps=[{"restart": "kubelet"}, {"plugins_looked": True}]), "x.yaml")
    barrier = scenario.steps[1]
    assert isinstance(barrier, PluginsLookedStep) and step_kind(barrier) == "plugins_looked"
    assert describe_step(barrier) == "the plugins' watch loop looks again"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_header(steps=[{"wait": 0}, {"allocate": {"pod": "p", "resources": {"g/x": True}}}]), "steps[1].allocate"),
        (_header(steps=[{"fault": {"rpc": "Allocat", "code": "INTERNAL"}}]), "unknown RPC 'Allocat'"),
        (_header(steps=[{"fault": {"rpc": "Allocate"}}]), "a fault needs a 'code' to fail with or a 'delay'"),
        (_header(steps=[{"fault": {"rpc": "Allocate", "code": "BROKEN"}}]), "unknown gRPC status code 'BROKEN'"),
        (
            _header(steps=[{"fault": {"rpc": "Allocate", "code": "INTERNAL", "times": 0}}]),
            "steps[0].fault.times: times must be at least 1, found 0",
        ),
        (
            _header(steps=[{"fault": {"rpc": "Allocate", "delay": 9999}}]),
            "steps[0].fault.delay: delay must be between 0 and 3600 seconds, found 9999",
        ),
        (_header(steps=[{"fault": {"code": "INTERNAL"}}]), "steps[0].fault.rpc: Field required"),
        (_header(steps=[{"fault": {"rpc": "Allocate", "code": "internal"}}]), "unknown gRPC status code 'internal'"),
        (_header(steps=[{"delete_checkpoint": False}]), "steps[0].delete_checkpoint: Input should be True"),
        (_header(steps=[{"advance_clock": -1}]), "steps[0].advance_clock: Input should be greater than or equal to 0"),
        (_header(steps=[{"plugins_looked": False}]), "steps[0].plugins_looked: Input should be True"),
        (_header(steps=[{"plugins_looked": 0.5}]), "steps[0].plugins_looked: Input should be True"),
        (_header(steps=[{"reconfigure": {}}]), "steps[0].reconfigure: give at least one of gpus, config"),
        (
            _header(
                steps=[{"allocate": {"pod": "p", "resources": {"g/x": 1}, "expect": "admitted", "expect_error": "x"}}]
            ),
            "'expect: admitted' cannot be combined",
        ),
        (
            _header(expect_start_error="boom", steps=[{"wait": 0}]),
            "steps: a node expected to fail at start runs no steps",
        ),
        ({"name": "t", "steps": [{"wait": 0}]}, "issue: Field required; description: Field required"),
        (["a", "list"], "expected a mapping at the top level of the scenario file, found list"),
        (None, "x.yaml: scenario file is empty"),
        (_header(node={"flags": {"migStrategy": "mixed"}}, steps=[{"wait": 0}]), "node.flags: unknown plugin flag(s)"),
    ],
)
def test_schema_errors_are_one_line_naming_the_field(data, message):
    with pytest.raises(SpecError) as info:
        parse_scenario(data, "x.yaml")
    text = str(info.value)
    assert text.startswith("x.yaml: ") and "\n" not in text
    assert message in text, text


DEVICE_PLUGIN_RPCS = "GetDevicePluginOptions, ListAndWatch, GetPreferredAllocation, Allocate, PreStartContainer"


@pytest.mark.parametrize("rpc", ["NodePrepareResources", "NodeUnprepareResources"])
def test_a_dra_fault_in_a_device_plugin_scenario_is_refused(rpc: str):
    """Regression: such a fault can never fire (the device plugin never serves that RPC), yet the scenario
    used to PASS. The error names the file, the step and the RPCs the device plugin serves."""
    data = _header(steps=[{"wait": 0}, {"fault": {"rpc": rpc, "code": "UNAVAILABLE"}}])
    with pytest.raises(SpecError) as info:
        parse_scenario(data, "x.yaml")
    assert str(info.value) == (
        f"x.yaml: steps[1].fault.rpc: {rpc!r} is an RPC of the DRA driver, not of the device plugin this scenario "
        f"drives; expected one of: {DEVICE_PLUGIN_RPCS}"
    )


def test_fault_steps_are_checked_against_the_face_the_scenario_drives():
    dra = parse_scenario(_header(steps=[{"fault": {"rpc": "NodePrepareResources", "delay": 1}}]), "x.yaml", DRA_FAULTS)
    assert isinstance(dra.steps[0], FaultStep)
    with pytest.raises(
        SpecError, match=r"^x\.yaml: steps\[0\]\.fault\.rpc: 'Allocate' is an RPC of the device plugin, "
    ):
        parse_scenario(_header(steps=[{"fault": {"rpc": "Allocate", "delay": 1}}]), "x.yaml", DRA_FAULTS)
    with pytest.raises(SpecError, match=r"unknown RPC 'Teleport'; expected one of: NodePrepareResources, "):
        parse_scenario(_header(steps=[{"fault": {"rpc": "Teleport", "delay": 1}}]), "x.yaml", DRA_FAULTS)
    unchecked = parse_scenario(_header(steps=[{"fault": {"rpc": "Allocate", "delay": 1}}]), "x.yaml", None)
    assert isinstance(unchecked.steps[0], FaultStep), "a live daemon's face is checked once it answers"
