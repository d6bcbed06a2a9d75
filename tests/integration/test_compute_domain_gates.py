"""The ComputeDomain feature gates through the real compute-domain plugin, its emulated IMEX daemon and the
real controller, against the tests' API server with NVIDIA's CRDs.

Upstream followed (kubernetes-sigs/dra-driver-nvidia-gpu): ``pkg/featuregates/featuregates.go`` (stages and
defaults) at commit 0807eed; ``cmd/compute-domain-daemon/controller.go``, ``cdstatus.go``, ``main.go`` and
``dnsnames.go`` (which object the daemon writes, its nodes config) at commit 3fe9487 / 0807eed;
``cmd/compute-domain-kubelet-plugin/computedomain.go`` (``isCurrentNodeReady``, the ``nvidia.com/gpu.clique``
label, the clique refresh) at commit 024a2c1 and ``main.go`` (``--gpu-clique-label-enabled``) at 89aa5bb;
``cmd/compute-domain-controller/cdstatus.go`` at 3fe9487.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cli import daemon_runs
from fakegpu.cli.main import main
from fakegpu.dra.compute_domain.controller import ComputeDomainController
from fakegpu.dra.compute_domain.kubelet_plugin import ComputeDomainSettings
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates, validate_feature_gates
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from tests.apiserver import FakeApiServer
from tests.claim_builders import channel_claim, compute_domain
from tests.dra_kubelet_client import prepare
from tests.eventually import eventually
from tests.integration.compute_domain_drivers import ComputeDomainDrivers, serve_node, socket_of

NODE = "node-a"
DRIVER_NS = "nvidia-dra-driver-gpu"
CLUSTER = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"
CLIQUE = f"{CLUSTER}.3"
GPU_CLIQUE_LABEL = "nvidia.com/gpu.clique"
NOT_READY_ERROR = "current node not ready in ComputeDomain"


def fabric_node(clique_id: int = 3) -> str:
    return f"version: v1\nfabric: {{clusterUUID: {CLUSTER}, cliqueID: {clique_id}, imexChannels: 4}}\n" + (
        "gpus: [{model: b200, count: 4}]\n"
    )


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    yield from serve_node()


@pytest.fixture
async def make_driver(root: Path, apiserver: FakeApiServer) -> AsyncIterator[Callable[..., Any]]:
    drivers = ComputeDomainDrivers(root, apiserver)

    async def make(gates: str = "", node_spec: str | None = None, **cd: Any) -> DraDriver:
        return await drivers.start(node_spec or fabric_node(), gates, start_delay=0.2, **cd)

    yield make
    await drivers.stop_all()


@contextlib.asynccontextmanager
async def controller(apiserver: FakeApiServer, *, cliques: bool) -> AsyncIterator[ComputeDomainController]:
    kube = apiserver.client()
    ctl = ComputeDomainController(kube, DRIVER_NS, status_interval=0.1, cliques=cliques)
    await ctl.start()
    try:
        yield ctl
    finally:
        await ctl.stop()
        await kube.close()


def written(path: Path) -> str:
    assert path.exists(), f"{path} not written yet"
    return path.read_text()


def domain_dir(root: Path, uid: str) -> Path:
    return root / "kubelet" / "plugins" / "compute-domain.nvidia.com" / "domains" / uid


def create_domain(apiserver: FakeApiServer, num_nodes: int = 0) -> str:
    body = compute_domain("cd")
    body["spec"]["numNodes"] = num_nodes
    return str(apiserver.create_direct(body)["metadata"]["uid"])


def create_claim(apiserver: FakeApiServer, domain: str) -> tuple[str, str, str]:
    meta = apiserver.create_direct(channel_claim("wl", NODE, domain))["metadata"]
    return meta["namespace"], meta["name"], meta["uid"]


async def prepare_until_ready(socket: Path, claim: tuple[str, str, str]) -> Any:
    async def attempt() -> Any:
        answer = (await prepare(socket, [claim])).claims[claim[2]]
        assert NOT_READY_ERROR not in answer.error
        return answer

    return await eventually(attempt, "the channel claim prepared once the node's daemon is Ready", 15.0)


def node_labels(apiserver: FakeApiServer) -> dict[str, str]:
    return dict((apiserver.get_object("nodes", NODE) or {})["metadata"].get("labels") or {})


def domain_status(apiserver: FakeApiServer) -> dict[str, Any]:
    return dict((apiserver.get_object("computedomains", "cd", "default") or {}).get("status") or {})


def ready_status(apiserver: FakeApiServer) -> dict[str, Any]:
    status = domain_status(apiserver)
    assert status.get("status") == "Ready", status
    return status


# --- ComputeDomainCliques ------------------------------------------------------------------------------------


async def test_cliques_on_by_default_the_daemon_writes_its_clique_and_the_controller_folds_it(apiserver, make_driver):
    """Default (beta, on): the daemon's entry lives in the ComputeDomainClique ``<uid>.<clique>``; the controller
    (``cdstatus.go``) copies it into ``status.nodes``. Follows featuregates.go @ 0807eed and
    cmd/compute-domain-daemon/controller.go @ 3fe9487."""
    assert FeatureGates().enabled("ComputeDomainCliques")
    driver = await make_driver()
    domain = create_domain(apiserver, num_nodes=1)
    async with controller(apiserver, cliques=True):
        answer = await prepare_until_ready(socket_of(driver), create_claim(apiserver, domain))
        assert answer.error == ""
        clique = apiserver.get_object("computedomaincliques", f"{domain}.{CLIQUE}", DRIVER_NS)
        assert clique is not None and clique["daemons"][0]["nodeName"] == NODE
        status = await eventually(
            lambda: ready_status(apiserver),
            "the controller folding the clique into a Ready status",
        )
        assert [(n["name"], n["cliqueID"], n["index"]) for n in status["nodes"]] == [(NODE, CLIQUE, 0)]


async def test_cliques_off_the_daemon_writes_status_nodes_and_no_clique_object(apiserver, make_driver):
    """ComputeDomainCliques=false: the daemon inserts itself into the domain's ``status.nodes`` (its clique
    ID, the lowest free index of its clique, NotReady then Ready), no ComputeDomainClique is made, the plugin
    reads readiness from the status and the controller reads no cliques. Follows
    cmd/compute-domain-daemon/cdstatus.go (syncNodeInfoToCD, getNextAvailableIndex) @ 3fe9487 and
    cmd/compute-domain-kubelet-plugin/computedomain.go (isCurrentNodeReady) @ 024a2c1."""
    gates = "ComputeDomainCliques=false"
    driver = await make_driver(gates)
    domain = create_domain(apiserver, num_nodes=1)
    async with controller(apiserver, cliques=False):
        answer = await prepare_until_ready(socket_of(driver), create_claim(apiserver, domain))
        assert answer.error == ""
        assert apiserver.objects("computedomaincliques") == []
        status = await eventually(
            lambda: ready_status(apiserver),
            "the controller computing Ready from the daemons' own status entries",
        )
    assert status["nodes"] == [
        {"name": NODE, "ipAddress": "127.0.0.1", "cliqueID": CLIQUE, "index": 0, "status": "Ready"}
    ]


# --- IMEXDaemonsWithDNSNames ---------------------------------------------------------------------------------


async def test_dns_names_on_static_nodes_config_and_hosts_lines(apiserver, make_driver, root):
    """Default (beta, on): ``nodes.cfg`` lists ``compute-domain-daemon-0000`` .. ``-0017`` whoever joined, and the
    hosts lines map the clique's members by index to their IPs. Follows cmd/compute-domain-daemon/dnsnames.go
    (dnsNameFormat %04d, WriteNodesConfig, updateHostsFile) @ 3fe9487 and main.go @ 0807eed."""
    driver = await make_driver()
    domain = create_domain(apiserver)
    await prepare_until_ready(socket_of(driver), create_claim(apiserver, domain))
    directory = domain_dir(root, domain)
    nodes = await eventually(lambda: written(directory / "nodes.cfg"), "the daemon's nodes.cfg")
    assert nodes.splitlines() == [f"compute-domain-daemon-{i:04d}" for i in range(18)]
    hosts = (directory / "hosts").read_text().splitlines()
    assert hosts == ["# Compute Domain Daemon mappings", "127.0.0.1\tcompute-domain-daemon-0000"]


async def test_dns_names_off_nodes_config_lists_ips_once_all_nodes_joined(apiserver, make_driver, root):
    """IMEXDaemonsWithDNSNames=false (so ComputeDomainCliques=false, which requires it): ``nodes.cfg`` holds the
    clique's daemon IPs, written only once ``numNodes`` daemons joined; no hosts lines. Follows
    cmd/compute-domain-daemon/main.go (writeDaemonsConfig, IMEXDaemonUpdateLoopWithIPs) and cdstatus.go
    (maybePushNodesUpdate) @ 3fe9487."""
    driver = await make_driver("IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false")
    domain = create_domain(apiserver, num_nodes=1)
    await prepare_until_ready(socket_of(driver), create_claim(apiserver, domain))
    directory = domain_dir(root, domain)
    nodes = await eventually(lambda: written(directory / "nodes.cfg"), "the daemon's nodes.cfg")
    assert nodes == "127.0.0.1\n"
    assert not (directory / "hosts").exists()


async def test_cliques_without_dns_names_is_refused_at_start(apiserver, make_driver):
    """``ValidateFeatureGates``: ComputeDomainCliques requires IMEXDaemonsWithDNSNames (featuregates.go @ 0807eed)."""
    with pytest.raises(ValueError, match="feature gate ComputeDomainCliques requires IMEXDaemonsWithDNSNames"):
        validate_feature_gates(parse_feature_gates("IMEXDaemonsWithDNSNames=false"))


# --- nvidia.com/gpu.clique and clique changes ----------------------------------------------------------------


async def test_gpu_clique_label_is_set_refreshed_after_a_repartition_and_removed_on_stop(apiserver, make_driver, root):
    """``--gpu-clique-label-enabled``: the plugin merge-patches ``nvidia.com/gpu.clique=<clusterUUID>.<cliqueID>``
    at start, re-reads the clique every refresh (a FabricManager repartition gives another clique ID: here the
    node spec is reloaded with cliqueID 5) and removes the label when it stops. Follows
    cmd/compute-domain-kubelet-plugin/computedomain.go (SetGPUCliqueLabel, refreshGPUCliqueID,
    RemoveGPUCliqueLabel) @ 024a2c1, main.go @ 89aa5bb."""
    driver = await make_driver(gpu_clique_label=True, clique_refresh_interval=0.1)
    assert node_labels(apiserver)[GPU_CLIQUE_LABEL] == CLIQUE
    spec = root / "repartitioned.yaml"
    spec.write_text(fabric_node(clique_id=5))
    driver.live.replace(load_inventory(InventoryInputs(node_name=NODE, node_spec=str(spec))))
    await eventually(
        lambda: node_labels(apiserver).get(GPU_CLIQUE_LABEL) == f"{CLUSTER}.5" or None,
        "the label following the node's new clique",
    )
    assert driver.compute_domains is not None
    assert driver.compute_domains.clique.value == f"{CLUSTER}.5"
    await driver.stop()
    assert GPU_CLIQUE_LABEL not in node_labels(apiserver)


async def test_gpu_clique_label_is_off_by_default_and_a_new_clique_is_still_picked_up(apiserver, make_driver, root):
    """Without the flag (NVIDIA's default) the plugin writes no label; the refresh still moves new claims to
    the new clique: the daemon joining afterwards writes the clique object of the new ID. Follows
    computedomain.go (refreshGPUCliqueID, isCurrentNodeReadyInClique) @ 024a2c1."""
    driver = await make_driver(clique_refresh_interval=0.1)
    assert GPU_CLIQUE_LABEL not in node_labels(apiserver)
    spec = root / "repartitioned.yaml"
    spec.write_text(fabric_node(clique_id=5))
    driver.live.replace(load_inventory(InventoryInputs(node_name=NODE, node_spec=str(spec))))
    assert driver.compute_domains is not None
    plugin = driver.compute_domains
    await eventually(lambda: plugin.clique.value == f"{CLUSTER}.5" or None, "the refreshed clique ID")
    domain = create_domain(apiserver)
    await prepare_until_ready(socket_of(driver), create_claim(apiserver, domain))
    assert apiserver.get_object("computedomaincliques", f"{domain}.{CLUSTER}.5", DRIVER_NS) is not None
    assert apiserver.get_object("computedomaincliques", f"{domain}.{CLIQUE}", DRIVER_NS) is None
    assert GPU_CLIQUE_LABEL not in node_labels(apiserver)


def test_settings_default_to_nvidias():
    """``--gpu-clique-label-enabled`` defaults to false and the refresh to 10 minutes (main.go @ 89aa5bb,
    computedomain.go @ 024a2c1)."""
    settings = ComputeDomainSettings()
    assert (settings.gpu_clique_label, settings.clique_refresh_interval) == (False, 600.0)
    assert dataclasses.replace(settings, gpu_clique_label=True).gpu_clique_label


def test_dra_compute_domain_flags_reach_the_plugin_settings(monkeypatch, root):
    """NVIDIA's kubelet-plugin flags (main.go @ 89aa5bb): --gpu-clique-label-enabled, --imex-mode,
    --imex-isolation, --imex-host-socket-path."""
    seen: list[DraSettings] = []

    def fake_daemon(inputs: Any, paths: Any, settings: DraSettings, **_: Any) -> Any:
        seen.append(settings)

    monkeypatch.setattr(daemon_runs, "run_dra_daemon", fake_daemon)
    monkeypatch.setattr(daemon_runs, "run_bounded", lambda _coroutine: 0)
    argv = ["dra", "--node-name", NODE, "--compute-domains", "--gpu-clique-label-enabled", "--imex-mode"]
    argv += ["hostManaged", "--imex-host-socket-path", str(root / "imex.sock"), "--no-host-imex-daemon"]
    argv += ["--feature-gates", "HostManagedIMEXDaemon=true"]
    assert main(argv) == 0
    (settings,) = [s.compute_domains for s in seen]
    assert settings is not None
    assert (settings.gpu_clique_label, settings.imex_mode, settings.imex_isolation) == (True, "hostManaged", "domain")
    assert (settings.imex_host_socket, settings.serve_host_imex) == (root / "imex.sock", False)
