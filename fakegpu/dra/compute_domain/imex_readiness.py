"""Whether a node's IMEX daemon answers READY, from the faults on its GPUs: per GPU from its condition and XIDs
(``gpu_breaks_imex``); on a real node from what its live inventory holds (``imex_blockers``, which the
emulated daemons read: ``daemon_emulation`` for the driver-managed daemon, ``host_imex`` for a host-managed
one), per virtual node from the faults its Node's annotation records (``imex_not_ready_reason``, which
``fakegpu.virtual_nodes.imex_daemons`` reads). On a node without a clique the check is a no-op that succeeds.

NVIDIA's daemon entry in a ComputeDomainClique is Ready while the daemon's pod is Ready, and the pod's probe
is ``compute-domain-daemon check``: on a node of a clique it runs ``nvidia-imex-ctl -q`` and passes only on
the answer ``READY`` (kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-daemon/main.go`` ``check`` at
commit 0807eed; ``cdclique.go`` ``updateDaemonStatus`` at commit 3fe9487). ``nvidia-imex`` itself is not
open: what breaks its readiness is fakegpu's model, the same one the emulated daemon of a real node follows
(``fakegpu.dra.compute_domain.daemon_emulation``: NotReady while a GPU of the node is unhealthy), stated
per fault kind. A GPU breaks the node's IMEX domain when

- it is off the bus or lost (``off-bus``, ``gpu-lost``): the daemon has no GPU to import memory into;
- its NVLink fabric registration failed (``fabric``): the node's GPUs are not in the clique the daemon
  serves, which NVIDIA's compute-domain plugin refuses to start on (``CrashOnNVLinkFabricErrors``,
  ``fakegpu.dra.compute_domain.fabric_clique``);
- an NVLink is down (``nvlink``: XID 74, the link gone until a GPU reset);
- the driver reported an XID that NVIDIA's DRA driver treats as fatal (``xid``, ``ecc-uncorrectable``,
  ``ecc-correctable`` storms): not in its skip list (``cmd/gpu-kubelet-plugin/device_health.go``), the device
  tainted NoSchedule.

Thermal and power excursions and the XIDs NVIDIA skips (13, 31, 43, 45, 68, 109) leave it Ready. A fault
waiting for ``after_calls`` RPC calls has not struck: a virtual node serves no RPC calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fakegpu.sharing.fault_record import NodeFaults
from fakegpu.sharing.gpu_condition import HEALTHY_CONDITION, GpuCondition, strike
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.sharing.node import PhysicalGpu

DRA_XID_POLICY = XidPolicy.for_dra_driver({})
"""The DRA driver's fatal XIDs with its default skip list (a virtual node has no ``ADDITIONAL_XIDS_TO_IGNORE``)."""


def gpu_breaks_imex(condition: GpuCondition, xids: Sequence[int], policy: XidPolicy = DRA_XID_POLICY) -> str | None:
    """Why a GPU with ``condition`` (after the XIDs ``xids``) keeps the IMEX daemon from READY, or None."""
    if condition.off_bus:
        return "off the bus"
    if condition.lost:
        return "lost"
    if condition.fabric_error:
        return f"NVLink fabric registration failed (status={condition.fabric_status})"
    if condition.nvlink_down:
        return f"NVLink {', '.join(str(link) for link in sorted(condition.nvlink_down))} down"
    fatal = [xid for xid in xids if policy.is_critical(xid)]
    if fatal:
        return f"XID {', '.join(str(xid) for xid in dict.fromkeys(fatal))}"
    return None


def imex_not_ready_reason(faults: NodeFaults, gpus: Sequence[PhysicalGpu]) -> str | None:
    """Why the node's IMEX daemon is not READY with these faults on its GPUs (``GPU 2: off the bus; ...``), or
    None when it is. A fault naming a GPU the node does not have is ignored (the annotation was written for
    another shape of the node)."""
    by_index: Mapping[int, PhysicalGpu] = {gpu.index: gpu for gpu in gpus}
    reasons: list[str] = []
    for index, gpu_faults in sorted(faults.items()):
        gpu = by_index.get(index)
        if gpu is None:
            continue
        condition = HEALTHY_CONDITION
        xids: tuple[int, ...] = ()
        for fault in gpu_faults:
            if fault.after_calls:
                continue
            condition, new = strike(condition, fault, gpu.model)
            xids = (*xids, *new)
        why = gpu_breaks_imex(condition, xids)
        if why is not None:
            reasons.append(f"GPU {index}: {why}")
    return "; ".join(reasons) or None


def imex_blockers(live: LiveInventory) -> list[str]:
    """Why a real node's IMEX daemon is not ready, one phrase per GPU in the way (none: ready): the GPU's
    condition as for a virtual node, then a GPU the live inventory holds unhealthy (an XID its policy counts,
    ``fakegpu ctl health``)."""
    unhealthy = live.unhealthy()
    out: list[str] = []
    for gpu in live.inventory.node.gpus:
        why = gpu_breaks_imex(live.condition(gpu.uuid), ())
        if why is None and any(uuid in unhealthy for uuid in gpu.uuids):
            xids = sorted({x for u in gpu.uuids if (x := unhealthy.get(u)) is not None})
            why = "unhealthy" + (f" (XID {', '.join(map(str, xids))})" if xids else "")
        if why is not None:
            out.append(f"GPU {gpu.index} ({gpu.uuid}) {why}")
    return out
