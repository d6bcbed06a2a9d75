"""Host-managed IMEX (``--imex-mode hostManaged``, gate HostManagedIMEXDaemon) through the real compute-domain
plugin, its emulated host nvidia-imex command socket and the real controller, against the tests' API server.

Follows kubernetes-sigs/dra-driver-nvidia-gpu (main, after v0.4.1): ``pkg/imex/imex.go`` (Validate),
``cmd/compute-domain-kubelet-plugin/device_state.go`` (applyComputeDomainChannelConfigHostManaged,
applyComputeDomainDaemonConfig, unprepareDevices) at commit 0807eed, ``nvlib.go`` (checkHostIMEXReady) at
6807cc7, ``driver.go`` (computeDomainPublishedDevices) at 2dc387e, ``main.go`` (--imex-host-socket-path) at
89aa5bb and ``cmd/compute-domain-controller/computedomain.go`` (onAddOrUpdateHostManaged,
calculateGlobalStatus) on main.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.compute_domain.controller import ComputeDomainController
from fakegpu.dra.daemon import DraDriver
from tests.apiserver import FakeApiServer
from tests.cdi_runtime import resolve
from tests.claim_builders import COMPUTE_DOMAIN_DRIVER, channel_claim, compute_domain, daemon_claim
from tests.dra_kubelet_client import prepare, unprepare
from tests.eventually import eventually
from tests.integration.compute_domain_drivers import ComputeDomainDrivers, serve_node, socket_of

NODE = "node-a"
DRIVER_NS = "nvidia-dra-driver-gpu"
CLUSTER = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"
GATE = "HostManagedIMEXDaemon=true"
FABRIC_NODE = f"version: v1\nfabric: {{clusterUUID: {CLUSTER}, cliqueID: 3}}\ngpus: [{{model: b200, count: 2}}]\n"
PLAIN_NODE = "version: v1\ngpus: [{model: h100-80gb, count: 2}]\n"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    yield from serve_node()


@pytest.fixture
async def make_driver(root: Path, apiserver: FakeApiServer) -> AsyncIterator[Callable[..., Any]]:
    drivers = ComputeDomainDrivers(root, apiserver)

    async def make(node_spec: str = FABRIC_NODE, gates: str = GATE, **cd: Any) -> DraDriver:
        return await drivers.start(node_spec, gates, imex_mode="hostManaged", imex_host_socket=root / "imex.sock", **cd)

    yield make
    await drivers.stop_all()


def setup_claim(apiserver: FakeApiServer, *, daemon: bool = False) -> Any:
    domain = str(apiserver.create_direct(compute_domain("cd"))["metadata"]["uid"])
    claim = daemon_claim("wl", NODE, domain, namespace="default") if daemon else channel_claim("wl", NODE, domain)
    meta = apiserver.create_direct(claim)["metadata"]
    return domain, (meta["namespace"], meta["name"], meta["uid"])


def node_labels(apiserver: FakeApiServer) -> dict[str, str]:
    return dict((apiserver.get_object("nodes", NODE) or {})["metadata"].get("labels") or {})


async def test_a_channel_claim_is_prepared_at_once_when_the_host_daemon_is_ready(root, apiserver, make_driver):
    """No daemon device is published, no node label set, no driver-managed daemon emulated (so no clique is ever
    written): the channel claim is prepared on the first call (the host daemon answers READY) with channel 0
    alone, and unprepared without touching the node."""
    driver = await make_driver()
    (published,) = [s for s in apiserver.objects("resourceslices") if s["spec"]["driver"] == COMPUTE_DOMAIN_DRIVER]
    assert [d["name"] for d in published["spec"]["devices"]] == ["channel-0"]
    _, claim = setup_claim(apiserver)
    answer = (await prepare(socket_of(driver), [claim])).claims[claim[2]]
    assert answer.error == ""
    (device,) = answer.devices
    assert resolve(root / "cdi", list(device.cdi_device_ids)).node_paths == ["/dev/nvidia-caps-imex-channels/channel0"]
    assert "resource.nvidia.com/computeDomain" not in node_labels(apiserver)
    assert driver.compute_domains is not None
    assert not driver.compute_domains.daemon.running, "host-managed: the host's daemon, none of the driver's"
    assert (await unprepare(socket_of(driver), [claim])).claims[claim[2]].error == ""


async def test_a_host_daemon_that_is_not_ready_fails_the_claim_until_it_is(apiserver, make_driver):
    """The emulated host daemon answers UNAVAILABLE while a GPU is unhealthy; the plugin's check looks for READY."""
    driver = await make_driver()
    _, claim = setup_claim(apiserver)
    driver.live.inject_xid("0", 79)
    failed = (await prepare(socket_of(driver), [claim])).claims[claim[2]]
    assert failed.error == (
        f"error preparing devices for claim 'default/wl:{claim[2]}': prepare devices failed: error applying config: "
        "host nvidia-imex daemon readiness check failed: host nvidia-imex daemon not ready: UNAVAILABLE\n"
    )
    driver.live.set_health("0", True)

    async def ready() -> None:
        assert (await prepare(socket_of(driver), [claim])).claims[claim[2]].error == ""

    await eventually(ready, "the claim prepared once the host daemon answers READY")


