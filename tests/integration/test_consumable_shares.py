"""Consumable shares through the real DRA driver: its slices on the test API server, and claims sharing one GPU
prepared and unprepared over the kubelet's DRA socket.

Follows kubernetes-sigs/dra-driver-nvidia-gpu at main (v0.5.0-dev): ``cmd/gpu-kubelet-plugin/
consumable_shares.go`` (commit f49e778) for the advertisement, and ``cmd/gpu-kubelet-plugin/device_state.go``
(``validateNoOverlappingPreparedDevices``, ``applySharingConfig``, ``Unprepare``; the version holding
``isConsumableSharesEnabled``) with ``consumable_shares_test.go`` ``TestValidateNoOverlappingPreparedDevices``
(commit 52a582a) for the prepare side. The claims carry what the scheduler writes for consumable capacity
(KEP-5075): a ``shareID`` and the ``consumedCapacity`` of each result.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from fakegpu.dra.consumable_shares import parse_consumable_shares
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates
from fakegpu.dra.prepared_claims import PreparedClaims
from fakegpu.kubelet.dra_manager import Backoff
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubelet.pod_claims import PodClaim
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.cdi_runtime import claim_spec_path, resolve
from tests.claim_builders import allocated_claim, gpu_config, opaque_config
from tests.dra_kubelet_client import prepare, unprepare
from tests.eventually import eventually
from tests.integration.started_dra_drivers import StartedDrivers

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
SHARE_A = "9a0c3b8e-0d7e-4a55-9a0b-0c6a1f6d2e01"
SHARE_B = "9a0c3b8e-0d7e-4a55-9a0b-0c6a1f6d2e02"
SHARE_C = "9a0c3b8e-0d7e-4a55-9a0b-0c6a1f6d2e03"
GATES = parse_feature_gates("ConsumableShares=true,TimeSlicingSettings=true,MPSSupport=true")


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        yield server


@pytest.fixture
async def start(root: Path) -> AsyncIterator[Callable[..., Any]]:
    drivers = StartedDrivers(root)

    async def make(
        server: FakeApiServer,
        shares: str = "4",
        gates: FeatureGates = GATES,
        gpus: str = "2xh100-80gb",
        minor: int | None = None,
        layout: str | None = None,
        mig_mode: Literal["static", "dynamic"] = "static",
    ) -> DraDriver:
        live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, gpus=(gpus,), mig_layout=layout)))
        settings = DraSettings(
            cdi_root=root / "cdi",
            feature_gates=gates,
            consumable_shares=parse_consumable_shares(shares, gates),
            server_minor=minor,
            mig_mode=mig_mode,
        )
        return await drivers.start(live, settings, server)

    make.stop_all = drivers.stop_all  # type: ignore[attr-defined]
    yield make
    await drivers.stop_all()


def shared_claim(server: FakeApiServer, name: str, share: str, **kw: Any) -> tuple[str, str, str]:
    """A claim the scheduler allocated one share of gpu-0 to (one of the default 4 shares, no memory)."""
    claim = allocated_claim(
        name, NODE, ["gpu-0"], share_ids=[share], consumed_capacity={"memory": "0", "shares": "1"}, **kw
    )
    return ("default", name, server.create_direct(claim)["metadata"]["uid"])


def device_entries(server: FakeApiServer) -> list[dict[str, Any]]:
    return [
        d
        for s in server.objects("resourceslices")
        if s["spec"]["driver"] == DRIVER
        for d in s["spec"].get("devices", [])
    ]


async def test_the_published_devices_allow_several_claims(apiserver, start):
    """consumable_shares.go with --consumable-shares=4: what the API server stores for every GPU."""
    await start(apiserver, "4")
    devices = device_entries(apiserver)
    assert [d["name"] for d in devices] == ["gpu-0", "gpu-1"]
    for device in devices:
        assert device["allowMultipleAllocations"] is True
        assert device["capacity"] == {
            "memory": {
                "value": "81559Mi",
                "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "81559Mi", "step": "1Mi"}},
            },
            "shares": {
                "value": "4",
                "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}},
            },
        }
    assert apiserver.rejections == []


async def test_claims_share_a_gpu_until_the_last_one_is_unprepared(apiserver, start, root, caplog):
    """Two claims holding shares of gpu-0 are both prepared (the overlap check lets shared devices through);
    each container gets the whole GPU, as with NVIDIA, and the checkpoint keeps each share. Unpreparing one
    leaves the other's CDI spec and entry alone; after the last, the GPU is free for anyone again."""
    driver = await start(apiserver)
    gpu0 = driver.live.inventory.node.gpus[0].uuid
    a, b = shared_claim(apiserver, "a", SHARE_A), shared_claim(apiserver, "b", SHARE_B)
    response = await prepare(driver.plugin.dra_socket, [a, b])
    for claim, share in ((a, SHARE_A), (b, SHARE_B)):
        answer = response.claims[claim[2]]
        assert answer.error == ""
        (device,) = answer.devices
        assert (device.device_name, device.share_id) == ("gpu-0", share)
        assert resolve(root / "cdi", list(device.cdi_device_ids)).env["FAKEGPU_VISIBLE_DEVICES"] == gpu0
    checkpoint = PreparedClaims.in_dir(root / "kubelet/plugins" / DRIVER)
    stored = {c.name: c.to_json()["devices"] for c in checkpoint.claims()}
    assert stored["a"][0]["shareID"] == SHARE_A and stored["b"][0]["shareID"] == SHARE_B
    assert stored["a"][0]["consumedCapacity"] == {"memory": "0", "shares": "1"}

    caplog.set_level(logging.INFO, logger="fakegpu.dra.gpu_prepare")
    assert (await unprepare(driver.plugin.dra_socket, [a])).claims[a[2]].error == ""
    assert "unprepared claim default/a" in caplog.text and "(still held: gpu-0 by 1 other claim)" in caplog.text
    assert not claim_spec_path(root / "cdi", a[2]).exists()
    (device,) = response.claims[b[2]].devices
    assert resolve(root / "cdi", list(device.cdi_device_ids)).env["FAKEGPU_VISIBLE_DEVICES"] == gpu0
    assert [c.name for c in checkpoint.load().values()] == ["b"]

    # While b holds gpu-0, a claim with another time-slice interval cannot join; after b it can.
    long = [opaque_config(gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}))]
    c = shared_claim(apiserver, "c", SHARE_C, config=long)
    refused = (await prepare(driver.plugin.dra_socket, [c])).claims[c[2]].error
    assert refused == (
        f"unable to prepare claim {c[2]}: requested device gpu-0 has conflicting configuration with already "
        f"prepared claim {b[2]}"
    )
    assert (await unprepare(driver.plugin.dra_socket, [b])).claims[b[2]].error == ""
    assert checkpoint.load() == {}
    assert (await prepare(driver.plugin.dra_socket, [c])).claims[c[2]].error == ""


