"""The health of every published DRA device, from the live inventory's health events: for the health stream,
the admin socket's status and the metrics.

As NVIDIA's driver reports it on main (kubernetes-sigs/dra-driver-nvidia-gpu
``cmd/gpu-kubelet-plugin/device_health_status.go``): Healthy; Unhealthy once a critical XID or a lost GPU
hit the device (for good, with that event's message); Unknown while its GPU is unmonitored; a non-fatal XID
leaves it Healthy with a message. The events are the ones the taints come from (``fakegpu.dra.health_taints``).
"""

from __future__ import annotations

from typing import Literal

from fakegpu.dra.device_map import published_devices
from fakegpu.dra.health_taints import Health
from fakegpu.dra.health_taints import device_health as folded_health
from fakegpu.sharing.live_inventory import LiveInventory


def device_health(
    live: LiveInventory, driver: str, mig_mode: Literal["static", "dynamic"]
) -> list[tuple[str, str, Health, str]]:
    """(pool, device, health, message) per published device; a dynamic MIG device (no UUID yet) has its
    GPU's health, as it carries its GPU's taints."""
    node = live.inventory.node
    events = live.health_events()
    out = []
    for name, device in sorted(published_devices(node, mig_mode).items()):
        key = device.uuid if device.uuid is not None else device.parent_uuid
        health, message = folded_health(events.get(key, ()), live.xid_policy)
        out.append((node.name, name, health, message))
    return out