async def test_no_host_daemon_on_the_socket_fails_as_the_command_would(root, apiserver, make_driver):
    driver = await make_driver(serve_host_imex=False)
    _, claim = setup_claim(apiserver)
    failed = (await prepare(socket_of(driver), [claim])).claims[claim[2]]
    assert (
        f'host nvidia-imex daemon readiness check failed: error running nvidia-imex-ctl (socket "{root}/imex.sock"): '
        "exit status 1, output: " in failed.error
    )


async def test_a_node_without_a_clique_gets_its_claim_without_asking_the_host_daemon(apiserver, make_driver):
    driver = await make_driver(PLAIN_NODE, serve_host_imex=False)
    _, claim = setup_claim(apiserver)
    answer = (await prepare(socket_of(driver), [claim])).claims[claim[2]]
    assert answer.error == "" and [list(d.cdi_device_ids) for d in answer.devices] == [[]]


async def test_daemon_claims_are_refused(apiserver, make_driver):
    driver = await make_driver()
    _, claim = setup_claim(apiserver, daemon=True)
    failed = (await prepare(socket_of(driver), [claim])).claims[claim[2]]
    assert failed.error.endswith("ComputeDomain daemon claims are not supported when imex.mode=hostManaged")


async def test_the_mode_needs_its_gate_and_channel_isolation_is_refused(make_driver):
    with pytest.raises(ValueError) as raised:
        await make_driver(gates="")
    assert str(raised.value) == (
        'imex configuration validation failed: imex.mode="hostManaged" requires the HostManagedIMEXDaemon feature '
        "gate to be enabled"
    )
    with pytest.raises(ValueError, match=r'imex\.isolation="channel" is not supported yet'):
        await make_driver(imex_isolation="channel")


@contextlib.asynccontextmanager
async def host_managed_controller(apiserver: FakeApiServer) -> AsyncIterator[ComputeDomainController]:
    kube = apiserver.client()
    ctl = ComputeDomainController(kube, DRIVER_NS, status_interval=0.1, host_managed=True)
    await ctl.start()
    try:
        yield ctl
    finally:
        await ctl.stop()
        await kube.close()


async def test_the_controller_makes_only_the_workload_template_and_reports_ready(apiserver):
    """Under host-managed IMEX, Ready means the domain was admitted and its workload template exists: no daemon
    template, whatever ``numNodes`` says."""
    body = compute_domain("cd")
    body["spec"]["numNodes"] = 4
    uid = apiserver.create_direct(body)["metadata"]["uid"]
    async with host_managed_controller(apiserver):
        await eventually(
            lambda: (
                ((apiserver.get_object("computedomains", "cd", "default") or {}).get("status") or {}).get("status")
                == "Ready"
                or None
            ),
            "the host-managed domain Ready",
        )
    assert apiserver.get_object("resourceclaimtemplates", "imex-channel-0", "default") is not None
    assert apiserver.get_object("resourceclaimtemplates", f"computedomain-daemon-{uid}", DRIVER_NS) is None
