"""Who holds which device: the pod, namespace and container the DCGM exporter puts on a series.

Two sources, as the faces differ:

- ``PodResourcesAttribution`` asks the kubelet's pod resources API (``v1.PodResourcesLister/List`` on
  ``<kubelet root>/pod-resources/kubelet.sock``), exactly as dcgm-exporter does. Device plugin
  allocations come as the advertised device IDs (GPU UUIDs, MIG UUIDs, ``<uuid>::<n>`` replicas); DRA
  allocations (Kubernetes 1.34+, ``dynamic_resources``) come as driver/pool/device names, which an
  optional resolver turns into UUIDs. It serves the device plugin daemon, the kubelet emulator, and a
  DRA daemon next to a kubelet that fills ``dynamic_resources``.
- ``CallableAttribution`` wraps a function, for a process that already knows (a test).
- ``FallbackAttribution`` completes another source: the DRA daemon adds holders built from its prepared
  claims for the devices the kubelet's answer does not cover (a kubelet before 1.34 or with its
  ``KubeletPodResourcesDynamicResources`` gate off lists no ``dynamic_resources``).

Annotations are not in the pod resources API; an ``AnnotationLookup`` (namespace, pod) -> annotations is
given separately: the kubelet emulator offers ``pod_annotations``; in a cluster the daemon answers from a
pod cache it keeps through the API server.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from fakegpu.kubeletapi.podresources.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
LIST_TIMEOUT = 10.0
"""dcgm-exporter's connection timeout for List."""

AnnotationLookup = Callable[[str, str], Mapping[str, str]]
"""(namespace, pod name) -> the pod's annotations ({} when unknown)."""
DraDeviceResolver = Callable[[str, str, str], str | None]
"""(driver, pool, device name) -> the device's GPU or MIG UUID, None when it is not one of ours."""


def pod_resources_socket(kubelet_root: Path) -> Path:
    """The pod resources socket of a kubelet with ``--root-dir`` ``kubelet_root``."""
    return kubelet_root / "pod-resources" / "kubelet.sock"


def unix_target(socket: Path) -> str:
    """The gRPC target of a Unix socket: ``unix://`` takes an absolute path only (``unix://run/x.sock`` would
    name the authority ``run``), so a relative one (``--kubelet-dir kubelet``) is resolved first."""
    return f"unix://{os.path.abspath(socket)}"


@dataclass(frozen=True)
class DraDevice:
    """The DRA identity of an allocated device: dcgm-exporter's ``dra_*`` labels."""

    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class DeviceHolder:
    """One container holding one device."""

    device_id: str
    """A GPU or MIG UUID, with ``::<n>`` for a device plugin replica."""
    namespace: str
    pod: str
    container: str
    dra: DraDevice | None = None


class Attribution(Protocol):
    async def holders(self) -> list[DeviceHolder]:
        """Everything held right now, in the source's order (the pod resources API's pod order)."""
        ...


HolderSource = Callable[[], Iterable[DeviceHolder | tuple[str, str, str, str]]]
AsyncHolderSource = Callable[[], Awaitable[Iterable[DeviceHolder | tuple[str, str, str, str]]]]


class CallableAttribution:
    """Holders from a function (sync or async) returning ``DeviceHolder``s or ``(device, namespace, pod,
    container)`` tuples, where device is a GPU or MIG UUID."""

    def __init__(self, source: HolderSource | AsyncHolderSource) -> None:
        self.source = source

    async def holders(self) -> list[DeviceHolder]:
        result = self.source()
        if inspect.isawaitable(result):
            result = await result
        out: list[DeviceHolder] = []
        for item in result:
            if isinstance(item, DeviceHolder):
                out.append(item)
            else:
                device, namespace, pod, container = item
                out.append(DeviceHolder(device, namespace, pod, container))
        return out


def holders_from_list(
    response: api_pb2.ListPodResourcesResponse, dra_device_uuid: DraDeviceResolver | None = None
) -> list[DeviceHolder]:
    """Flatten a List answer: device plugin IDs as they are, DRA devices through the resolver (devices
    it does not know, e.g. another driver's, are skipped, as dcgm-exporter skips non-NVIDIA drivers)."""
    out: list[DeviceHolder] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                for device_id in devices.device_ids:
                    out.append(DeviceHolder(device_id, pod.namespace, pod.name, container.name))
            if dra_device_uuid is None:
                continue
            for dynamic in container.dynamic_resources:
                for claimed in dynamic.claim_resources:
                    uuid = dra_device_uuid(claimed.driver_name, claimed.pool_name, claimed.device_name)
                    if uuid is None:
                        continue
                    dra = DraDevice(
                        dynamic.claim_name,
                        dynamic.claim_namespace,
                        claimed.driver_name,
                        claimed.pool_name,
                        claimed.device_name,
                    )
                    out.append(DeviceHolder(uuid, pod.namespace, pod.name, container.name, dra))
    return out


HolderFallback = Callable[[list[DeviceHolder]], Awaitable[list[DeviceHolder]]]
"""Given what the primary source listed, the holders it missed (appended after them)."""


class FallbackAttribution:
    """``primary``'s holders, then those ``fallback`` adds for what ``primary`` did not cover. A failing
    fallback is logged once per distinct error and adds nothing."""

    def __init__(self, primary: Attribution, fallback: HolderFallback) -> None:
        self.primary = primary
        self.fallback = fallback
        self._last_error = ""

    async def holders(self) -> list[DeviceHolder]:
        listed = await self.primary.holders()
        try:
            extra = await self.fallback(list(listed))
        except Exception as exc:  # the primary's answer still stands
            message = f"{type(exc).__name__}: {exc}"
            if message != self._last_error:
                self._last_error = message
                log.warning("attribution fallback failed (%s); using the pod resources answer alone", message)
            return listed
        self._last_error = ""
        return [*listed, *extra]


class PodResourcesAttribution:
    """A grpc.aio client of the kubelet's pod resources API.

    No socket means no attribution (dcgm-exporter logs "No Kubelet socket, ignoring"). A failing List
    keeps the previous answer, so a kubelet restart does not make every GPU look idle for a moment."""

    def __init__(
        self,
        socket: Path = DEFAULT_POD_RESOURCES_SOCKET,
        *,
        dra_device_uuid: DraDeviceResolver | None = None,
        timeout: float = LIST_TIMEOUT,
    ) -> None:
        self.socket = socket
        self.dra_device_uuid = dra_device_uuid
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._last: list[DeviceHolder] = []
        self._last_error = ""

    def _stub(self) -> api_pb2_grpc.PodResourcesListerAsyncStub:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(unix_target(self.socket))
        return api_pb2_grpc.PodResourcesListerStub(self._channel)

    async def list_pod_resources(self) -> api_pb2.ListPodResourcesResponse:
        response: api_pb2.ListPodResourcesResponse = await self._stub().List(
            api_pb2.ListPodResourcesRequest(), timeout=self.timeout
        )
        return response

    async def holders(self) -> list[DeviceHolder]:
        if not self.socket.exists():
            if self._last_error != "missing":
                log.info("no kubelet pod resources socket at %s; series carry no pod labels", self.socket)
                self._last_error = "missing"
            self._last = []
            return []
        try:
            response = await self.list_pod_resources()
        except grpc.aio.AioRpcError as exc:
            message = f"{exc.code().name}: {exc.details()}"
            if message != self._last_error:
                log.warning("pod resources List on %s failed (%s); keeping the last answer", self.socket, message)
                self._last_error = message
            return list(self._last)
        self._last_error = ""
        self._last = holders_from_list(response, self.dra_device_uuid)
        return list(self._last)

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()
