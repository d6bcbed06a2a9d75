"""What a real cluster does around a cluster scenario, for the tests' API server (where nothing schedules and no
kubelet runs): the scenario files stay as they would run on a real cluster, these stand in for the rest.

- :class:`PodPlacer`: kube-scheduler, the resourceclaim controller and the node's kubelet for one node: it
  follows the pods of a namespace, and each new one without a node gets its claims made from their templates,
  allocated by ``fakegpu.scheduling.allocator`` (as ``fakegpu.testing.manifest_apply`` does), is bound to the
  node and run on the kubelet emulator, whose ``PodStatusWriter`` writes its status back;
- :class:`NodeStatusWriter`: the kubelet's node status update, writing the kubelet emulator's capacity and
  allocatable to the Node when they change (kubernetes ``pkg/kubelet/nodestatus/setters.go`` ``MachineInfo``,
  v1.36).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from lightkube import AsyncClient
from lightkube.resources import core_v1
from lightkube.types import PatchType

from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.testing.manifest_apply import AppliedPod, ManifestApplier

POLL = 0.05


class PodPlacer:
    """Places each new pod of ``namespace`` on the applier's node (one pod at a time, in creation order)."""

    def __init__(self, applier: ManifestApplier, namespace: str) -> None:
        self.applier = applier
        self.namespace = namespace
        self.placed: dict[str, AppliedPod] = {}
        self.errors: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PodPlacer:
        self._task = asyncio.create_task(self._run(), name="pod-placer")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await cancel_and_wait([self._task])

    async def _run(self) -> None:
        client = self.applier.client
        while True:
            async for pod in client.list(core_v1.Pod, namespace=self.namespace):
                obj: dict[str, Any] = pod.to_dict()
                name = obj["metadata"]["name"]
                if name in self.placed or (obj.get("spec") or {}).get("nodeName"):
                    continue
                self.placed[name] = await self._place(obj)
            await asyncio.sleep(POLL)

    async def _place(self, pod: dict[str, Any]) -> AppliedPod:
        meta = pod["metadata"]
        await self.applier.client.patch(
            core_v1.Pod,
            meta["name"],
            {"spec": {"nodeName": self.applier.node}},
            namespace=meta["namespace"],
            patch_type=PatchType.MERGE,
        )
        pod = {**pod, "spec": {**pod["spec"], "nodeName": self.applier.node}}
        placed = await self.applier.run_created(pod, await self.applier._templates(pod))
        if placed.unschedulable:
            self.errors.append(placed.unschedulable)
        return placed


class NodeStatusWriter:
    """Writes the kubelet emulator's extended resources to the Node's ``status.capacity``/``allocatable``."""

    def __init__(self, client: AsyncClient, kubelet: KubeletEmulator, node: str) -> None:
        self.client = client
        self.kubelet = kubelet
        self.node = node
        self.written: dict[str, dict[str, str]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Any = None

    async def __aenter__(self) -> NodeStatusWriter:
        self._unsubscribe = self.kubelet.subscribe(self._wake.set)
        self._task = asyncio.create_task(self._run(), name="node-status-writer")
        self._wake.set()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._unsubscribe()
        await cancel_and_wait([self._task])

    def _status(self) -> dict[str, dict[str, str]]:
        return {
            "capacity": {k: str(v) for k, v in self.kubelet.capacity().items()},
            "allocatable": {k: str(v) for k, v in self.kubelet.allocatable().items()},
        }

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            status = self._status()
            if status != self.written:
                await self.client.patch(core_v1.Node.Status, self.node, {"status": status}, patch_type=PatchType.MERGE)
                self.written = status
