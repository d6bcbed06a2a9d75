"""Whether the node's IMEX daemon answers READY, from the state of the node's GPUs.

NVIDIA's compute-domain daemon is probed by running ``compute-domain-daemon check``, which runs
``nvidia-imex-ctl -c /imexd/imexd.cfg -q`` and is ready only when that prints exactly ``READY``
(``cmd/compute-domain-daemon/main.go`` ``check`` of kubernetes-sigs/dra-driver-nvidia-gpu at commit 0807eed;
"IMEX daemon not ready: <output>" otherwise); on a node without a clique the check is a no-op that succeeds.
The daemon's pod turns Ready or NotReady with that probe, and the daemon writes its clique entry's (or the
controller the node's ``status.nodes`` entry's) status from it (``cdclique.go``, ``cdstatus.go``).

The IMEX daemon shares memory over the NVLink fabric: it cannot serve while a GPU of its node is not on the
fabric. fakegpu has no ``nvidia-imex``; the emulated daemons (``fakegpu.dra.compute_domain.daemon_emulation``
for the driver-managed daemon, ``fakegpu.dra.compute_domain.host_imex`` for a host-managed one) answer from
what the live inventory says about each GPU, in this order: lost, fallen off the bus, its NVLink fabric
registration failed (a ``fabric`` fault; it clears when the fault is recovered), or unhealthy (an XID the
driver counts as fatal, ``fakegpu ctl health``). A thermal or power excursion, or an XID the driver calls
non-fatal, leaves the daemon ready.
"""

from __future__ import annotations

from fakegpu.sharing.live_inventory import LiveInventory


def imex_blockers(live: LiveInventory) -> list[str]:
    """Why the node's IMEX daemon is not ready, one phrase per GPU in the way (none: ready)."""
    unhealthy = live.unhealthy()
    out: list[str] = []
    for gpu in live.inventory.node.gpus:
        condition = live.condition(gpu.uuid)
        where = f"GPU {gpu.index} ({gpu.uuid})"
        if condition.lost:
            out.append(f"{where} is lost")
        elif condition.off_bus:
            out.append(f"{where} has fallen off the bus")
        elif condition.fabric_error:
            out.append(f"{where} NVLink fabric registration failed ({condition.fabric_status})")
        elif any(uuid in unhealthy for uuid in gpu.uuids):
            xids = sorted({x for u in gpu.uuids if (x := unhealthy.get(u)) is not None})
            out.append(f"{where} unhealthy" + (f" (XID {', '.join(map(str, xids))})" if xids else ""))
    return out
