"""The kubelet's DRA claim info cache as a file: ``<root>/dra_manager_state``.

A real kubelet keeps the claims it prepared, which pods use them and what each driver answered in
``/var/lib/kubelet/dra_manager_state`` (``draManagerStateFileName`` in kubernetes
``pkg/kubelet/cm/dra/manager.go``; the root directory is its state directory), so that after a restart it
neither prepares a claim twice nor forgets to unprepare one. The entries carry the field names of
``state.ClaimInfoState`` (``pkg/kubelet/cm/dra/state/state.go``: ``ClaimUID``, ``ClaimName``,
``Namespace``, ``PodUIDs``, ``DriverState`` with ``Devices`` of ``PoolName``, ``DeviceName``,
``RequestNames``, ``CDIDeviceIDs``). The envelope is fakegpu's own (``{"Entries": [...]}``, no checksum)
and ``Prepared`` is added: the emulator is the only reader of this file, unlike
``kubelet_internal_checkpoint``, which stays byte-compatible with a real kubelet's.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.kubelet.dra_plugins import PreparedDevice
from fakegpu.runtime.atomic_files import atomic_write

log = logging.getLogger(__name__)

DRA_STATE_NAME = "dra_manager_state"


@dataclass
class ClaimInfo:
    """One claim the kubelet knows on this node: its identity, its pods, what its drivers prepared."""

    uid: str
    name: str
    namespace: str
    drivers: tuple[str, ...]
    """The drivers of its allocation results (``DriverState``'s keys): each is asked to prepare it."""
    pod_uids: set[str] = field(default_factory=set)
    devices: dict[str, list[PreparedDevice]] = field(default_factory=dict)
    """Per driver, the devices it prepared."""
    prepared: bool = False

    @property
    def ref(self) -> tuple[str, str, str]:
        return (self.namespace, self.name, self.uid)

    def cdi_device_ids(self) -> list[str]:
        """Every CDI device ID of the claim, driver by driver in allocation order."""
        return [i for d in self.drivers for dev in self.devices.get(d, []) for i in dev.cdi_device_ids]


def _entry(info: ClaimInfo) -> dict[str, Any]:
    return {
        "ClaimUID": info.uid,
        "ClaimName": info.name,
        "Namespace": info.namespace,
        "PodUIDs": sorted(info.pod_uids),
        "DriverState": {
            d: {
                "Devices": [
                    {
                        "PoolName": dev.pool_name,
                        "DeviceName": dev.device_name,
                        "RequestNames": list(dev.request_names),
                        "CDIDeviceIDs": list(dev.cdi_device_ids),
                    }
                    for dev in info.devices.get(d, [])
                ]
            }
            for d in info.drivers
        },
        "Prepared": info.prepared,
    }


def _info(raw: Any) -> ClaimInfo:
    if not isinstance(raw, dict):
        raise ValueError(f"an entry must be an object, found {raw!r}")
    drivers = raw["DriverState"]
    if not isinstance(drivers, dict):
        raise ValueError(f"DriverState must map driver names to their devices, found {drivers!r}")
    return ClaimInfo(
        uid=str(raw["ClaimUID"]),
        name=str(raw["ClaimName"]),
        namespace=str(raw["Namespace"]),
        drivers=tuple(str(d) for d in drivers),
        pod_uids={str(u) for u in raw.get("PodUIDs") or []},
        devices={
            str(d): [
                PreparedDevice(
                    str(dev["PoolName"]),
                    str(dev["DeviceName"]),
                    tuple(str(r) for r in dev.get("RequestNames") or []),
                    tuple(str(i) for i in dev.get("CDIDeviceIDs") or []),
                )
                for dev in (state or {}).get("Devices") or []
            ]
            for d, state in drivers.items()
        },
        prepared=bool(raw.get("Prepared", False)),
    )


def write_state(path: Path, claims: list[ClaimInfo]) -> None:
    doc = {"Entries": [_entry(c) for c in sorted(claims, key=lambda c: (c.namespace, c.name))]}
    atomic_write(path, json.dumps(doc, indent=1).encode(), 0o600)


def read_state(path: Path) -> list[ClaimInfo]:
    """The claims in the file; [] when there is none. An unreadable file is logged with its path and
    ignored (the kubelet starts with an empty cache then: its claims are prepared again, which drivers
    must take, NodePrepareResources being idempotent)."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("ignoring the unreadable DRA state %s: %s", path, exc)
        return []
    try:
        if not isinstance(doc, dict) or not isinstance(doc.get("Entries"), list):
            raise ValueError('expected an object with a list "Entries"')
        return [_info(e) for e in doc["Entries"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignoring the unreadable DRA state %s: %s", path, exc)
        return []
