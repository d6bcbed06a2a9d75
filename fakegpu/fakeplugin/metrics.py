"""The device plugin daemon's Prometheus metrics, in a registry of its own (see ``fakegpu.telemetry.rpc_metrics``).

- ``fakegpu_device_plugin_registrations_total{resource}``: successful Register calls to the kubelet,
  first and repeated;
- ``fakegpu_device_plugin_reregistrations_total{resource}``: of those, the ones for a resource that was
  registered before (kubelet restart, socket lost, plugins restarted);
- ``fakegpu_device_plugin_registration_failures_total{resource}``: Register calls the kubelet refused or
  that could not reach it;
- ``fakegpu_device_plugin_list_and_watch_sends_total{resource}``: device lists sent on ListAndWatch;
- ``fakegpu_device_plugin_list_and_watch_streams{resource}``: ListAndWatch streams open now;
- ``fakegpu_device_plugin_rpc_requests_total{resource,method,code}``: RPCs handled, by gRPC status code;
- ``fakegpu_device_plugin_rpc_duration_seconds{resource,method}``: RPC handling time (histogram);
- ``fakegpu_device_plugin_devices{resource,health}``: devices advertised now, ``Healthy`` and
  ``Unhealthy`` (both always present);
- ``fakegpu_config_reloads_total{result}``: config reloads, ``success`` or ``failure`` (after a failure
  the previous inventory keeps serving);
- ``fakegpu_build_info{version}``: always 1.

In ``plugins-registry`` mode the kubelet's plugin watcher registers the plugin and says how it went with
``NotifyRegistrationStatus``: each ``plugin_registered: true`` counts as a registration (a kubelet restart
re-registers, so it counts as a re-registration), each refusal as a registration failure.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.rpc_metrics import RpcMetrics, daemon_registry

HEALTH_VALUES = ("Healthy", "Unhealthy")


class _DeviceCollector(Collector):
    """Devices by resource and health, read from the live inventory at scrape time (always current)."""

    def __init__(self, live: LiveInventory) -> None:
        self.live = live

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "fakegpu_device_plugin_devices",
            "Devices advertised to the kubelet, by resource and health.",
            labels=["resource", "health"],
        )
        for resource in self.live.inventory.resources:
            if not resource.devices:
                continue  # not served (NVIDIA skips empty resources)
            healthy = resource.healthy
            family.add_metric([resource.name, "Healthy"], healthy)
            family.add_metric([resource.name, "Unhealthy"], len(resource.devices) - healthy)
        yield family


class DevicePluginMetrics:
    def __init__(self, live: LiveInventory, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else daemon_registry()
        self.registrations = Counter(
            "fakegpu_device_plugin_registrations_total",
            "Successful registrations with the kubelet, first and repeated.",
            ["resource"],
            registry=self.registry,
        )
        self.reregistrations = Counter(
            "fakegpu_device_plugin_reregistrations_total",
            "Registrations of a resource that was registered before (kubelet restart, socket lost, restart).",
            ["resource"],
            registry=self.registry,
        )
        self.registration_failures = Counter(
            "fakegpu_device_plugin_registration_failures_total",
            "Register calls the kubelet refused or that could not reach it.",
            ["resource"],
            registry=self.registry,
        )
        self.list_and_watch_sends = Counter(
            "fakegpu_device_plugin_list_and_watch_sends_total",
            "Device lists sent on ListAndWatch streams.",
            ["resource"],
            registry=self.registry,
        )
        self.list_and_watch_streams = Gauge(
            "fakegpu_device_plugin_list_and_watch_streams",
            "ListAndWatch streams open now.",
            ["resource"],
            registry=self.registry,
        )
        self.config_reloads = Counter(
            "fakegpu_config_reloads_total",
            "Config reloads by result; after a failure the previous inventory keeps serving.",
            ["result"],
            registry=self.registry,
        )
        self.rpc = RpcMetrics(
            self.registry,
            "fakegpu_device_plugin",
            scope_label="resource",
            scope_field="resource",
            logger=logging.getLogger("fakegpu.fakeplugin.rpc"),
        )
        self.registry.register(_DeviceCollector(live))
        self._registered_before: set[str] = set()
        for result in ("success", "failure"):
            self.config_reloads.labels(result=result)

    def serving(self, resource: str) -> None:
        """Start the resource's series at 0, so a first registration or send is a visible increase."""
        for family in (self.registrations, self.reregistrations, self.registration_failures, self.list_and_watch_sends):
            family.labels(resource=resource)
        self.list_and_watch_streams.labels(resource=resource)

    def registered(self, resource: str) -> None:
        self.registrations.labels(resource=resource).inc()
        if resource in self._registered_before:
            self.reregistrations.labels(resource=resource).inc()
        self._registered_before.add(resource)

    def registration_failed(self, resource: str) -> None:
        self.registration_failures.labels(resource=resource).inc()

    def reloaded(self, ok: bool) -> None:
        self.config_reloads.labels(result="success" if ok else "failure").inc()
