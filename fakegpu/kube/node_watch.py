"""Following one Node object: list it by name, then watch it from the list's resourceVersion.

The device plugin needs its own Node for two things (the config label it obeys and the labels it
writes), and must keep serving when the API server is away, so the watch reconnects quietly (the loop of
``fakegpu.kube.watch_loop``) and reports the node's latest state to a callback instead of raising.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import NoReturn

from lightkube import AsyncClient
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources.core_v1 import Node

from fakegpu.kube.backoff import RETRY_PAUSE
from fakegpu.kube.page_sizes import NODE_PAGE
from fakegpu.kube.watch_loop import collect, list_then_watch

log = logging.getLogger(__name__)


class NodeWatch:
    """Calls ``on_change(node)`` with the Node's newest version, or ``None`` while it does not exist."""

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        on_change: Callable[[Node | None], None],
        retry_interval: float = RETRY_PAUSE,
        on_failure: Callable[[Exception], None] | None = None,
    ) -> None:
        """``on_failure`` hears of each failed list or watch (it is retried all the same), for a caller to
        whom some failures are final, e.g. a refusal."""
        self.client = client
        self.on_failure = on_failure
        self.name = name
        self.on_change = on_change
        self.retry_interval = retry_interval
        """The first pause after a failed watch; later ones follow ``fakegpu.kube.backoff``."""
        self.errors = 0
        self._fields: dict[str, str | BinaryOperator | SequenceOperator] = {"metadata.name": name}

    async def run(self) -> NoReturn:
        await list_then_watch(
            self._list,
            lambda version: self.client.watch(Node, fields=self._fields, resource_version=version),
            on_list=self._listed,
            on_event=lambda event, node: self.on_change(None if event == "DELETED" else node),
            on_failure=self._failed,
            first_pause=self.retry_interval,
        )

    async def _list(self) -> tuple[list[Node], str]:
        return await collect(self.client.list(Node, fields=self._fields, chunk_size=NODE_PAGE))

    def _listed(self, found: Sequence[Node]) -> None:
        self.on_change(found[0] if found else None)

    def _failed(self, exc: Exception, pause: float) -> None:
        self.errors += 1
        log.warning("watching node %s failed (%s); watching again", self.name, exc)
        if self.on_failure is not None:
            self.on_failure(exc)
