"""``fakegpu virtual-nodes``' cost estimate against the tests' API server: printed on every bring-up and
``--dry-run``, made without the server, refusing a plan above ``--max-server-memory``, and true to the bytes
the bring-up then sends (the server counts each request's body)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from fakegpu.cli.main import main as cli_main
from fakegpu.cli.virtual_nodes_command import (
    pools_from_args,
    run_virtual_nodes,
    settings_from_args,
)
from fakegpu.virtual_nodes.cost_estimate import FleetCost, estimate_options, fleet_cost, parse_limit, size
from fakegpu.virtual_nodes.pools import build_virtual_nodes
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.integration.virtual_nodes_harness import parse, strict_apiserver

SENT_KINDS = ("nodes", "resourceslices", "deviceclasses")
"""What a bring-up creates: the objects the estimate counts."""
PLANS = {
    "dynamic MIG": ("--count", "3", "--gpus", "8xh100-80gb", "--gpu-mode", "dra", "--mig-mode", "dynamic"),
    "static MIG, dra": ("--count", "4", "--gpus", "8xh100-80gb", "--gpu-mode", "dra"),
    "device plugin": ("--count", "5", "--gpus", "4xa100-40gb"),
    "NVL72 racks": ("--gpus", "4xgb200", "--racks", "2", "--nodes-per-rack", "3", "--gpu-mode", "dra"),
    "dra-extended": ("--count", "2", "--gpus", "2xh100-80gb", "--gpu-mode", "dra-extended"),
}


def planned_cost(*argv: str) -> FleetCost:
    """The estimate of a plan, worked out here from the command line as the command does."""
    args = parse(*argv)
    settings = settings_from_args(args)
    nodes, _ = build_virtual_nodes(pools_from_args(args), settings.name_prefix, None)
    options = estimate_options(settings.driver, settings.mig_mode, settings.server_minor, settings.api_version)
    return fleet_cost(nodes, settings.shape, options)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    yield from strict_apiserver()


async def run(server: FakeApiServer, *argv: str) -> tuple[int, str, str]:
    client = server.client()
    out, err = io.StringIO(), io.StringIO()
    try:
        code = await run_virtual_nodes(parse(*argv), client=client, out=out, err=err, retry_pause=0.01)
    finally:
        await client.close()
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("plan", list(PLANS), ids=list(PLANS))
async def test_the_estimate_is_printed_and_within_ten_percent_of_the_bytes_sent(server, plan):
    argv = (*PLANS[plan], "--no-timestamp", "--max-server-memory", "0")
    code, out, err = await run(server, *argv)
    assert code == 0, err
    cost = planned_cost(*argv)
    lines = out.splitlines()
    estimate = cost.lines(0)
    assert lines[lines.index(estimate[0]) + 1] == estimate[1], out
    assert lines.index(estimate[0]) < min(i for i, line in enumerate(lines) if line.startswith("Kubernetes 1.")), (
        "the estimate comes before the server is asked"
    )
    sent = sum(server.body_bytes[("create", kind)] for kind in SENT_KINDS)
    written = sum(n for (verb, _), n in server.body_bytes.items() if verb in ("update", "patch"))
    assert written == 0, "a fresh bring-up only creates"
    assert abs(cost.total_bytes - sent) <= sent / 10, f"estimated {cost.total_bytes} bytes, sent {sent}"


async def test_a_dry_run_prints_the_plan_and_the_estimate_and_asks_the_server_nothing(server):
    argv = (*PLANS["dynamic MIG"], "--dry-run", "--no-timestamp")
    code, out, err = await run(server, *argv)
    assert code == 0, err
    assert out.splitlines() == [
        "pool default: 3 node(s) fakegpu-virtual-0000..fakegpu-virtual-0002, 8xh100-80gb (ResourceSlices, no GPU "
        "capacity), dra",
        *planned_cost(*argv).lines(parse_limit("4Gi")),
    ]
    assert server.requests == [] and server.discovery_requests == 0
    assert server.objects("nodes") == []


def test_a_dry_run_needs_no_api_server(tmp_path, capsys):
    missing = tmp_path / "no-such-kubeconfig"
    assert cli_main(["virtual-nodes", "--count", "2", "--dry-run", "--kubeconfig", str(missing)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "estimate: the API server's memory grows by about" in captured.out


def test_a_plan_over_the_limit_exits_2_with_one_line_and_writes_nothing(server, tmp_path, capsys):
    config = server.kubeconfig(tmp_path / "kubeconfig")
    plan = (*PLANS["dynamic MIG"], "--no-timestamp")
    assert cli_main(["virtual-nodes", "--kubeconfig", str(config), *plan, "--max-server-memory", "10Mi"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    cost = planned_cost(*plan)
    assert line == (
        f"fakegpu: error: --max-server-memory: the plan would add about {size(cost.server_memory)} to the API "
        f"server's memory (3 node(s), {size(cost.total_bytes)} of objects, nodes that exist already counted "
        "too), above the limit of 10.0 MiB; raise the limit, or give --max-server-memory 0 to go ahead anyway"
    )
    assert server.requests == [] and server.discovery_requests == 0


def test_max_server_memory_0_goes_ahead_with_the_same_plan(server, tmp_path, capsys):
    config = server.kubeconfig(tmp_path / "kubeconfig")
    argv = ["virtual-nodes", "--kubeconfig", str(config), *PLANS["static MIG, dra"]]
    assert cli_main([*argv, "--max-server-memory", "1Ki"]) == 2
    assert server.objects("nodes") == []
    assert cli_main([*argv, "--max-server-memory", "0"]) == 0, capsys.readouterr().err
    assert len(server.objects("nodes")) == 4
    assert "no limit (--max-server-memory)" in capsys.readouterr().out


def test_the_default_limit_refuses_a_dry_run_of_the_fleet_that_filled_a_real_server(capsys):
    """1000 dynamic-MIG 8x H100 nodes took a real API server to 24 GiB; 300 fit under the default."""
    fleet = ["virtual-nodes", "--gpus", "8xh100-80gb", "--gpu-mode", "dra", "--mig-mode", "dynamic", "--dry-run"]
    assert cli_main([*fleet, "--count", "1000"]) == 2
    assert "--max-server-memory" in capsys.readouterr().err
    assert cli_main([*fleet, "--count", "300"]) == 0
