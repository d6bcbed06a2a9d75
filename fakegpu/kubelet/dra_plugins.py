"""The kubelet's DRA plugin registry: the plugin watcher's handler for type ``DRAPlugin`` and the clients
that call ``NodePrepareResources`` / ``NodeUnprepareResources`` on the registered drivers.

Follows kubernetes ``pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go`` (v1.36): a plugin registers under
its driver name with the gRPC services it offers in ``supported_versions``; the kubelet takes the first
entry it supports itself (``v1.DRAPlugin``, ``v1beta1.DRAPlugin``), so a plugin listing ``v1.DRAPlugin``
first is called over v1. The rejection texts are the kubelet's. Several plugins of one driver may be
registered (rolling updates); the most recently registered one is called. A plugin goes when its
registration socket goes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from fakegpu.kubelet.grpc_errors import go_rpc_error
from fakegpu.kubelet.plugin_watcher import PluginHandler, RegistrationRejected
from fakegpu.kubeletapi.dra.v1 import api_pb2 as v1
from fakegpu.kubeletapi.dra.v1 import api_pb2_grpc as v1_grpc
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2 as v1beta1
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg_pb2
from fakegpu.sharing.go_quote import go_quote

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
V1_SERVICE = "v1.DRAPlugin"
V1BETA1_SERVICE = "v1beta1.DRAPlugin"
SERVICES_SUPPORTED_BY_KUBELET = (V1_SERVICE, V1BETA1_SERVICE)
"""``servicesSupportedByKubelet`` in ``pkg/kubelet/cm/dra/plugin/dra_plugin.go``, newest first."""
CALL_TIMEOUT = 45.0
"""``defaultClientCallTimeout``: half of the kubelet's retry period."""

Claim = tuple[str, str, str]
"""(namespace, name, uid), what NodePrepareResources carries per claim."""


def _go_quoted(values: Sequence[str]) -> str:
    """Go's ``%q`` of a ``[]string``: ``["a" "b"]``."""
    return "[" + " ".join(go_quote(v) for v in values) + "]"


def choose_service(supported: Sequence[str]) -> str:
    """The service the kubelet calls (``validateSupportedServices``); ValueError with its text otherwise."""
    if not supported:
        raise ValueError("empty list of supported gRPC services (aka supported versions)")
    for service in supported:
        if service in SERVICES_SUPPORTED_BY_KUBELET:
            return service
    raise ValueError(
        f"none of services supported by the plugin ({_go_quoted(supported)}) are supported by the kubelet "
        f"({_go_quoted(SERVICES_SUPPORTED_BY_KUBELET)})"
    )


@dataclass(frozen=True)
class PreparedDevice:
    """One device a driver prepared for a claim (``state.Device`` in the kubelet's checkpoint)."""

    pool_name: str
    device_name: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClaimAnswer:
    """A driver's answer for one claim: its devices, or its error (non-empty: the claim failed)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class RpcFailed(Exception):
    """The whole call failed (gRPC error); the text is Go's ``rpc error: code = ... desc = ...``."""


