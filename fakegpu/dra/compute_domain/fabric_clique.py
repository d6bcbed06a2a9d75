"""The node's clique ID as NVIDIA's compute-domain plugin reads it from NVML, NVLink fabric errors included.

Follows ``cmd/compute-domain-kubelet-plugin/nvlib.go`` (``getCliqueID``, ``getCliqueIDStrict``,
``getCliqueIDLegacy``) of kubernetes-sigs/dra-driver-nvidia-gpu at commit 6807cc7 (main; v0.4.0 has the same
two paths without the single-node exception). Every GPU reports its fabric registration; the node's clique is
``<clusterUUID>.<cliqueID>`` when they agree, "" off a multi-node NVLink fabric.

* ``CrashOnNVLinkFabricErrors`` on (beta, the default): a fabric-capable GPU whose registration is not
  ``completed``, or completed with an error status, is an error that stops the plugin at start
  (``refusing to start``). A zero cluster UUID (NVLink but not multi-node capable) and an unsupported
  fabric fall back to no clique. The one exception: with ``FabricManagerPartitioning`` on, a node whose
  GPUs sit behind its own NVSwitches (``single_node``) ignores a pending registration, since FabricManager
  registers GPUs only once a partition holding them is activated.
* Off: go-nvlib's ``IsFabricAttached``; a GPU not attached just means no clique.

The clique changes with the fabric: a FabricManager repartition gives the node another clique ID (fakegpu: a
reloaded node spec with another ``fabric.cliqueID``), which the plugin's refresh picks up.

A ``fabric`` fault (``fakegpu ctl``, a scenario) overrides the node spec's fabric for its GPU: the registration
completed with the fault's error status. What that does is what NVIDIA's plugin does with it: present when the
plugin starts, the plugin refuses to start (gate on) or the node has no clique (gate off); struck while it runs,
nothing changes at once, since the plugin reads the clique only at start and at its 10-minute refresh
(``fakegpu.dra.compute_domain.node_clique``), where the error is logged (gate on) or the empty clique is
ignored (gate off, only a new non-empty clique replaces the old one), so the node keeps its clique either way.
The node's IMEX daemon is what goes NotReady (``fakegpu.dra.compute_domain.imex_readiness``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fakegpu.sharing.node import Node
from fakegpu.sharing.nvlink_fabric import FABRIC_STATES, FABRIC_SUCCESS, ZERO_CLUSTER_UUID, NvlinkFabric

WRAP: Final = "error getting fabric information from one or more devices"


class FabricError(RuntimeError):
    """NVML reports an NVLink fabric error; the message is NVIDIA's (without the caller's wrapping)."""


@dataclass(frozen=True)
class FabricGates:
    """The gates that decide how fabric errors are read."""

    crash_on_errors: bool = True
    fm_partitioning: bool = False


def gpu_fabric(fabric: NvlinkFabric, fault_status: str | None) -> NvlinkFabric:
    """What NVML reports for one GPU: the node spec's fabric, or, under a ``fabric`` fault, a registration that
    completed with the fault's error status (``nvmlGpuFabricInfo_t``: state COMPLETED, status ERROR_*). A GPU
    without fabric support has no registration to fail."""
    if fault_status is None or fabric.state == "not-supported":
        return fabric
    return dataclasses.replace(fabric, state="completed", status=fault_status)


def node_clique_id(node: Node, gates: FabricGates | None = None, fabric_faults: Mapping[str, str] | None = None) -> str:
    """``getCliqueID``: the node's ``<clusterUUID>.<cliqueID>``, "" without one, or ``FabricError``.
    ``fabric_faults`` maps a GPU's UUID to the NVML status of the ``fabric`` fault on it, which overrides the
    node spec's static fabric for that GPU."""
    gates = gates or FabricGates()
    if node.fabric is None:
        return ""  # GPUs without an NVLink fabric: GetGpuFabricInfo answers ERROR_NOT_SUPPORTED
    found: set[str] = set()
    for gpu in node.gpus:
        fabric = gpu_fabric(node.fabric, (fabric_faults or {}).get(gpu.uuid))
        where = f"device {gpu.index}/{gpu.uuid}"
        if gates.crash_on_errors:
            if fabric.state == "not-supported":
                continue
            if fabric.state != "completed":
                if gates.fm_partitioning and fabric.single_node:
                    continue
                state = FABRIC_STATES[fabric.state]
                raise FabricError(f"{WRAP}: NVLink fabric not attached ({where}): state={state}, refusing to start")
            if fabric.status != FABRIC_SUCCESS:
                raise FabricError(
                    f"{WRAP}: NVLink fabric registration error ({where}): status={fabric.status}, refusing to start"
                )
            if fabric.cluster_uuid == ZERO_CLUSTER_UUID:
                continue
        elif not fabric.attached:
            continue
        found.add(fabric.clique)
    if not found:
        return ""
    (clique,) = found  # every GPU of a fake node reports the node's one fabric
    return clique
