"""What a virtual node's GPU faults leave on what Kubernetes shows of it: the node without a daemon.

A real node keeps its faults in the device plugin's and the DRA driver's memory; a virtual node keeps them in
its Node's ``fakegpu.io/gpu-faults`` annotation (``fakegpu.sharing.fault_record``), and this module replays
them on a live inventory (``fakegpu.sharing.live_inventory``), exactly as ``fakegpu ctl gpu-fault`` strikes a
running daemon's GPUs, to work out what the node advertises:

- device-plugin mode: every device a fault makes unhealthy (the GPU's replicas and MIG devices too) leaves
  ``status.allocatable``; ``status.capacity`` stays, as the kubelet keeps counting unhealthy devices there
  (``kubernetes/kubernetes`` ``pkg/kubelet/cm/devicemanager/manager.go`` ``GetCapacity``);
- DRA modes: the devices carry NVIDIA's health taints (``fakegpu.dra.health_taints``), published only with
  the ``NVMLDeviceHealthCheck`` gate on a server that takes taints, as NVIDIA's driver publishes them;
- GFD labels: ``nvidia.com/gpu.clique`` goes when no GPU of the node is fabric-attached any more (a fabric
  fault on every GPU: GFD's ``internal/lm/imex.go`` skips GPUs go-nvlib's ``IsFabricAttached`` refuses).
  A GPU off the bus or lost changes no label: GFD's next relabel fails on the device handle (go-nvlib
  ``VisitDevices``: "error getting device handle for index") and GFD exits without writing, so with its
  NodeFeature output (the default since v0.19) the node keeps the labels it had
  (``NVIDIA/k8s-device-plugin`` ``cmd/gpu-feature-discovery/main.go`` ``run`` @ v0.20.0).

``after_calls`` has no meaning here (a virtual node serves no RPC call): a fault on a virtual node strikes at
once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from fakegpu.dra.health_taints import DeviceTaints, published_taints
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.labels import CLIQUE_LABEL
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.virtual_nodes.pools import VirtualNode

NodeFaults = Mapping[int, tuple[GpuFault, ...]]


def live_inventory(node: VirtualNode) -> LiveInventory:
    """The node's GPUs after its faults, oldest first (indices the node does not have are skipped: the
    caller warns about them when it reads the annotation)."""
    live = LiveInventory(node.inventory)
    count = len(node.inventory.node.gpus)
    for index, faults in sorted(node.faults.items()):
        if index >= count:
            continue
        for fault in faults:
            live.strike_gpu(str(index), fault.model_copy(update={"after_calls": 0}))
    return live


def with_faults(base: VirtualNode, faults: NodeFaults) -> VirtualNode:
    """``base`` (a node as planned, without faults) carrying ``faults``: its inventory with their health, its
    GFD labels as GFD's next relabel leaves them."""
    kept = {i: tuple(fs) for i, fs in sorted(faults.items()) if fs}
    if not kept:
        return dataclasses.replace(base, faults={})
    node = dataclasses.replace(base, faults=kept)
    live = live_inventory(node)
    labels = dict(base.gfd_labels)
    gpus = base.inventory.node.gpus
    if CLIQUE_LABEL in labels and gpus and all(live.condition(g.uuid).fabric_error for g in gpus):
        del labels[CLIQUE_LABEL]
    return dataclasses.replace(node, inventory=live.inventory, gfd_labels=labels)


def without_faults(node: VirtualNode) -> VirtualNode:
    """The node as its slices are built without its faults (its device health does not reach a slice): what a
    pool's template is cut from."""
    return dataclasses.replace(node, faults={}) if node.faults else node


def fault_taints(node: VirtualNode) -> DeviceTaints:
    """Every device's health taints after the node spec's XIDs and the node's faults."""
    return published_taints(live_inventory(node))


def taints_changed(node: VirtualNode) -> bool:
    """Whether the faults add taints to what the node spec alone gives: only then do its slices differ from
    its pool's (a thermal, power or fabric fault taints nothing)."""
    if not node.faults:
        return False
    return dict(fault_taints(node)) != dict(published_taints(LiveInventory(node.inventory)))