async def test_the_same_config_stated_differently_may_share(apiserver, start):
    """NVIDIA compares the normalized configs: TimeSlicing without an interval is the Default interval."""
    driver = await start(apiserver)
    default = [opaque_config(gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}))]
    implied = [opaque_config(gpu_config({"strategy": "TimeSlicing"}))]
    a = shared_claim(apiserver, "a", SHARE_A, config=default)
    b = shared_claim(apiserver, "b", SHARE_B, config=implied)
    response = await prepare(driver.plugin.dra_socket, [a, b])
    assert [response.claims[c[2]].error for c in (a, b)] == ["", ""]


async def test_without_consumable_shares_a_prepared_device_is_not_given_twice(apiserver, start):
    """TestValidateNoOverlappingPreparedDevices 'gpu overlap rejected when consumable shares disabled'."""
    driver = await start(apiserver, "disabled", gates=FeatureGates())
    assert "allowMultipleAllocations" not in device_entries(apiserver)[0]
    first = ("default", "a", apiserver.create_direct(allocated_claim("a", NODE, ["gpu-0"]))["metadata"]["uid"])
    second = ("default", "b", apiserver.create_direct(allocated_claim("b", NODE, ["gpu-0"]))["metadata"]["uid"])
    assert (await prepare(driver.plugin.dra_socket, [first])).claims[first[2]].error == ""
    error = (await prepare(driver.plugin.dra_socket, [second])).claims[second[2]].error
    taken = f"requested device gpu-0 is already allocated to different claim {first[2]}"
    assert error == f"unable to prepare claim {second[2]}: {taken}"
    assert (await unprepare(driver.plugin.dra_socket, [first])).claims[first[2]].error == ""
    assert (await prepare(driver.plugin.dra_socket, [second])).claims[second[2]].error == ""


