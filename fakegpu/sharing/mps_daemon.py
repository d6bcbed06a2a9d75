"""What NVIDIA's MPS control daemon refuses to start with, for the device plugin to reproduce.

NVIDIA v0.20.0 accepts any replica count in the config; the MPS control daemon
(``cmd/mps-control-daemon/mps/device.go`` ``assertReplicas``) then refuses more clients than an MPS
server supports, and the plugin, whose ``waitForDaemon`` (``internal/plugin/mps.go``) finds no daemon
answering, does not start that resource. Pure: no I/O.
"""

from __future__ import annotations

from fakegpu.sharing.inventory import Resource
from fakegpu.sharing.node import Node

MPS_MAX_CLIENTS = 48
"""Clients per MPS server from compute capability 7.5 on (NVIDIA's ``isAtLeastVolta`` compares with 7.5)."""
MPS_MAX_CLIENTS_LEGACY = 16

PLUGIN_WAIT_ERROR = (
    "error waiting for MPS daemon: error checking MPS daemon health: failed to send command to MPS daemon: "
    "exit status 1"
)
"""The device plugin's error when no MPS daemon answers (``Failed to start plugin: ...`` in its log)."""


def max_clients(node: Node, gpu_index: int) -> int:
    return MPS_MAX_CLIENTS if node.gpus[gpu_index].model.compute_capability >= (7, 5) else MPS_MAX_CLIENTS_LEGACY


def mps_daemon_error(resource: Resource, node: Node) -> str | None:
    """The control daemon's start error for this resource (its log line), or None if it would run."""
    if resource.sharing != "mps":
        return None
    for device in resource.devices:
        cap = max_clients(node, device.parent_index)
        if device.replicas > cap:
            return (
                "invalid MPS configuration: invalid device maximum allowed replicas exceeded: "
                f"{device.replicas} > {cap}"
            )
    return None
