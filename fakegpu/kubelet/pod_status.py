"""A pod's status as the kubelet writes it to the API server, and the writer that keeps it there.

:func:`pod_status` is the part of ``PodStatus`` the emulator knows: ``phase`` (with ``reason`` and ``message``
for a rejected pod) and one ``containerStatuses`` entry per regular container (``name``, ``image``,
``imageID``, ``ready``, ``restartCount``, ``started``, ``state``) with its ``allocatedResourcesStatus``
(``fakegpu.kubelet.resource_health``). Init containers and sidecars are not written (a kubelet writes them in
``initContainerStatuses``; nothing fakegpu shows lives there).

:class:`PodStatusWriter` writes it through the ``pods/status`` subresource (lightkube, merge patch) for the pods
it is told about, as the kubelet's status manager does (kubernetes ``pkg/kubelet/status/status_manager.go``): on
every change the kubelet emulator reports (``KubeletEmulator.subscribe``: device health, DRA health, pod phase),
and only when the computed status differs from the one it last wrote: no polling, no write of an unchanged
status. A failed write is tried again after a pause (the emulator's ``Backoff``: 0.2 s doubling to 5 s).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient
from lightkube.resources import core_v1
from lightkube.types import PatchType

from fakegpu.kubelet.dra_manager import Backoff
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.background_tasks import cancel_and_wait

log = logging.getLogger(__name__)


def container_statuses(kubelet: KubeletEmulator, uid: str) -> list[dict[str, Any]]:
    """The pod's ``status.containerStatuses`` as the API has them, ``allocatedResourcesStatus`` included."""
    pod = kubelet.pods[uid]
    health = kubelet.allocated_resources_status(uid)
    running = pod.phase == "Running"
    out = []
    for spec in pod.specs:
        if spec.kind != "app":
            continue
        status: dict[str, Any] = {
            "name": spec.name,
            "image": pod.images.get(spec.name, ""),
            "imageID": "",
            "ready": running,
            "restartCount": 0,
            "started": running,
            "state": {"running": {}} if running else {"waiting": {"reason": pod.reason} if pod.reason else {}},
        }
        if spec.name in health:
            status["allocatedResourcesStatus"] = health[spec.name]
        out.append(status)
    return out


def pod_status(kubelet: KubeletEmulator, uid: str) -> dict[str, Any]:
    """``phase`` (``reason`` and ``message`` of a rejected pod) and ``containerStatuses``."""
    pod = kubelet.pods[uid]
    status: dict[str, Any] = {"phase": pod.phase}
    if pod.phase == "Failed":
        status["reason"], status["message"] = pod.reason, pod.message
    status["containerStatuses"] = container_statuses(kubelet, uid)
    return status


@dataclass(frozen=True)
class TrackedPod:
    namespace: str
    name: str
    uid: str


class PodStatusWriter:
    """Keeps the status of the tracked pods in the API server behind ``client`` as the emulator computes it.

    ``async with PodStatusWriter(client, kubelet) as writer:`` (or ``await writer.start()`` ... ``await
    writer.stop()``), then ``writer.track(namespace, name, uid)`` for each pod that exists in that API server
    and runs on ``kubelet`` (``ManifestApplier`` does it for the pods it runs)."""

    def __init__(self, client: AsyncClient, kubelet: KubeletEmulator) -> None:
        self.client = client
        self.kubelet = kubelet
        self.pods: dict[str, TrackedPod] = {}
        self.written: dict[str, dict[str, Any]] = {}
        """The status last written per pod UID."""
        self.writes = 0
        self.passes = 0
        """Looks at the tracked pods finished (a test's barrier: a change before it has been looked at)."""
        self.last_error = ""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Any = None

    async def start(self) -> None:
        self._unsubscribe = self.kubelet.subscribe(self._wake.set)
        self._task = asyncio.create_task(self._run(), name="pod-status-writer")
        self._wake.set()

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        await cancel_and_wait([self._task])
        self._task = None

    async def __aenter__(self) -> PodStatusWriter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def track(self, namespace: str, name: str, uid: str) -> None:
        """Write this pod's status from now on (at once, and on every change)."""
        self.pods[uid] = TrackedPod(namespace, name, uid)
        self._wake.set()

    def untrack(self, uid: str) -> None:
        self.pods.pop(uid, None)
        self.written.pop(uid, None)

    def pending(self) -> list[str]:
        """UIDs of tracked pods whose computed status differs from the one written (a test's barrier)."""
        return [uid for uid in self.pods if uid in self.kubelet.pods and self.written.get(uid) != self._status(uid)]

    def _status(self, uid: str) -> dict[str, Any]:
        return pod_status(self.kubelet, uid)

    async def _run(self) -> None:
        delays = Backoff().delays()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if await self.flush():
                delays = Backoff().delays()
                continue
            await asyncio.sleep(next(delays))
            self._wake.set()

    async def flush(self) -> bool:
        """Write every tracked pod's status that changed; False when a write failed (``last_error``)."""
        ok = True
        for uid, pod in list(self.pods.items()):
            if uid not in self.kubelet.pods:
                continue  # deleted from the kubelet: whoever deleted it deletes the API object
            status = self._status(uid)
            if self.written.get(uid) == status:
                continue
            try:
                await self.client.patch(
                    core_v1.Pod.Status,
                    pod.name,
                    {"status": status},
                    namespace=pod.namespace,
                    patch_type=PatchType.MERGE,
                )
            except Exception as exc:  # lightkube's ApiError, or an unreachable server: try again later
                self.last_error = f"writing the status of pod {pod.namespace}/{pod.name}: {exc}"
                log.warning("%s", self.last_error)
                ok = False
                continue
            self.written[uid] = status
            self.writes += 1
        self.passes += 1
        return ok