async def test_admin_access_claims_may_overlap(apiserver, start):
    """validateNoOverlappingPreparedDevices leaves out devices allocated with adminAccess."""
    driver = await start(apiserver, "disabled", gates=FeatureGates())
    first = ("default", "a", apiserver.create_direct(allocated_claim("a", NODE, ["gpu-0"]))["metadata"]["uid"])
    admin = allocated_claim("admin", NODE, ["gpu-0"])
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    second = ("default", "admin", apiserver.create_direct(admin)["metadata"]["uid"])
    response = await prepare(driver.plugin.dra_socket, [first, second])
    assert [response.claims[c[2]].error for c in (first, second)] == ["", ""]


async def test_mps_is_refused_with_consumable_shares(apiserver, start):
    """applySharingConfig: MPS sharing is not supported when consumable shares is enabled."""
    driver = await start(apiserver, "unlimited")
    mps = [opaque_config(gpu_config({"strategy": "MPS"}))]
    claim = shared_claim(apiserver, "mps", SHARE_A, config=mps)
    error = (await prepare(driver.plugin.dra_socket, [claim])).claims[claim[2]].error
    assert error.endswith("error applying config: MPS sharing is not supported when consumable shares is enabled")


async def test_memory_mode_publishes_the_whole_gpu_as_the_default(apiserver, start):
    """--consumable-shares=memory: a claim asking for no memory takes all of it (the README of NVIDIA's
    demo/specs/consumable-shares)."""
    await start(apiserver, "memory")
    memory = device_entries(apiserver)[0]["capacity"]["memory"]
    assert memory["requestPolicy"] == {
        "default": "81559Mi",
        "validRange": {"min": "1Mi", "max": "81559Mi", "step": "1Mi"},
    }
    assert "shares" not in device_entries(apiserver)[0]["capacity"]


@pytest.mark.parametrize("server_gate", [False, True])
async def test_kubernetes_1_35_keeps_the_fields_only_with_its_gate(root, start, server_gate):
    """Consumable capacity is alpha in 1.34 and 1.35 (DRAConsumableCapacity off): NVIDIA publishes the fields
    anyway and the API server drops them; fakegpu does the same and says why, once."""
    server = FakeApiServer("1.35", feature_gates={"DRAConsumableCapacity": server_gate}).start()
    try:
        server.add_node(NODE)
        driver = await start(server, "2", minor=35)
        (gpu0, _) = device_entries(server)
        assert gpu0.get("allowMultipleAllocations") is (True if server_gate else None)
        assert ("requestPolicy" in gpu0["capacity"]["memory"]) is server_gate
        dropped = [e for e in driver.publisher.stats.errors if "DRAConsumableCapacity" in e]
        assert len(dropped) == (0 if server_gate else 1)
    finally:
        await start.stop_all()
        server.stop()


async def test_four_pods_share_a_gpu_through_the_kubelet(apiserver, start, root):
    """NVIDIA's demo/specs/consumable-shares/integer-sharing.yaml with --consumable-shares=4: four replicas, each
    with its own claim from the template, all allocated one share of the same GPU (the scheduler's choice,
    written here); each pod runs and sees that GPU, and the last pod's deletion unprepares the last share."""
    driver = await start(apiserver, "4")
    gpu0 = driver.live.inventory.node.gpus[0].uuid
    kubelet = KubeletEmulator(root / "kubelet", prepare_backoff=Backoff(initial=0.05, cap=0.2))
    await kubelet.start()
    try:
        await eventually(lambda: DRIVER in kubelet.dra_plugins.plugins, "the DRA driver to register with the kubelet")
        shares = [f"9a0c3b8e-0d7e-4a55-9a0b-0c6a1f6d2e1{i}" for i in range(4)]
        for i, share in enumerate(shares):
            _, name, uid = shared_claim(apiserver, f"integer-sharing-{i}-gpu", share)
            pod = await kubelet.run_pod(
                f"integer-sharing-{i}", {"ctr": {}}, claims=[PodClaim("default", name, uid, (DRIVER,))]
            )
            assert (pod.phase, pod.prepare_error) == ("Running", "")
            assert resolve(root / "cdi", list(pod.cdi_devices[uid])).env["FAKEGPU_VISIBLE_DEVICES"] == gpu0
        checkpoint = PreparedClaims.in_dir(root / "kubelet/plugins" / DRIVER)
        assert sorted(d["shareID"] for c in checkpoint.claims() for d in c.to_json()["devices"]) == shares
        for i in range(4):
            await kubelet.remove_pod(f"integer-sharing-{i}")
        await eventually(lambda: checkpoint.load() == {}, "every share to be unprepared")
    finally:
        await kubelet.stop()