@dataclass
class DraPlugin:
    """One registered plugin of a driver: where it listens and which service the kubelet chose."""

    driver: str
    endpoint: Path
    service: str
    calls: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    """(driver, method, claim UIDs) of every call, shared with the registry's log."""

    async def _call(self, method: str, claims: Sequence[Claim]) -> Any:
        """One call of ``method`` over the chosen service (v1 and v1beta1 carry the same fields)."""
        self.calls.append((self.driver, method, tuple(uid for _ns, _n, uid in claims)))
        api: Any = v1 if self.service == V1_SERVICE else v1beta1
        stub_class: Any = v1_grpc.DRAPluginStub if self.service == V1_SERVICE else v1beta1_grpc.DRAPluginStub
        request = getattr(api, f"{method}Request")(
            claims=[api.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
        )
        async with grpc.aio.insecure_channel(f"unix://{self.endpoint}") as channel:
            try:
                return await getattr(stub_class(channel), method)(request, timeout=CALL_TIMEOUT)
            except grpc.aio.AioRpcError as exc:
                raise RpcFailed(go_rpc_error(exc)) from None

    async def prepare(self, claims: Sequence[Claim]) -> dict[str, ClaimAnswer]:
        """NodePrepareResources for ``claims``: the answer per claim UID (as the driver gave them)."""
        response = await self._call("NodePrepareResources", claims)
        return {
            uid: ClaimAnswer(
                tuple(
                    PreparedDevice(d.pool_name, d.device_name, tuple(d.request_names), tuple(d.cdi_device_ids))
                    for d in answer.devices
                ),
                answer.error,
            )
            for uid, answer in response.claims.items()
        }

    async def unprepare(self, claims: Sequence[Claim]) -> dict[str, str]:
        """NodeUnprepareResources for ``claims``: the error per claim UID ("" when done)."""
        response = await self._call("NodeUnprepareResources", claims)
        return {uid: answer.error for uid, answer in response.claims.items()}


class DraPluginRegistry:
    """The registered DRA plugins per driver, in registration order."""

    def __init__(self) -> None:
        self.plugins: dict[str, list[DraPlugin]] = {}
        self.calls: list[tuple[str, str, tuple[str, ...]]] = []
        """Every NodePrepareResources / NodeUnprepareResources call: (driver, method, claim UIDs)."""

    def get(self, driver: str) -> DraPlugin:
        """The plugin to call for ``driver`` (the most recent); LookupError with the kubelet's text."""
        if not driver:
            raise LookupError("DRA driver name is empty")
        plugins = self.plugins.get(driver)
        if not plugins:
            raise LookupError(f"DRA driver {driver} is not registered")
        return plugins[-1]

    def drivers(self) -> dict[str, list[dict[str, str]]]:
        """The registered drivers with each plugin's endpoint and chosen service (for ``status``)."""
        return {
            d: [{"endpoint": str(p.endpoint), "service": p.service} for p in plugins]
            for d, plugins in sorted(self.plugins.items())
        }

    def register(self, driver: str, endpoint: Path, supported: Sequence[str]) -> DraPlugin:
        """RegisterPlugin; ValueError with the kubelet's text when the plugin is refused."""
        try:
            service = choose_service(supported)
        except ValueError as exc:
            raise ValueError(
                f"invalid supported gRPC versions of DRA driver plugin {driver} at endpoint {endpoint}: {exc}"
            ) from None
        plugins = self.plugins.setdefault(driver, [])
        if any(p.endpoint == endpoint for p in plugins):
            raise ValueError(f"endpoint {endpoint} already registered for DRA driver plugin {driver}")
        plugin = DraPlugin(driver, endpoint, service, self.calls)
        plugins.append(plugin)
        log.info("Registered DRA plugin %s at %s (%s)", driver, endpoint, service)
        return plugin

    def deregister(self, driver: str, endpoint: Path) -> None:
        plugins = self.plugins.get(driver, [])
        self.plugins[driver] = [p for p in plugins if p.endpoint != endpoint]
        if not self.plugins[driver]:
            del self.plugins[driver]
        log.info("Unregistered DRA plugin %s at %s", driver, endpoint)

    def clear(self) -> None:
        """The kubelet stopped: plugins register again with the next one."""
        self.plugins.clear()

    def handler(self) -> PluginHandler:
        """The plugin watcher's handler for type ``DRAPlugin``."""

        async def register(info: reg_pb2.PluginInfo, endpoint: Path) -> None:
            try:
                self.register(info.name, endpoint, list(info.supported_versions))
            except ValueError as exc:
                raise RegistrationRejected(str(exc)) from None

        async def deregister(info: reg_pb2.PluginInfo) -> None:
            self.deregister(info.name, Path(info.endpoint))

        return PluginHandler(register, deregister)
