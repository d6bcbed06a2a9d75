"""NVLink fabric errors and the gate CrashOnNVLinkFabricErrors, through the real compute-domain plugin.

Fabric errors are injected as NVML reports them, per node: ``fabric.state`` (the registration state) and
``fabric.status`` (its result) in the node spec. Follows kubernetes-sigs/dra-driver-nvidia-gpu
``cmd/compute-domain-kubelet-plugin/nvlib.go`` (getCliqueIDStrict / getCliqueIDLegacy and the single-node
exception) at commit 6807cc7, ``computedomain.go`` (NewComputeDomainManager) at 024a2c1 and ``main.go``
(``Error: ...``, exit 1) at 89aa5bb; v0.4.0's nvlib.go has the same texts without the exception.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cli.main import main
from fakegpu.dra.compute_domain.fabric_clique import FabricError, FabricGates, node_clique_id
from fakegpu.dra.compute_domain.kubelet_plugin import ComputeDomainSettings
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import FakeApiServer, serving
from tests.claim_builders import channel_claim, compute_domain
from tests.dra_kubelet_client import prepare
from tests.eventually import eventually

NODE = "node-a"
CLUSTER = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"


def spec(root: Path, **fabric: Any) -> Path:
    extra = "".join(f", {k}: {v}" for k, v in fabric.items())
    path = root / "node.yaml"
    path.write_text(
        f"version: v1\nfabric: {{clusterUUID: {CLUSTER}, cliqueID: 3{extra}}}\ngpus: [{{model: b200, count: 2}}]\n"
    )
    return path


def live(path: Path) -> LiveInventory:
    return LiveInventory(load_inventory(InventoryInputs(node_name=NODE, node_spec=str(path))))


def first_gpu(inv: LiveInventory) -> str:
    return inv.inventory.node.gpus[0].uuid


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE, nvidia_crds=True) as server:
        yield server


def driver(root: Path, apiserver: FakeApiServer, inv: LiveInventory, gates: str = "") -> DraDriver:
    settings = DraSettings(
        cdi_root=root / "cdi",
        feature_gates=parse_feature_gates(gates),
        compute_domains=ComputeDomainSettings(namespace="fakegpu", start_delay=0.1),
    )
    return DraDriver(inv, KubeletPaths(root / "kubelet"), settings, apiserver.client)


def test_a_pending_registration_stops_the_plugin_with_nvidias_text(root, apiserver):
    """Gate on (beta default): a GPU whose fabric registration is in progress (state 2) refuses to start."""
    inv = live(spec(root, state="in-progress"))
    with pytest.raises(FabricError) as raised:
        driver(root, apiserver, inv)
    assert str(raised.value) == (
        "error creating driver: failed to create ComputeDomain manager: error getting cliqueID: error getting "
        f"fabric information from one or more devices: NVLink fabric not attached (device 0/{first_gpu(inv)}): "
        "state=2, refusing to start"
    )


def test_a_registration_error_status_stops_the_plugin(root, apiserver):
    inv = live(spec(root, status="ERROR_UNKNOWN"))
    with pytest.raises(FabricError, match=r"NVLink fabric registration error \(device 0/GPU-[^)]+\): "):
        driver(root, apiserver, inv)
    with pytest.raises(FabricError, match="status=ERROR_UNKNOWN, refusing to start"):
        driver(root, apiserver, inv)


async def test_gate_off_falls_back_to_no_clique_and_channels_get_no_devices(root, apiserver):
    """CrashOnNVLinkFabricErrors=false: go-nvlib's IsFabricAttached says no, the node has no clique, the plugin
    starts and a channel claim succeeds without IMEX channel device nodes (device_state.go @ 0807eed)."""
    inv = live(spec(root, state="in-progress"))
    dra = driver(root, apiserver, inv, "CrashOnNVLinkFabricErrors=false")
    await dra.start()
    try:
        assert dra.compute_domains is not None
        assert dra.compute_domains.clique.value == ""
        await dra.compute_domains.wait_published()
        uid = apiserver.create_direct(compute_domain("cd"))["metadata"]["uid"]
        meta = apiserver.create_direct(channel_claim("wl", NODE, uid))["metadata"]
        claim = (meta["namespace"], meta["name"], meta["uid"])

        async def ready() -> Any:
            answer = (await prepare(dra.compute_domains.plugin.dra_socket, [claim])).claims[claim[2]]  # type: ignore[union-attr]
            assert answer.error == ""
            return answer

        answer = await eventually(ready, "the claim prepared on a node without a clique", 15.0)
        assert [list(d.cdi_device_ids) for d in answer.devices] == [[]]
    finally:
        await dra.stop()


def test_single_node_nvlink_system_exception_needs_fabric_manager_partitioning(root):
    """The single-node exception (nvlib.go @ 6807cc7): with FabricManagerPartitioning on, a node whose GPUs sit
    behind its own NVSwitches ignores a pending registration (no clique) instead of refusing to start."""
    node = live(spec(root, state="not-started", singleNode="true")).inventory.node
    assert node_clique_id(node, FabricGates(crash_on_errors=True, fm_partitioning=True)) == ""
    with pytest.raises(FabricError, match="state=1, refusing to start"):
        node_clique_id(node, FabricGates(crash_on_errors=True, fm_partitioning=False))
    multi_node = live(spec(root, state="not-started")).inventory.node
    with pytest.raises(FabricError, match="state=1"):
        node_clique_id(multi_node, FabricGates(crash_on_errors=True, fm_partitioning=True))


def test_unsupported_fabric_and_zero_cluster_uuid_mean_no_clique(root):
    assert node_clique_id(live(spec(root, state="not-supported")).inventory.node) == ""
    zero = root / "zero.yaml"
    zero.write_text(
        "version: v1\nfabric: {clusterUUID: 00000000-0000-0000-0000-000000000000, cliqueID: 0}\n"
        "gpus: [{model: h100-80gb, count: 8}]\n"
    )
    assert node_clique_id(live(zero).inventory.node) == ""
    assert node_clique_id(live(spec(root)).inventory.node) == f"{CLUSTER}.3"


def test_fakegpu_dra_exits_1_with_nvidias_error_line(root, apiserver, capsys):
    """``fakegpu dra --compute-domains`` on a node in fabric error ends as NVIDIA's binary does: ``Error: ...``
    on stderr, exit status 1 (cmd/compute-domain-kubelet-plugin/main.go @ 89aa5bb)."""
    argv = [
        "dra",
        "--kubeconfig",
        str(apiserver.kubeconfig(root / "kubeconfig")),
        "--node-name",
        NODE,
        "--node-spec",
        str(spec(root, state="not-started")),
        "--kubelet-dir",
        str(root / "kubelet"),
        "--cdi-root",
        str(root / "cdi"),
        "--admin-socket",
        str(root / "admin.sock"),
        "--compute-domains",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Error: error creating driver: failed to create ComputeDomain manager: error getting cliqueID:" in err
    assert "state=1, refusing to start" in err


def test_a_bad_fabric_state_or_status_is_refused_naming_the_field(root):
    with pytest.raises(SpecError, match=r"fabric\.state"):
        live(spec(root, state="broken"))
    with pytest.raises(SpecError, match=r"fabric\.status"):
        live(spec(root, status="oops"))
