"""``fakegpu cleanup --wait``: take ``nvidia.com/*`` off the Node's status until the kubelet stops putting it back.

A kubelet whose device plugin went away keeps the plugin's resource for its grace period (5 minutes,
``fakegpu.kubelet.device_manager.ENDPOINT_STOP_GRACE_PERIOD``), and each node status update (every 10 s by
default; within 3 s on a real Kubernetes v1.36.2 cluster) writes it back, capacity as before and allocatable
0; when the period ends it writes capacity 0 once more and then leaves it. So removing it once is not
enough: this follows the Node (``fakegpu.kube.node_watch``, which lists, watches and backs off like every
fakegpu watcher) and removes the resources each time they come back, until they have stayed off for
``settle`` seconds, or gives up after ``timeout`` seconds and says what remains.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TextIO

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node, NodeStatus
from lightkube.types import PatchType

from fakegpu.kube.event_wait import wait_event
from fakegpu.kube.node_watch import NodeWatch
from fakegpu.kubelet.device_manager import ENDPOINT_STOP_GRACE_PERIOD

STATUS_FIELDS: Final = ("capacity", "allocatable")
RESOURCE_PREFIX: Final = "nvidia.com/"
"""Extended resources fakegpu advertises (NVIDIA's names: nvidia.com/gpu, nvidia.com/mig-1g.10gb, ...)."""
DEFAULT_SETTLE: Final = 30.0
"""Three of the kubelet's default 10 s node status updates: a resource the kubelet still keeps is back by then."""
DEFAULT_WAIT_TIMEOUT: Final = ENDPOINT_STOP_GRACE_PERIOD + 2 * 60.0
"""The kubelet's grace period, the settle time after it and room to spare."""


def status_fields(node: Node | None) -> dict[str, Mapping[str, Any]]:
    """The Node's ``status.capacity`` and ``status.allocatable`` (empty when it has none)."""
    status = node.status if node is not None else None
    return {name: getattr(status, name, None) or {} for name in STATUS_FIELDS} if status is not None else {}


def owned_quantities(status: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """``{"capacity": {"nvidia.com/gpu": "2"}, ...}``: the ``nvidia.com/*`` quantities per status field, as
    cleanup lists, removes and waits for them."""
    found: dict[str, dict[str, str]] = {}
    for name in STATUS_FIELDS:
        mine = {k: str(v) for k, v in sorted((status.get(name) or {}).items()) if k.startswith(RESOURCE_PREFIX)}
        if mine:
            found[name] = mine
    return found


def status_resources(node: Node | None) -> dict[str, dict[str, str]]:
    """The Node's ``nvidia.com/*`` quantities per status field."""
    return owned_quantities(status_fields(node))


def status_lines(found: dict[str, dict[str, str]]) -> list[str]:
    return [f"status.{name} {k}={v}" for name, values in found.items() for k, v in values.items()]


def status_patch(found: dict[str, dict[str, str]]) -> dict[str, dict[str, dict[str, None]]]:
    """A merge patch of ``nodes/status`` nulling each quantity in ``found``."""
    return {"status": {name: dict.fromkeys(values) for name, values in found.items()}}


def duration(seconds: float) -> str:
    """``45 s``, ``5m20s``."""
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


@dataclass(frozen=True)
class WaitLimits:
    settle: float = DEFAULT_SETTLE
    """How long the resources must stay off the Node."""
    timeout: float = DEFAULT_WAIT_TIMEOUT
    """When to give up."""


class StatusWait:
    """Follows one Node and keeps its ``nvidia.com/*`` status off; ``run`` returns what remains."""

    def __init__(self, client: AsyncClient, node_name: str, out: TextIO, limits: WaitLimits) -> None:
        self.client = client
        self.node_name = node_name
        self.out = out
        self.limits = limits
        self.removals = 0
        self._latest: Node | None = None
        self._last_removed: dict[str, dict[str, str]] = {}
        self._refused: ApiError | None = None
        self._seen = asyncio.Event()

    def _on_change(self, node: Node | None) -> None:
        self._latest = node
        self._seen.set()

    def _on_failure(self, exc: Exception) -> None:
        """A refused list or watch (401, 403: no grant for ``--wait``) is final, not a pause: without it the
        wait would hear nothing and take the silence for the resources staying off."""
        if isinstance(exc, ApiError) and exc.status.code in (401, 403):
            self._refused = exc
            self._seen.set()

    async def run(self) -> list[str]:
        """Remove until nothing came back for ``settle`` seconds (``[]``), or the lines of what remains at
        ``timeout``."""
        started = time.monotonic()
        self.out.write(
            f"waiting until node {self.node_name} keeps no {RESOURCE_PREFIX}* in its status for "
            f"{duration(self.limits.settle)} (the kubelet puts them back until its grace period of "
            f"{duration(ENDPOINT_STOP_GRACE_PERIOD)} ends; giving up after {duration(self.limits.timeout)})\n"
        )
        self.out.flush()
        watch = asyncio.create_task(
            NodeWatch(self.client, self.node_name, self._on_change, on_failure=self._on_failure).run()
        )
        try:
            async with asyncio.timeout(self.limits.timeout):
                await self._until_settled(started)
        except TimeoutError:
            # Off at this instant perhaps, but they kept coming back: name what did last.
            remaining = status_resources(self._latest) or self._last_removed
            return status_lines(remaining) or [f"no word from the API server about node {self.node_name}"]
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        self.out.write(
            f"node {self.node_name} kept no {RESOURCE_PREFIX}* in its status for {duration(self.limits.settle)} "
            f"(waited {duration(time.monotonic() - started)}, removed {self.removals} time(s) more)\n"
        )
        return []

    async def _until_settled(self, started: float) -> None:
        quiet_from: float | None = None  # no word yet is not quiet: the first answer starts the count
        while True:
            if quiet_from is None:
                await self._seen.wait()
            else:
                left = quiet_from + self.limits.settle - time.monotonic()
                if left <= 0 or not await wait_event(self._seen, left):
                    return
            self._seen.clear()
            if self._refused is not None:
                raise self._refused
            if quiet_from is None:
                quiet_from = time.monotonic()
            found = status_resources(self._latest)
            if not found:
                continue
            await self.client.patch(NodeStatus, self.node_name, status_patch(found), patch_type=PatchType.MERGE)
            self.removals += 1
            self._last_removed = found
            quiet_from = time.monotonic()
            since = duration(quiet_from - started)
            for line in status_lines(found):
                self.out.write(f"removed again ({since}): {line}\n")
            self.out.flush()
