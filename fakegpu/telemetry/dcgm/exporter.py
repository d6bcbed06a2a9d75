"""The fake dcgm-exporter: DCGM metrics for the node's fake GPUs, computed per scrape.

Per scrape the exporter reads the live inventory (devices, health, XIDs), the last attribution (who holds
which device; refreshed by ``refresh()``, per ``scrape()`` or by the background loop ``start()`` runs) and
the deterministic model in ``fakegpu.telemetry.dcgm.gpu_activity``, and renders dcgm-exporter's names and labels
(``metric_names``) through a prometheus_client ``CollectorRegistry``. Serve ``exporter.registry`` on
``--dcgm-address`` (conventionally ``:9400``) at ``/metrics``.

Entities are what dcgm-exporter monitors with its default ``-d f``: each GPU, except that a GPU with MIG
instances is represented by its instances. A device plugin replica (``<uuid>::<n>``) counts on the GPU or
MIG instance behind it, and so does a DRA device (by UUID). A container given a whole MIG-enabled GPU (MIG
strategy ``none``) counts on each of its instances.

Pod attribution follows dcgm-exporter's Kubernetes mapper:

- default: one series per entity; when several containers share it (time-slicing, MPS, a shared claim)
  the last one the pod resources API lists names the series, as dcgm-exporter's device-to-pod map keeps
  the last writer. The values still reflect every workload on the device.
- ``virtual_gpus=True`` (dcgm-exporter's ``--kubernetes-virtual-gpus``): one series per (entity,
  container), identical values, with ``vgpu`` = the replica index; unallocated entities keep one plain
  series (dcgm-exporter >= 4.4 behaviour, after NVIDIA/dcgm-exporter#570).

``render()``/``scrape()`` write the text exactly as dcgm-exporter's template does: labels in its order
(``metric_names``), integer fields as ``%d`` and doubles as ``%f``, counters without series omitted.
The registry can also go through prometheus_client's ``generate_latest`` (any generic /metrics server):
the series are the same, but that encoder sorts label names and prints ``42.0``; Prometheus reads both
identically. ``DCGM_FI_DEV_XID_ERRORS`` is the last XID seen on the entity (every XID the live inventory
recorded, the ones NVIDIA's plugins ignore too) and, like DCGM's field, stays after the device recovers.
Faults (``LiveInventory.condition``) change the fields ``fault_fields`` lists; a GPU off the bus or lost has
no series at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry

from fakegpu.sharing.identifiers import strip_replica
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.sharing.node import MigInstance, PhysicalGpu
from fakegpu.telemetry.dcgm import metric_names as names
from fakegpu.telemetry.dcgm.attribution import AnnotationLookup, Attribution, DeviceHolder
from fakegpu.telemetry.dcgm.fault_fields import fault_values, reachable
from fakegpu.telemetry.dcgm.gpu_activity import (
    IDLE_FB_USED_MIB,
    IDLE_FB_USED_MIG_MIB,
    UTILIZATION_ANNOTATION,
    Activity,
    Thermals,
    Workload,
    activity,
    board_load,
    parse_target,
    thermals,
)

log = logging.getLogger(__name__)

DEFAULT_SEED = "fakegpu"
DEFAULT_STEP_SECONDS = 10.0
"""How often the modelled values move (the jitter's time step)."""
DEFAULT_REFRESH_SECONDS = 2.0
"""How often the background loop re-reads the attribution."""
MAX_LOGGED_ERRORS = 64
"""Distinct errors remembered as already logged (then the memory starts over)."""


@dataclass(frozen=True)
class Entity:
    """What DCGM monitors: a whole GPU, or one MIG instance of it."""

    gpu: PhysicalGpu
    mig: MigInstance | None = None

    @property
    def uuid(self) -> str:
        return self.mig.uuid if self.mig is not None else self.gpu.uuid

    @property
    def memory_mib(self) -> int:
        return self.mig.profile.memory_mib if self.mig is not None else self.gpu.model.memory_mib

    def labels(self, hostname: str, driver_version: str) -> names.EntityLabels:
        return names.EntityLabels(
            gpu=self.gpu.index,
            uuid=self.gpu.uuid,
            pci_bus_id=names.nvml_pci_bus_id(self.gpu.pci_bus_id),
            device=f"nvidia{self.gpu.minor}",
            model_name=self.gpu.model.product_name,
            hostname=hostname,
            driver_version=driver_version,
            mig_profile=self.mig.profile.name if self.mig is not None else None,
            gpu_instance_id=self.mig.gi_id if self.mig is not None else None,
        )


def entities(gpus: Iterable[PhysicalGpu]) -> list[Entity]:
    """dcgm-exporter's flex mode: a GPU's MIG instances when it has any, otherwise the GPU."""
    out: list[Entity] = []
    for gpu in gpus:
        if gpu.mig_enabled and gpu.mig_devices:
            out.extend(Entity(gpu, mig) for mig in gpu.mig_devices)
        else:
            out.append(Entity(gpu))
    return out


@dataclass(frozen=True)
class Holding:
    """One container on one entity, with what labels it."""

    holder: DeviceHolder
    replica: str | None
    """The ``::<n>`` index of a device plugin replica (the ``vgpu`` label), None otherwise."""

    @property
    def workload_key(self) -> str:
        return f"{self.holder.namespace}/{self.holder.pod}/{self.holder.container}"

    def attributes(self) -> dict[str, str]:
        attrs = {
            names.POD: self.holder.pod,
            names.NAMESPACE: self.holder.namespace,
            names.CONTAINER: self.holder.container,
        }
        dra = self.holder.dra
        if dra is not None:
            attrs[names.DRA_CLAIM_NAME] = dra.claim_name
            attrs[names.DRA_CLAIM_NAMESPACE] = dra.claim_namespace
            attrs[names.DRA_DRIVER_NAME] = dra.driver
            attrs[names.DRA_POOL_NAME] = dra.pool
            attrs[names.DRA_DEVICE_NAME] = dra.device
        return attrs


class DcgmExporter:
    """Builds dcgm-exporter's exposition for one node; see the module docstring."""

    def __init__(
        self,
        live: LiveInventory,
        attribution: Attribution,
        *,
        hostname: str | None = None,
        annotations: AnnotationLookup | None = None,
        seed: str | int = DEFAULT_SEED,
        clock: Callable[[], float] = time.time,
        step_seconds: float = DEFAULT_STEP_SECONDS,
        virtual_gpus: bool = False,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    ) -> None:
        self.live = live
        self.attribution = attribution
        self._hostname = hostname
        self.annotations = annotations
        self.seed = seed
        self.clock = clock
        self.step_seconds = step_seconds
        self.virtual_gpus = virtual_gpus
        self.refresh_seconds = refresh_seconds
        self.holders: list[DeviceHolder] = []
        self._last_xid: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._logged_errors: set[tuple[str, str]] = set()
        self.registry = CollectorRegistry()
        self.registry.register(_DcgmCollector(self))

    @property
    def hostname(self) -> str:
        """dcgm-exporter's ``Hostname``: ``NODE_NAME`` on Kubernetes, i.e. the node's name."""
        return self._hostname if self._hostname is not None else self.live.inventory.node.name

    # -- attribution ---------------------------------------------------------------------------
    async def refresh(self) -> list[DeviceHolder]:
        """Re-read who holds which device; a failing source keeps the last answer (and is logged once per
        distinct error, not on every scrape)."""
        try:
            self.holders = await self.attribution.holders()
        except Exception as exc:  # the exporter must keep serving whatever the source does
            self._log_once("attribution", exc, "DCGM exporter: attribution failed; keeping the last answer")
        else:
            self._forget_errors("attribution")
        return self.holders

    def _log_once(self, source: str, exc: Exception, message: str, *args: object) -> None:
        """Log a failure with its traceback the first time this error shows, while it keeps recurring."""
        key = (source, f"{type(exc).__name__}: {exc}")
        if key in self._logged_errors:
            return
        if len(self._logged_errors) >= MAX_LOGGED_ERRORS:
            self._logged_errors.clear()
        self._logged_errors.add(key)
        log.warning(message, *args, exc_info=exc)

    def _forget_errors(self, source: str) -> None:
        """The source works again: its next failure is news, and is logged."""
        if self._logged_errors:
            self._logged_errors = {k for k in self._logged_errors if k[0] != source}

    async def scrape(self) -> bytes:
        """Refresh the attribution, then render: what one HTTP scrape of dcgm-exporter returns."""
        await self.refresh()
        return self.render()

    def render(self) -> bytes:
        """The /metrics body, in dcgm-exporter's text layout."""
        return dcgm_text(self.registry.collect())

    async def start(self) -> None:
        """Refresh the attribution every ``refresh_seconds`` in the background (for servers that render
        the registry synchronously)."""
        if self._task is None:
            await self.refresh()
            self._task = asyncio.create_task(self._loop(), name="dcgm-attribution")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            await self.refresh()

    # -- values --------------------------------------------------------------------------------
    def step(self) -> int:
        return int(self.clock() // self.step_seconds) if self.step_seconds > 0 else 0

    def _target(self, holder: DeviceHolder) -> float | None:
        if self.annotations is None:
            return None
        try:
            found = self.annotations(holder.namespace, holder.pod)
        except Exception as exc:  # a lookup failure must not break the scrape
            self._log_once(
                "annotations",
                exc,
                "DCGM exporter: reading the annotations of %s/%s failed; using the default target",
                holder.namespace,
                holder.pod,
            )
            return None
        return parse_target(found.get(UTILIZATION_ANNOTATION))

    def holdings(self, by_uuid: dict[str, Entity]) -> dict[str, list[Holding]]:
        """Entity UUID -> holdings in attribution order, one per (container, replica).

        A container holding a whole GPU that DCGM sees as MIG instances (MIG strategy ``none`` hands out
        the MIG-enabled GPU itself) holds every instance of it: its load spreads over them all, so the
        board reads as busy as the workload asks."""
        instances: dict[str, list[Entity]] = {}
        for instance in by_uuid.values():
            if instance.mig is not None:
                instances.setdefault(instance.gpu.uuid, []).append(instance)
        out: dict[str, list[Holding]] = {}
        for holder in self.holders:
            base = strip_replica(holder.device_id)
            entity = by_uuid.get(base)
            held = [entity] if entity is not None else instances.get(base, [])
            if not held:
                continue  # another vendor's device, an index-strategy ID or a device gone after a reload
            replica = holder.device_id.split("::", 1)[1] if "::" in holder.device_id else None
            for one in held:
                out.setdefault(one.uuid, []).append(Holding(holder, replica))
        return out

    def _xids(self) -> dict[str, int]:
        """The last XID of every GPU and MIG UUID: every XID event the live inventory recorded (the ones the
        device plugin ignores too: DCGM watches NVML's XID events itself), kept after the events are
        forgotten, as DCGM's field keeps its last value."""
        for uuid, events in self.live.health_events().items():
            known = [e.xid for e in events if e.xid is not None]
            if known:
                self._last_xid[uuid] = known[-1]
        return self._last_xid

    def _budget(self, entity: Entity) -> int | None:
        """One workload's memory budget: an MPS replica's limit or a time-slicing replica's share."""
        for resource in self.live.inventory.resources:
            for device in resource.devices:
                if device.base_id == entity.uuid and device.replicas > 1:
                    if device.mps_memory_limit_mib is not None:
                        return device.mps_memory_limit_mib
                    return entity.memory_mib // device.replicas
        return None

    def families(self) -> list[Metric]:
        """Every counter's family with one sample per series, computed now."""
        node = self.live.inventory.node
        step = self.step()
        all_entities = entities(node.gpus)
        by_uuid = {e.uuid: e for e in all_entities}
        holdings = self.holdings(by_uuid)
        xids = self._xids()
        activities: dict[str, Activity] = {}
        for entity in all_entities:
            seen: dict[str, Workload] = {}
            for holding in holdings.get(entity.uuid, []):
                key = holding.workload_key
                if key not in seen:
                    seen[key] = Workload(key, self._target(holding.holder))
            activities[entity.uuid] = activity(
                list(seen.values()),
                memory_mib=entity.memory_mib,
                seed=self.seed,
                device=entity.uuid,
                step=step,
                budget_mib=self._budget(entity),
                idle_fb_mib=IDLE_FB_USED_MIG_MIB if entity.mig is not None else IDLE_FB_USED_MIB,
            )
        board: dict[str, Thermals] = {}
        for gpu in node.gpus:
            if gpu.mig_enabled and gpu.mig_devices:
                slices = gpu.model.compute_slices or 7
                load = board_load(
                    [(activities[m.uuid].util, m.profile.compute_slices) for m in gpu.mig_devices], slices
                )
            else:
                load = float(activities[gpu.uuid].util)
            board[gpu.uuid] = thermals(gpu.model, load, index=gpu.index, seed=self.seed, gpu=gpu.uuid, step=step)

        families = {c.name: Metric(c.name, c.help, c.type) for c in names.COUNTERS}
        for entity in all_entities:
            condition = self.live.condition(entity.gpu.uuid)
            if not reachable(condition):
                continue  # NVML has no handle for it: DCGM reads blank and dcgm-exporter skips every field
            act = activities[entity.uuid]
            values: dict[names.Counter, float] = {
                names.GPU_UTIL: act.util,
                names.MEM_COPY_UTIL: act.mem_copy_util,
                names.XID_ERRORS: xids.get(entity.uuid, 0),
                names.FB_FREE: act.fb_free_mib,
                names.FB_USED: act.fb_used_mib,
                names.GR_ENGINE_ACTIVE: act.gr_engine_active,
                names.PIPE_TENSOR_ACTIVE: act.tensor_active,
                names.DRAM_ACTIVE: act.dram_active,
                **fault_values(entity.gpu.model, condition, board[entity.gpu.uuid], busy=act.util > 0),
            }
            self._add_series(families, entity, values, holdings.get(entity.uuid, []))
        return [f for f in families.values() if f.samples]

    def _add_series(
        self, families: dict[str, Metric], entity: Entity, values: dict[names.Counter, float], held: list[Holding]
    ) -> None:
        """One sample per counter the entity has a value for, per attribute set (``_attribute_sets``)."""
        identity = entity.labels(self.hostname, self.live.inventory.node.driver_version)
        for attributes in self._attribute_sets(held):
            for counter in names.COUNTERS:
                if counter not in values or (entity.mig is not None and not counter.per_mig_instance):
                    continue
                attrs = dict(attributes)
                if counter is names.XID_ERRORS:
                    attrs.update(names.xid_attributes(int(values[counter])))
                families[counter.name].add_sample(counter.name, names.series_labels(identity, attrs), values[counter])

    def _attribute_sets(self, holdings: list[Holding]) -> list[dict[str, str]]:
        """The pod attributes of an entity's series: none when idle, the last holder's by default, one
        set per holding with ``virtual_gpus``."""
        if not holdings:
            return [{}]
        if not self.virtual_gpus:
            return [holdings[-1].attributes()]
        out: list[dict[str, str]] = []
        for holding in holdings:
            attrs = holding.attributes()
            if holding.replica is not None:
                attrs[names.VGPU] = holding.replica
            if attrs not in out:
                out.append(attrs)
        return out


class _DcgmCollector:
    """The prometheus_client collector: values are computed at collect time, never cached."""

    def __init__(self, exporter: DcgmExporter) -> None:
        self.exporter = exporter

    def describe(self) -> list[Metric]:
        return [Metric(c.name, c.help, c.type) for c in names.COUNTERS]

    def collect(self) -> list[Metric]:
        return self.exporter.families()


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format, as dcgm-exporter serves it."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def dcgm_text(metrics: Iterable[Metric]) -> bytes:
    """Prometheus text with dcgm-exporter's layout: labels in the order they were added (prometheus_client's
    own encoder sorts them) and values formatted per DCGM field type."""
    lines: list[str] = []
    for metric in metrics:
        if not metric.samples:
            continue
        counter = names.BY_NAME.get(metric.name)
        lines.append(f"# HELP {metric.name} {metric.documentation}")
        lines.append(f"# TYPE {metric.name} {metric.type}")
        for sample in metric.samples:
            labels = ",".join(f'{key}="{_escape(value)}"' for key, value in sample.labels.items())
            body = f"{{{labels}}}" if labels else ""
            lines.append(f"{sample.name}{body} {names.format_value(counter, sample.value)}")
    return ("\n".join(lines) + "\n").encode() if lines else b""