@pytest.mark.parametrize(
    ("mig_mode", "gpus", "layout"), [("static", "2xa100-40gb", "all-balanced"), ("dynamic", "2xh100-80gb", None)]
)
async def test_mig_devices_are_shared_too_and_the_api_server_accepts_them(apiserver, start, mig_mode, gpus, layout):
    """applyConsumableShares runs for static MIG (deviceinfo.go GetDevice) and for dynamic MIG and the full GPUs
    beside them (PartGetDevice); every policy passes the API server's requestPolicy validation."""
    gates = GATES.with_gate("DynamicMIG", mig_mode == "dynamic").with_gate("MPSSupport", False)
    driver = await start(apiserver, "3", gates=gates, gpus=gpus, layout=layout, mig_mode=mig_mode)
    assert driver.publisher.stats.errors == []
    devices = device_entries(apiserver)
    assert any("-mig-" in d["name"] for d in devices)
    assert all(d["allowMultipleAllocations"] is True and d["capacity"]["shares"]["value"] == "3" for d in devices)
    assert apiserver.rejections == []


async def test_a_shared_gpus_time_slice_goes_back_to_default_with_its_last_share(apiserver, start):
    """device_state.go unprepareDevices: with consumable shares, a GPU another prepared claim still holds keeps
    its time slice (isGpuUUIDInUseByOtherClaims); the last share's unprepare resets it to Default."""
    driver = await start(apiserver)
    gpu0 = driver.live.inventory.node.gpus[0].uuid
    long = [opaque_config(gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}))]
    a, b = shared_claim(apiserver, "a", SHARE_A, config=long), shared_claim(apiserver, "b", SHARE_B, config=long)
    response = await prepare(driver.plugin.dra_socket, [a, b])
    assert [response.claims[c[2]].error for c in (a, b)] == ["", ""]
    assert driver.live.gpu_policies.time_slice(gpu0) == "Long"
    assert (await unprepare(driver.plugin.dra_socket, [a])).claims[a[2]].error == ""
    assert driver.live.gpu_policies.time_slice(gpu0) == "Long"
    assert (await unprepare(driver.plugin.dra_socket, [b])).claims[b[2]].error == ""
    assert driver.live.gpu_policies.time_slice(gpu0) == "Default"


async def test_an_mps_claim_on_a_device_another_claim_holds_gets_the_overlap_error_first(apiserver, start):
    """NVIDIA checks overlapping prepared devices before it applies the sharing config
    (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_state.go @ 094807e437e1 (main): Prepare runs
    validateNoOverlappingPreparedDevices, then prepareDevices -> applySharingConfig refuses MPS)."""
    driver = await start(apiserver, "unlimited")
    held = shared_claim(apiserver, "held", SHARE_A)
    mps = shared_claim(apiserver, "mps", SHARE_B, config=[opaque_config(gpu_config({"strategy": "MPS"}))])
    assert (await prepare(driver.plugin.dra_socket, [held])).claims[held[2]].error == ""
    error = (await prepare(driver.plugin.dra_socket, [mps])).claims[mps[2]].error
    conflict = f"requested device gpu-0 has conflicting configuration with already prepared claim {held[2]}"
    assert error == f"unable to prepare claim {mps[2]}: {conflict}"
