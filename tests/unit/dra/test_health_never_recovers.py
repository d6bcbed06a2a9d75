"""A GPU reset ends a fault on the device, but neither of NVIDIA's plugins turns the device healthy again: only a
restart of the plugin does. This pins that fakegpu's DRA taints, DRA health stream and device-plugin health stay
as they were after ``recover_gpu(..., "reset")``, while the GPU's readings (nvidia-smi, DCGM) do recover.

Upstream, read for this:

- kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/driver.go`` @ 1191eaa ``deviceHealthEvents``:
  a health event only ever adds a taint (``AddDeviceTaint``) and republishes; nothing removes one.
  ``cmd/gpu-kubelet-plugin/device_health.go`` @ 15a116f: the NVML monitor sends only unhealthy events
  (XID, GPU lost, unmonitored), none for a device that is well again.
  ``cmd/gpu-kubelet-plugin/device_health_status.go`` @ 46c7cc2 ``updateDeviceHealth``: "Unhealthy is sticky
  ... Recovery requires fixing the device (GPU reset or reboot) and restarting the driver". Automatic removal
  of the taints after recovery (re-reading ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``) is proposed in issue #1455,
  open, with no merged change behind it.
- NVIDIA/k8s-device-plugin ``internal/rm/health.go`` @ 02597b9: the health channel carries "devices that have
  become unhealthy"; no path sets a device Healthy again (ListAndWatch re-sends what the channel brought).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.dra.health_taints import published_taints
from fakegpu.dra.published_health import device_health
from fakegpu.sharing.gpu_condition import HEALTHY_CONDITION
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.health import UNHEALTHY, XidPolicy
from fakegpu.sharing.live_inventory import LiveInventory
from tests.inventory_builders import inventory


@pytest.mark.parametrize(
    ("fault", "taint"),
    [
        (GpuFault(kind="xid", xid=48), {"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}),
        (GpuFault(kind="ecc-uncorrectable"), {"key": "gpu.nvidia.com/xid", "value": "94", "effect": "NoSchedule"}),
        (GpuFault(kind="nvlink"), {"key": "gpu.nvidia.com/xid", "value": "74", "effect": "NoSchedule"}),
    ],
)
def test_a_gpu_reset_leaves_the_taint_the_health_and_the_device_plugin_unhealthy(
    tmp_path: Path, fault: GpuFault, taint: dict[str, str]
) -> None:
    live = LiveInventory(inventory(tmp_path, "2xh100-80gb"), XidPolicy.for_dra_driver({}))
    gpu = live.inventory.node.gpus[0]
    live.strike_gpu(gpu.uuid, fault)
    tainted = published_taints(live)[gpu.uuid]
    assert taint in tainted
    health = {d: (h, m) for _, d, h, m in device_health(live, "gpu.nvidia.com", "static")}
    assert health["gpu-0"][0] == "Unhealthy"
    assert gpu.uuid in live.unhealthy()

    after = live.recover_gpu(gpu.uuid, "reset")

    assert fault.kind not in after.kinds  # the GPU itself is well: its fault ended with the reset
    assert (after.ecc_dbe_volatile, after.nvlink_down) == (0, frozenset())
    assert published_taints(live)[gpu.uuid] == tainted
    assert {d: (h, m) for _, d, h, m in device_health(live, "gpu.nvidia.com", "static")} == health
    assert gpu.uuid in live.unhealthy()
    dp_devices = [d for r in live.inventory.resources for d in r.devices if d.parent == gpu.uuid]
    assert dp_devices and all(d.health == UNHEALTHY for d in dp_devices)


def test_a_cause_that_clears_was_never_a_health_event(tmp_path: Path) -> None:
    """Thermal, power and fabric faults report no XID, so neither plugin taints or marks anything; their
    recovery has nothing to undo (the GPU's readings come back)."""
    live = LiveInventory(inventory(tmp_path, "1xh100-80gb"), XidPolicy.for_dra_driver({}))
    gpu = live.inventory.node.gpus[0]
    for kind in ("thermal", "power", "fabric"):
        live.strike_gpu(gpu.uuid, GpuFault.model_validate({"kind": kind}))
    assert published_taints(live) == {} and live.unhealthy() == {}
    for kind in ("thermal", "power", "fabric"):
        live.recover_gpu(gpu.uuid, kind)
    assert live.condition(gpu.uuid) == HEALTHY_CONDITION
