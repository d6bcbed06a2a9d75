"""The DRA driver's Prometheus metrics, in a registry of its own (see ``fakegpu.telemetry.rpc_metrics``).

- ``fakegpu_dra_rpc_requests_total{method,code}``: kubelet RPCs handled (NodePrepareResources,
  NodeUnprepareResources), by gRPC status code;
- ``fakegpu_dra_rpc_duration_seconds{method}``: RPC handling time (histogram);
- ``fakegpu_dra_prepared_claims``: claims prepared now (``PrepareCompleted`` in the checkpoint);
- ``fakegpu_dra_claim_prepares_total{result}``: claims the kubelet asked to prepare, ``success`` or ``failure``;
- ``fakegpu_dra_claim_unprepares_total{result}``: the same for unprepare;
- ``fakegpu_dra_resourceslice_publishes_total{result}``: publish passes, ``success`` (slices written),
  ``unchanged`` (nothing to write) or ``failure``;
- ``fakegpu_dra_devices{health}``: published devices, ``Healthy`` and ``Unhealthy`` (both always present);
- ``fakegpu_dra_registrations_total``: registrations the kubelet confirmed (``NotifyRegistrationStatus``
  with ``plugin_registered: true``; again after a kubelet restart or a registration socket served anew);
- ``fakegpu_dra_registration_failures_total``: registrations the kubelet refused (its error is logged);
- ``fakegpu_config_reloads_total{result}``: inventory reloads (SIGHUP), ``success`` or ``failure``;
- ``fakegpu_build_info{version}``: always 1.

A claim's gRPC call succeeds even when the claim fails (each claim gets its own error text, see
``fakegpu.dra.plugin_service``), so failed claims show in ``claim_prepares_total{result="failure"}``, not in
the RPC codes; those count whole-call failures such as injected faults.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from fakegpu.telemetry.rpc_metrics import RpcMetrics, daemon_registry

RESULTS = ("success", "failure")
PUBLISH_RESULTS = ("success", "unchanged", "failure")


class _StateCollector(Collector):
    """Published devices by health and prepared claims, read at scrape time (always current)."""

    def __init__(self, device_health: Callable[[], Iterable[bool]], prepared_claims: Callable[[], int]) -> None:
        self.device_health = device_health
        self.prepared_claims = prepared_claims

    def collect(self) -> Iterable[GaugeMetricFamily]:
        health = list(self.device_health())
        devices = GaugeMetricFamily(
            "fakegpu_dra_devices", "Devices published in ResourceSlices, by health.", labels=["health"]
        )
        devices.add_metric(["Healthy"], sum(health))
        devices.add_metric(["Unhealthy"], len(health) - sum(health))
        yield devices
        prepared = GaugeMetricFamily("fakegpu_dra_prepared_claims", "Claims prepared on this node now.")
        with contextlib.suppress(ValueError, OSError):  # an unusable checkpoint: no figure rather than a wrong one
            prepared.add_metric([], self.prepared_claims())
        yield prepared


class DraMetrics:
    """With ``device_health`` and ``prepared_claims`` (the driver's), also the gauges read from them."""

    def __init__(
        self,
        *,
        device_health: Callable[[], Iterable[bool]] | None = None,
        prepared_claims: Callable[[], int] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry if registry is not None else daemon_registry()
        self.rpc = RpcMetrics(
            self.registry,
            "fakegpu_dra",
            scope_label=None,
            scope_field="driver",
            logger=logging.getLogger("fakegpu.dra.rpc"),
        )
        self.claim_prepares = Counter(
            "fakegpu_dra_claim_prepares_total",
            "Claims the kubelet asked to prepare, by result (a failed claim still gets an answer).",
            ["result"],
            registry=self.registry,
        )
        self.claim_unprepares = Counter(
            "fakegpu_dra_claim_unprepares_total",
            "Claims the kubelet asked to unprepare, by result.",
            ["result"],
            registry=self.registry,
        )
        self.slice_publishes = Counter(
            "fakegpu_dra_resourceslice_publishes_total",
            "ResourceSlice publish passes: success (slices written), unchanged (nothing to write) or failure.",
            ["result"],
            registry=self.registry,
        )
        self.registrations = Counter(
            "fakegpu_dra_registrations_total",
            "Registrations the kubelet confirmed through NotifyRegistrationStatus.",
            registry=self.registry,
        )
        self.registration_failures = Counter(
            "fakegpu_dra_registration_failures_total",
            "Registrations the kubelet refused through NotifyRegistrationStatus.",
            registry=self.registry,
        )
        self.config_reloads = Counter(
            "fakegpu_config_reloads_total",
            "Inventory reloads by result; after a failure the previous inventory keeps serving.",
            ["result"],
            registry=self.registry,
        )
        for result in RESULTS:
            self.claim_prepares.labels(result=result)
            self.claim_unprepares.labels(result=result)
            self.config_reloads.labels(result=result)
        for result in PUBLISH_RESULTS:
            self.slice_publishes.labels(result=result)
        if device_health is not None and prepared_claims is not None:
            self.registry.register(_StateCollector(device_health, prepared_claims))

    def prepared(self, ok: bool) -> None:
        self.claim_prepares.labels(result="success" if ok else "failure").inc()

    def unprepared(self, ok: bool) -> None:
        self.claim_unprepares.labels(result="success" if ok else "failure").inc()

    def published(self, result: str) -> None:
        self.slice_publishes.labels(result=result).inc()

    def registration_status(self, registered: bool, error: str = "") -> None:
        """The kubelet's NotifyRegistrationStatus (a ``RegistrationService`` ``on_status`` callback)."""
        (self.registrations if registered else self.registration_failures).inc()

    def reloaded(self, ok: bool) -> None:
        self.config_reloads.labels(result="success" if ok else "failure").inc()
