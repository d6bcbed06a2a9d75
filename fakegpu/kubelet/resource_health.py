"""A container's ``allocatedResourcesStatus`` (KEP-4680) as a v1.36 kubelet computes it.

Device plugin resources follow kubernetes ``pkg/kubelet/cm/devicemanager/manager.go``
``UpdateAllocatedResourcesStatus`` (v1.36): one entry per resource the container holds devices of, named for the
resource, one ``{"resourceID": <device ID>, "health": ...}`` per device; ``Healthy`` when the device's last
ListAndWatch health is Healthy or the device is not known any more (the resource was forgotten after the grace
period), ``Unhealthy`` otherwise (a plugin whose stream ended has all its devices Unhealthy). No message, never
``Unknown``.

DRA claims follow ``UpdateAllocatedResourcesStatus`` in ``pkg/kubelet/cm/dra/manager.go`` (v1.36): only for a
container whose ``resources.claims`` names claims, one entry per such reference named ``claim:<pod claim name>``
(``claim:<name>/<request>`` when it names a request), listing every device the claim's drivers prepared (of
every request), with ``resourceID`` the device's first CDI device ID (``<driver>/<pool>/<device>`` without
one), the health from the health info cache (``dra_health``) and, when the driver gave one, its ``message``
(the ``ResourceHealthStatusMessage`` gate, beta and on in v1.36, as a real v1.36.2 kubelet showed it). The pod
claim name is found through ``status.resourceClaimStatuses``: a claim the pod names directly
(``resourceClaimName``) has none there, so the kubelet shows no entry for it. A claim not prepared has none.

Only regular containers get it (``status.containerStatuses``; init containers and sidecars are in
``initContainerStatuses``, which the kubelet leaves alone). The kubelet builds both lists from Go maps, so its
order varies; fakegpu sorts entries by name (device-plugin resources first) and device-plugin IDs, and keeps
the claim's devices in allocation order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fakegpu.kubelet.container_claims import ContainerClaim
from fakegpu.kubelet.device_manager import HEALTHY, DeviceManager
from fakegpu.kubelet.dra_health import HealthInfoCache
from fakegpu.kubelet.dra_state import ClaimInfo

ResourceStatus = dict[str, Any]
"""One ``allocatedResourcesStatus`` entry as the API has it: ``name`` and ``resources``."""


def device_plugin_status(manager: DeviceManager, pod_uid: str, container: str) -> list[ResourceStatus]:
    """The device-plugin entries of one container."""
    out = []
    for resource, ids in sorted(manager.container_devices(pod_uid, container).items()):
        state = manager.resources.get(resource)
        resources = []
        for device_id in sorted(ids):
            device = state.devices.get(device_id) if state is not None else None
            health = "Healthy" if device is None or device.health == HEALTHY else "Unhealthy"
            resources.append({"health": health, "resourceID": device_id})
        if resources:
            out.append({"name": resource, "resources": resources})
    return out


def claim_resources(info: ClaimInfo, cache: HealthInfoCache) -> list[dict[str, str]]:
    """Every device the claim's drivers prepared, with its health and message now."""
    out = []
    for driver in info.drivers:
        for device in info.devices.get(driver, []):
            health, message = cache.get(driver, device.pool_name, device.device_name)
            resource_id = (
                device.cdi_device_ids[0]
                if device.cdi_device_ids
                else f"{driver}/{device.pool_name}/{device.device_name}"
            )
            entry = {"health": health, "resourceID": resource_id}
            if message:
                entry["message"] = message
            out.append(entry)
    return out


def dra_status(
    refs: Sequence[ContainerClaim],
    entries: Mapping[str, str],
    claims: Mapping[str, ClaimInfo],
    cache: HealthInfoCache,
) -> list[ResourceStatus]:
    """The DRA entries of one container: ``refs`` are its ``resources.claims`` (by ResourceClaim name),
    ``entries`` the pod's claim names -> ResourceClaim names (``status.resourceClaimStatuses``), ``claims`` the
    prepared claims of the pod's namespace by name."""
    by_claim = {claim: entry for entry, claim in entries.items()}
    out: dict[str, ResourceStatus] = {}
    for ref in refs:
        entry = by_claim.get(ref.claim)
        info = claims.get(ref.claim)
        if entry is None or info is None or not info.prepared:
            continue
        name = f"claim:{entry}/{ref.request}" if ref.request else f"claim:{entry}"
        resources = claim_resources(info, cache)
        if resources:
            out[name] = {"name": name, "resources": resources}
    return [out[n] for n in sorted(out)]
