"""Which IMEX channels the device plugin hands to containers: NVIDIA v0.17's ``internal/imex/imex.go``.

NVIDIA's plugin turns each ``imex.channelIDs`` entry (only ``0`` passes validation) into the channel
``channel<id>`` at ``/dev/nvidia-caps-imex-channels/channel<id>`` and keeps it only if that character
device exists. On a fake node a channel exists when the node sits on an NVLink fabric (``fabric:`` in its
node spec) whose driver made that many channels (``fabric.imexChannels``). A missing channel is an error
when ``imex.required`` is set (``cmd/nvidia-device-plugin/plugin-manager.go`` wraps it as
``error querying IMEX channels: ...`` and the plugin does not start), else NVIDIA's warning and nothing is
injected. The channels found go to every allocation of every resource the plugin serves.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.node import Node
from fakegpu.sharing.nvlink_fabric import imex_channel_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImexChannel:
    """One channel as NVIDIA names it: ``ID`` ``"0"``, name ``channel0``, the device node's path."""

    id: str

    @property
    def name(self) -> str:
        return "channel" + self.id

    @property
    def path(self) -> str:
        return imex_channel_path(int(self.id))


def channel_exists(node: Node, channel_id: int) -> bool:
    """Whether the node has ``/dev/nvidia-caps-imex-channels/channel<id>`` (NVIDIA stats the char device)."""
    return node.fabric is not None and 0 <= channel_id < node.fabric.imex_channels


def _why_missing(node: Node) -> str:
    if node.fabric is None:
        return f"node {node.name} has no NVLink fabric; give it one with 'fabric:' in its node spec"
    return f"node {node.name}'s NVLink fabric has {node.fabric.imex_channels} IMEX channels (fabric.imexChannels)"


def imex_channels(inventory: Inventory) -> tuple[ImexChannel, ...]:
    """The configured channels that exist on the node: what Allocate and the CDI spec hand out."""
    node = inventory.node
    return tuple(ImexChannel(str(c)) for c in inventory.config.imex_channel_ids if channel_exists(node, c))


def check_imex_channels(inventory: Inventory) -> None:
    """Refuse an inventory whose required channels are missing, with NVIDIA's text (plugin-manager.go
    ``GetPlugins``: ``error querying IMEX channels: requested IMEX channel channel0 does not exist``)."""
    config, node = inventory.config, inventory.node
    if not config.imex_required:
        return
    for channel_id in config.imex_channel_ids:
        if not channel_exists(node, channel_id):
            name = ImexChannel(str(channel_id)).name
            raise SpecError(
                config.imex_required_origin,
                f"error querying IMEX channels: requested IMEX channel {name} does not exist ({_why_missing(node)})",
            )


def select_imex_channels(inventory: Inventory) -> tuple[ImexChannel, ...]:
    """NVIDIA's ``GetChannels`` at each (re)start of the plugins: raise as ``check_imex_channels``, log
    NVIDIA's line per channel (``Selecting IMEX channel channel0`` or, when it is missing and optional,
    ``Ignoring requested IMEX channel channel0 (<nil>)``: NVIDIA prints the nil stat error so) and
    return the channels found."""
    check_imex_channels(inventory)
    node = inventory.node
    for channel_id in inventory.config.imex_channel_ids:
        name = ImexChannel(str(channel_id)).name
        if channel_exists(node, channel_id):
            log.info("Selecting IMEX channel %s", name)
        else:
            log.warning("Ignoring requested IMEX channel %s (<nil>); nothing injected: %s", name, _why_missing(node))
    return imex_channels(inventory)
