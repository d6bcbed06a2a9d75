"""Following one Node object: list it by name, then watch it from the list's resourceVersion.

The device plugin needs its own Node for two things (the config label it obeys and the labels it
writes), and must keep serving when the API server is away, so the watch reconnects quietly and
reports the node's latest state to a callback instead of raising.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources.core_v1 import Node

log = logging.getLogger(__name__)


class NodeWatch:
    """Calls ``on_change(node)`` with the Node's newest version, or ``None`` while it does not exist."""

    def __init__(
        self, client: AsyncClient, name: str, on_change: Callable[[Node | None], None], retry_interval: float = 1.0
    ) -> None:
        self.client = client
        self.name = name
        self.on_change = on_change
        self.retry_interval = retry_interval
        self.errors = 0

    async def run(self) -> None:
        fields: dict[str, str | BinaryOperator | SequenceOperator] = {"metadata.name": self.name}
        while True:
            try:
                listing = self.client.list(Node, fields=fields)
                found = [n async for n in listing]
                self.on_change(found[0] if found else None)
                async for event, node in self.client.watch(
                    Node, fields=fields, resource_version=listing.resourceVersion
                ):
                    self.on_change(None if event == "DELETED" else node)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API server may be away for a while; the plugin keeps serving
                self.errors += 1
                log.warning("watching node %s failed (%s); watching again", self.name, exc)
                await asyncio.sleep(self.retry_interval)
