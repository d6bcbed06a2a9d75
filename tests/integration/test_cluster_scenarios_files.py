"""The cluster scenario files: the catalog's parse and are documented, a bad file is one line naming the file,
the step and the field (exit 2) before anything is sent, and ``scenario list``/``run`` tell the two kinds apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fakegpu.cli.cluster_scenario import REFUSED_FLEET_FLAGS, check_cluster_scenario, plan_fleet
from fakegpu.cli.main import main
from fakegpu.control.client import EXIT_NO_DAEMON
from fakegpu.testing.scenario.cluster_model import (
    CLUSTER_STEP_KINDS,
    NodeFaultStep,
    is_cluster_data,
    load_cluster_scenario,
    read_scenario_data,
)
from fakegpu.testing.scenario.output import EXIT_BAD_FILE, EXIT_FAIL
from tests.apiserver import FakeApiServer

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
CLUSTER_FILES = [p for p in sorted(SCENARIOS.glob("*.yaml")) if is_cluster_data(read_scenario_data(p))]
ISSUE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#\d+$")
HEADER = "name: t\nissue: a/b#1\ndescription: d\ncluster: {namespace: t}\n"


def test_the_catalog_has_the_four_fault_rehearsals():
    assert {p.stem for p in CLUSTER_FILES} >= {"gpu-lost-under-dra-pod", "ecc-on-time-sliced-gpu"}


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.stem)
def test_cluster_file_parses_is_checked_and_documented(path: Path):
    scenario = load_cluster_scenario(path)
    check_cluster_scenario(scenario)
    assert scenario.name == path.stem
    assert ISSUE.match(scenario.issue)
    assert len(scenario.description.split()) >= 15
    assert scenario.cluster.needs, "say what the cluster must run"
    readme = (SCENARIOS / "README.md").read_text()
    assert path.name in readme


def test_every_cluster_step_kind_is_documented():
    readme = (SCENARIOS / "README.md").read_text()
    assert [k for k in CLUSTER_STEP_KINDS if f"`{k}`" not in readme] == []


BAD = [
    ("steps:\n  - allocate: {pod: p}\n", "steps[0]: unknown step kind 'allocate' in a cluster scenario"),
    ("steps:\n  - node_fault: {gpu: 0, kind: melted}\n", "steps[0].node_fault.kind: Input should be"),
    ("steps:\n  - node_fault: {gpu: 0, kind: thermal, count: 3}\n", "count does not apply to a thermal fault"),
    ("steps:\n  - node_fault: {kind: gpu-lost}\n", "steps[0].node_fault: give exactly one of gpu"),
    ("steps:\n  - expect: {within: 5}\n", "steps[0].expect: give at least one of pod_health"),
    (
        "steps:\n  - expect: {pod_health: {pod: p, resource: r, health: Sick}}\n",
        "steps[0].expect.pod_health.health: Input should be 'Healthy', 'Unhealthy' or 'Unknown'",
    ),
    ("steps:\n  - apply: 'kind: Secret'\n", "steps[0].apply: document 1: kind 'Secret' cannot be applied"),
    ("steps:\n  - virtual_nodes: --count 2 --nope\n", "steps[0].virtual_nodes: unrecognized arguments: --nope"),
    ("steps:\n  - virtual_nodes: --count 0\n", "steps[0].virtual_nodes: --count: must be from 1 to"),
    ("steps:\n  - virtual_nodes: --count 2 --delete\n", "steps[0].virtual_nodes: --delete cannot be given"),
    (
        "steps:\n  - fleet_fault: {fault: xid xid=79, nodes: [a]}\n",
        "steps[0].fleet_fault: comes before any virtual_nodes step",
    ),
    (
        "steps:\n  - virtual_nodes: --count 2\n  - fleet_fault: {fault: xid xid=79, fraction: 1.5}\n",
        "steps[1].fleet_fault.fraction: Input should be less than or equal to 1",
    ),
    (
        "steps:\n  - virtual_nodes: --count 2\n  - fleet_fault: {fault: gpu-lost, fraction: 0.5, gpus: [0]}\n",
        "steps[1].fleet_fault.gpus: cannot be combined with --fault-fraction",
    ),
    (
        "steps:\n  - virtual_nodes: --count 2 --gpus 2xh100-80gb\n  - fleet_fault: {fault: gpu-lost, nodes: [x]}\n",
        "steps[1].fleet_fault.nodes: no virtual node 'x' in this fleet",
    ),
    (
        "steps:\n  - virtual_nodes: --count 2\n  - fleet_recover: {gpus: [0]}\n",
        "steps[1].fleet_recover: gpus narrows a target",
    ),
    (
        "steps:\n  - virtual_nodes: --count 2\n  - fleet_fault: {fault: boiling, fraction: 0.5}\n",
        "steps[1].fleet_fault.fault: fault: unknown fault kind 'boiling'",
    ),
    (
        "steps:\n  - virtual_nodes: --count 2\n  - fleet_fault: {fault: gpu-lost, nodes: [a], fraction: 0.5}\n",
        "steps[1].fleet_fault: give exactly one of nodes, pod, racks, cliques, fraction",
    ),
]


@pytest.mark.parametrize(("body", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_cluster_file_is_one_line_naming_file_step_and_field(tmp_path, capsys, body, message):
    """Refused before the kubeconfig is read (this one does not exist): nothing is sent anywhere."""
    path = tmp_path / "bad.yaml"
    path.write_text(HEADER + body)
    assert main(["scenario", "run", "--kubeconfig", str(tmp_path / "none"), str(path)]) == EXIT_BAD_FILE
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"fakegpu: error: {path}: "), line
    assert message in line, line


def test_list_shows_the_cluster_scenarios_with_their_steps(capsys):
    assert main(["scenario", "list", *map(str, CLUSTER_FILES)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == [str(p) for p in CLUSTER_FILES]
    for line, path in zip(out, CLUSTER_FILES, strict=True):
        n = len(load_cluster_scenario(path).steps)
        assert f" {n} steps (cluster) " in line


def test_a_directory_run_without_kubeconfig_skips_its_cluster_files(tmp_path, capsys):
    node_steps = "steps:\n  - expect: {capacity: {nvidia.com/gpu: 1}}\n"
    node_header = "name: a-node\nissue: a/b#1\ndescription: d\nnode: {gpus: 1xl4}\n"
    (tmp_path / "a-node.yaml").write_text(node_header + node_steps)
    cluster = tmp_path / "b-cluster.yaml"
    cluster.write_text(HEADER + "steps:\n  - wait: 0\n")
    assert main(["scenario", "run", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"skipped {cluster}: a cluster scenario" in out
    assert "PASS a-node" in out


def test_an_api_server_that_is_gone_fails_the_step_in_one_line(tmp_path, capsys):
    """No traceback: the step fails naming the error and the server it went to, exit 1."""
    server = FakeApiServer().start()
    kubeconfig = server.kubeconfig(tmp_path / "kc.yaml")
    url = server.url
    server.stop()
    path = tmp_path / "gone.yaml"
    path.write_text(HEADER + "steps:\n  - apply: '{apiVersion: v1, kind: Pod, metadata: {name: p}}'\n")
    assert main(["scenario", "run", "--kubeconfig", str(kubeconfig), str(path)]) == EXIT_FAIL
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[-3].split()[:2] == ["0", "apply"] and lines[-3].endswith("FAIL")
    assert lines[-2].strip().startswith("the API server failed: ")
    assert f"API server {url}" in lines[-2]


def test_the_readme_names_exactly_the_virtual_nodes_options_a_step_refuses():
    """scenarios/README.md's ``virtual_nodes`` row lists the options ``REFUSED_FLEET_FLAGS`` refuses, and no
    other: ``--watch`` is taken (fabric-error-compute-domain-not-ready.yaml needs it for the IMEX daemons)."""
    (row,) = [x for x in (SCENARIOS / "README.md").read_text().splitlines() if x.startswith("| `virtual_nodes` |")]
    refused = row.split("refused: ", 1)[1].split(";", 1)[0]
    assert set(re.findall(r"`(--[a-z-]+)`", refused)) == set(REFUSED_FLEET_FLAGS)
    assert "`--watch` keeps the fleet" in row
    plan_fleet("--count 2 --watch", "t.yaml", "steps[0].virtual_nodes")


def test_no_daemon_on_the_admin_socket_shows_the_failing_step_then_exits_3(tmp_path, capsys):
    """Exit 3 as ``fakegpu ctl`` has it, after the step line (FAIL) and its one-line reason on stdout."""
    server = FakeApiServer().start()
    try:
        kubeconfig = server.kubeconfig(tmp_path / "kc.yaml")
        path = tmp_path / "nodaemon.yaml"
        socket = tmp_path / "none.sock"
        path.write_text(HEADER + f"steps:\n  - node_fault: {{gpu: 0, kind: gpu-lost, socket: {socket}}}\n")
        assert main(["scenario", "run", "--kubeconfig", str(kubeconfig), str(path)]) == EXIT_NO_DAEMON
    finally:
        server.stop()
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[-3].split()[:2] == ["0", "node_fault"] and lines[-3].endswith("FAIL"), out
    assert lines[-2].strip() == f"no fakegpu daemon is listening on {socket}"
    assert lines[-1].startswith("FAIL t after ")
    assert f"no fakegpu daemon is listening on {socket}" in err


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.stem)
def test_needs_says_how_to_clean_up_who_runs_it_and_names_shipped_files(path: Path):
    """A real cluster's caveats where a user reads them: every file says how to remove what it leaves
    (``--cleanup`` or the commands); one with a ``node_fault`` step says the runner runs as the daemon's user,
    since the admin socket is owner-only; a file it names (``*.yaml``) is in the checkout."""
    scenario = load_cluster_scenario(path)
    needs = " ".join(scenario.cluster.needs.split())
    assert "--cleanup" in needs
    if any(isinstance(step, NodeFaultStep) for step in scenario.steps):
        assert "as the daemon's user (root: the admin socket is owner-only)" in needs
    for name in re.findall(r"[\w./-]+\.yaml", needs):
        assert (ROOT / name).is_file(), f"{path.name} names {name}, which is not shipped"
