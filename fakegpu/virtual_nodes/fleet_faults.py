"""Faults across a fleet of virtual nodes: which GPUs, when, and writing them (``fakegpu virtual-nodes --fault``,
``--recover``, and the cluster scenarios' fleet steps).

A plan (:func:`plan_fleet_faults`) is the targets and the schedule, worked out from the fleet's plan alone
(no API server): the GPUs of named nodes, of racks, of NVLink cliques, or a seeded random fraction of the GPUs
(of the whole fleet, or of the nodes named): the same seed picks the same GPUs in the same order, so a
rehearsal reproduces. Node, rack and clique targets take all GPUs of each node unless ``gpus`` names some; a
fraction picks GPUs itself. Once (``over`` 0: every node written at once, one write per node), or spread
over ``over`` seconds: one GPU at a time, the i-th of n at ``i * over / n`` (5 % of 1000 GPUs over 600 s: 50
faults, one every 12 s).

:func:`apply_plan` writes it with a :class:`fakegpu.virtual_nodes.controller.VirtualNodeController` (after its
``discover``; :func:`fleet_controller` makes one): per hit, the Node and its slices are read (each node, or the
fleet in pages when a fault hits so many nodes at once that this costs fewer calls), its ``fakegpu.io/gpu-
faults`` record changed, and the node brought in line by the controller's own per-node step (``sync``): the
annotation (and labels) in one patch, the status in another (device-plugin mode), the node's slices replaced
(DRA modes, when the taints change). Healthy nodes are never written. A node stored otherwise than this run's
pool flags plan it with the faults it records (its labels, capacity or slices: a bring-up with other flags, such
as another ``--config-file`` or without the health gate) is refused, and nothing of that batch is written:
writing would put this run's flags on it, silently. A :class:`Clock` paces the schedule
(:class:`ScaledClock` runs it N times faster for tests and CI); ``stop`` ends it between two hits.

Recovery (``recover``) removes recorded faults from the targeted GPUs, as the real device's way back
(``fakegpu.sharing.gpu_faults.FAULT_KINDS``) allows:

- ``thermal``, ``power``, ``fabric``: the cause went away; those faults go;
- ``reset``: a GPU reset, and the node's device plugin and DRA driver restarted after it: the XID, ECC and
  NVLink faults go. NVIDIA's plugins never mark a device healthy again by themselves (the device plugin keeps
  it unhealthy, the DRA driver its NoSchedule taint, until they restart), so on a real node a reset alone
  changes nothing Kubernetes shows; the restart is what an operator does next, and it is part of ``reset``;
- ``all``: the node was rebooted (or replaced): every fault goes, a GPU off the bus or lost too, which nothing
  but a reboot brings back.
"""

from __future__ import annotations

import asyncio
import collections
import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from lightkube import AsyncClient

from fakegpu.dra.feature_gates import NVML_DEVICE_HEALTH_CHECK, FeatureGates
from fakegpu.dra.slice_digest import SliceKey
from fakegpu.kube.page_sizes import NODE_PAGE, SLICE_KEY_PAGE
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.gpu_condition import RESET_ENDS
from fakegpu.sharing.gpu_faults import KINDS, GpuFault
from fakegpu.virtual_nodes.api import Api, ApiCallError
from fakegpu.virtual_nodes.controller import OWNED, Settings, VirtualNodeController
from fakegpu.virtual_nodes.node_manifest import is_ours
from fakegpu.virtual_nodes.pools import VirtualNode

RECOVERIES: Final = ("thermal", "power", "fabric", "reset", "all")
RECOVERED_KINDS: Final[dict[str, frozenset[str]]] = {
    "thermal": frozenset({"thermal"}),
    "power": frozenset({"power"}),
    "fabric": frozenset({"fabric"}),
    "reset": frozenset(RESET_ENDS),
    "all": frozenset(KINDS),
}
"""The fault kinds each recovery removes."""
UNTAINTED_KINDS: Final = frozenset({"thermal", "power", "fabric"})
"""Kinds that bring no XID and no lost GPU: NVIDIA's DRA driver taints nothing for them."""
MAX_OVER: Final = 7 * 24 * 3600.0
"""The longest schedule (a week): a typo guard."""
MAX_TIME_SCALE: Final = 100_000.0
OUTCOMES: Final = ("written", "unchanged", "missing", "refused", "failed")
"""A node's outcomes in a fault run, as its report counts them."""
_RACK_VALUE = re.compile(r"rack-([0-9]+)")

NodeFaults = dict[int, tuple[GpuFault, ...]]
JSON = dict[str, Any]


@dataclass(frozen=True)
class FaultTargets:
    """Which GPUs: at most one of ``nodes``, ``racks`` (``3`` or ``rack-3``), ``cliques`` (``<UUID>.<ID>``),
    optionally narrowed to a seeded ``fraction`` of their GPUs (of the whole fleet without them); ``gpus``
    the GPU indices of each node (None: all), not with a fraction."""

    nodes: tuple[str, ...] = ()
    racks: tuple[str, ...] = ()
    cliques: tuple[str, ...] = ()
    fraction: float | None = None
    seed: int = 0
    gpus: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Hit:
    """The GPUs of one node that the plan changes at ``at`` seconds from its start."""

    at: float
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class FleetFaultPlan:
    """What to do (``fault`` or ``recover``) and the schedule: hits in time order."""

    hits: tuple[Hit, ...]
    fault: GpuFault | None = None
    recover: str | None = None
    over: float = 0.0

    @property
    def gpu_count(self) -> int:
        return sum(len(h.gpus) for h in self.hits)

    @property
    def node_count(self) -> int:
        return len({h.node for h in self.hits})

    def what(self) -> str:
        return f"fault {self.fault.describe()}" if self.fault is not None else f"recover {self.recover}"

    def describe(self) -> str:
        """One line: what, on how many GPUs and nodes, and when."""
        when = "at once" if not self.over else f"over {self.over:g} s, one every {self.over / len(self.hits):g} s"
        return f"{self.what()}: {self.gpu_count} GPU(s) of {self.node_count} node(s), {when}"

    def change(self, gpus: Sequence[int]) -> Callable[[NodeFaults], NodeFaults]:
        """What a hit does to a node's record. A fault a GPU's record already holds is not added again: a re-run
        with the same arguments changes nothing (and writes nothing), as every other re-run."""
        if self.fault is not None:
            fault = self.fault

            def add(faults: NodeFaults) -> NodeFaults:
                added = {i: (*faults.get(i, ()), fault) for i in gpus if fault not in faults.get(i, ())}
                return {**faults, **added}

            return add
        gone = RECOVERED_KINDS[self.recover or "all"]
        return lambda faults: {
            i: tuple(f for f in fs if not (i in gpus and f.kind in gone)) for i, fs in faults.items()
        }


def check_fault(fault: GpuFault, where: str = "--fault") -> GpuFault:
    """A fault a virtual node can carry: ``after_calls`` counts a daemon's RPC calls, which a virtual node
    does not serve."""
    if fault.after_calls:
        raise SpecError(
            where,
            "after_calls counts a daemon's RPC calls and a virtual node serves none; use --fault-over to "
            "spread faults over time",
        )
    return fault


def rack_of(node: VirtualNode) -> str | None:
    """The rack a node of a rack layout sits in (``rack-<r>``, its rack label's value), None outside one."""
    return next((v for v in node.topology_labels.values() if _RACK_VALUE.fullmatch(v)), None)


def _clique_of(node: VirtualNode) -> str | None:
    fabric = node.inventory.node.fabric
    return fabric.clique if fabric is not None else None


def _selected(nodes: Sequence[VirtualNode], targets: FaultTargets) -> list[VirtualNode]:
    """The nodes the targets name (every node for a bare fraction); SpecError for a name that is none."""
    given = [
        flag
        for flag, on in (
            ("--fault-nodes", targets.nodes),
            ("--fault-racks", targets.racks),
            ("--fault-cliques", targets.cliques),
        )
        if on
    ]
    if len(given) > 1:
        raise SpecError(given[1], f"cannot be combined with {given[0]}: give one target")
    if not given:
        if targets.fraction is None:
            raise SpecError(
                "--fault-nodes", "no target: give --fault-nodes, --fault-racks, --fault-cliques or --fault-fraction"
            )
        return list(nodes)
    if targets.nodes:
        return _by_key(nodes, targets.nodes, lambda v: v.name, "--fault-nodes", "virtual node")
    if targets.racks:
        if not any(rack_of(v) for v in nodes):
            raise SpecError("--fault-racks", "the fleet has no racks: give the --racks of its bring-up")
        wanted = tuple(r if r.startswith("rack-") else f"rack-{r}" for r in targets.racks)
        return _by_key(nodes, wanted, rack_of, "--fault-racks", "rack")
    if not any(_clique_of(v) for v in nodes):
        raise SpecError("--fault-cliques", "no node of the fleet is on a multi-node NVLink fabric")
    return _by_key(nodes, targets.cliques, _clique_of, "--fault-cliques", "NVLink clique")


def _by_key(
    nodes: Sequence[VirtualNode], wanted: Sequence[str], key: Callable[[VirtualNode], str | None], flag: str, what: str
) -> list[VirtualNode]:
    known: dict[str, list[VirtualNode]] = collections.defaultdict(list)
    for node in nodes:
        value = key(node)
        if value is not None:
            known[value].append(node)
    out: list[VirtualNode] = []
    for name in dict.fromkeys(wanted):
        if name not in known:
            first, last = min(known), max(known)
            raise SpecError(flag, f"no {what} {name!r} in this fleet ({len(known)} of them, {first} to {last})")
        out += known[name]
    return out


def _pairs(selected: Sequence[VirtualNode], targets: FaultTargets) -> list[tuple[str, int]]:
    """The targeted (node, GPU index) pairs, in schedule order."""
    if targets.fraction is not None:
        if targets.gpus is not None:
            raise SpecError("--fault-gpus", "cannot be combined with --fault-fraction, which picks the GPUs")
        if not (math.isfinite(targets.fraction) and 0 < targets.fraction <= 1):
            raise SpecError("--fault-fraction", f"must be above 0 and at most 1, found {targets.fraction:g}")
        population = [(v.name, g.index) for v in selected for g in v.inventory.node.gpus]
        if not population:
            raise SpecError("--fault-fraction", "the targeted nodes have no GPUs")
        picked = max(1, math.floor(targets.fraction * len(population) + 0.5))
        return random.Random(targets.seed).sample(population, picked)
    pairs: list[tuple[str, int]] = []
    for node in selected:
        count = len(node.inventory.node.gpus)
        gpus = range(count) if targets.gpus is None else targets.gpus
        for index in gpus:
            if not 0 <= index < count:
                have = f"GPUs 0-{count - 1}" if count else "no GPUs"
                raise SpecError("--fault-gpus", f"GPU {index} is out of range: node {node.name} has {have}")
            pairs.append((node.name, index))
    return pairs


def plan_fleet_faults(
    nodes: Sequence[VirtualNode],
    targets: FaultTargets,
    *,
    fault: GpuFault | None = None,
    recover: str | None = None,
    over: float = 0.0,
) -> FleetFaultPlan:
    """The plan of one ``fault`` or one ``recover`` on the targets, at once or spread over ``over`` seconds;
    SpecError naming the flag for anything it cannot do."""
    if (fault is None) == (recover is None):
        raise SpecError("--fault", "give a fault or a --recover, one of them")
    if fault is not None:
        check_fault(fault)
    if recover is not None and recover not in RECOVERIES:
        raise SpecError("--recover", f"unknown recovery {recover!r}; expected one of: {', '.join(RECOVERIES)}")
    if not (math.isfinite(over) and 0 <= over <= MAX_OVER):
        raise SpecError("--fault-over", f"must be from 0 to {MAX_OVER:g} seconds, found {over:g}")
    pairs = _pairs(_selected(nodes, targets), targets)
    if over:
        step = over / len(pairs)
        hits = tuple(Hit(i * step, name, (gpu,)) for i, (name, gpu) in enumerate(pairs))
    else:
        by_node: dict[str, list[int]] = collections.defaultdict(list)
        for name, gpu in pairs:
            by_node[name].append(gpu)
        hits = tuple(Hit(0.0, name, tuple(sorted(gpus))) for name, gpus in by_node.items())
    return FleetFaultPlan(hits, fault, recover, over)


def gate_warning(plan: FleetFaultPlan, nodes: Sequence[VirtualNode], gates: FeatureGates) -> str | None:
    """One line when a fault would taint DRA devices but NVIDIA's driver would publish no taint: without its
    ``NVMLDeviceHealthCheck`` gate it taints nothing (the record is written all the same: the IMEX daemons and
    a later run with the gate read it)."""
    if plan.fault is None or plan.fault.kind in UNTAINTED_KINDS or gates.enabled(NVML_DEVICE_HEALTH_CHECK):
        return None
    hit = {h.node for h in plan.hits}
    if not any(v.publishes_slices for v in nodes if v.name in hit):
        return None
    return (
        f"warning: --fault: NVIDIA's DRA driver publishes no device taints without its {NVML_DEVICE_HEALTH_CHECK} "
        f"gate, so the ResourceSlices stay as they are (add --feature-gates {NVML_DEVICE_HEALTH_CHECK}=true)"
    )


class Clock(Protocol):
    """What paces a schedule: a monotonic time in the schedule's seconds, and a sleep in them."""

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class ScaledClock:
    """Real time, ``scale`` times faster (``--time-scale``): 600 schedule seconds pass in 6 at 100."""

    scale: float = 1.0

    def monotonic(self) -> float:
        return time.monotonic() * self.scale

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds / self.scale)


@dataclass
class FaultReport:
    """What :func:`apply_plan` did: hits done of the plan's, and each node's outcome."""

    total: int
    done: int = 0
    outcomes: dict[str, str] = field(default_factory=dict)
    """Per node: ``written``, ``unchanged`` (the record already said so), ``missing`` (no such virtual node in
    the cluster), ``refused`` (stored as other pool flags plan it) or ``failed``."""
    problems: dict[str, str] = field(default_factory=dict)
    stopped: bool = False

    @property
    def refused(self) -> bool:
        """Whether a node was refused: this run's pool flags are not its bring-up's (the schedule stops there,
        before anything of that batch is written)."""
        return "refused" in self.outcomes.values()

    @property
    def ok(self) -> bool:
        return not self.problems and not self.stopped

    def lines(self, plan: FleetFaultPlan) -> list[str]:
        counts = collections.Counter(self.outcomes.values())
        told = ", ".join(
            f"{counts[k]} {k}" for k in ("written", "unchanged", "missing", "refused", "failed") if counts[k]
        )
        head = f"{plan.what()}: {self.done}/{self.total} hit(s) done, node(s): {told or 'none'}"
        if self.stopped:
            head += " (stopped before the end of the schedule)"
        return [head, *(f"error: node {name}: {why}" for name, why in sorted(self.problems.items()))]


async def fleet_controller(
    client: AsyncClient,
    nodes: Sequence[VirtualNode],
    settings: Settings,
    say: Callable[[str], None] = lambda line: None,
    *,
    retry_pause: float = 0.2,
) -> VirtualNodeController:
    """A controller of the fleet ``nodes`` (as ``fakegpu.virtual_nodes.pools.build_virtual_nodes`` built it, with
    the bring-up's settings) on ``client``, its slice layout discovered: what :func:`apply_plan` writes with."""
    controller = VirtualNodeController(Api(client, backoff=retry_pause), nodes, settings, say)
    await controller.discover()
    return controller


async def _until(clock: Clock, seconds: float, stop: asyncio.Event | None) -> None:
    """Sleep ``seconds`` of the clock, or less if ``stop`` is set meanwhile."""
    if seconds <= 0:
        return
    if stop is None:
        await clock.sleep(seconds)
        return
    sleeping = asyncio.ensure_future(clock.sleep(seconds))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeping, stopping):
            task.cancel()
        await asyncio.gather(sleeping, stopping, return_exceptions=True)


async def apply_plan(
    controller: VirtualNodeController,
    plan: FleetFaultPlan,
    clock: Clock | None = None,
    stop: asyncio.Event | None = None,
    report: FaultReport | None = None,
) -> FaultReport:
    """Write the plan's hits on schedule (``controller`` discovered, ``clock`` a :class:`ScaledClock` by
    default); hits due at the same time go together, at most the controller's concurrency at once. ``report``
    (the caller's, to follow its progress) is filled in and returned."""
    clock = clock or ScaledClock()
    report = report or FaultReport(len(plan.hits))
    start = clock.monotonic()
    batches: dict[float, list[Hit]] = collections.defaultdict(list)
    for hit in plan.hits:
        batches[hit.at].append(hit)
    for at, hits in sorted(batches.items()):
        await _until(clock, start + at - clock.monotonic(), stop)
        if stop is not None and stop.is_set():
            report.stopped = True
            break
        read = await _read_fleet(controller, {h.node for h in hits}) if _listing_pays(controller, hits) else None
        ready = await asyncio.gather(*(_prepare_hit(controller, plan, hit, report, read) for hit in hits))
        if report.refused:  # every node of the batch checked first: a refusal writes none of them
            break
        await asyncio.gather(*(_write_hit(controller, r, report) for r in ready if r is not None))
    return report


Read = tuple[dict[str, JSON], dict[str, list[SliceKey]]]
"""What one read of the fleet gave: the targeted Nodes (absent: not in the cluster) and their slices."""


def _listing_pays(controller: VirtualNodeController, hits: Sequence[Hit]) -> bool:
    """Whether reading the whole fleet in pages costs fewer calls than reading each hit node (a get, and a
    list of its slices in the DRA modes): a fault on many nodes at once reads the fleet, one on a few nodes
    reads just them."""
    nodes = list(controller.nodes.values())
    pages = math.ceil(len(nodes) / NODE_PAGE)
    if controller.options is not None:
        slices = sum(controller.template(v).count for v in nodes if v.publishes_slices)
        pages += max(1, math.ceil(slices / SLICE_KEY_PAGE))
    each = sum(1 + controller.nodes[h.node].publishes_slices for h in hits if h.node in controller.nodes)
    return pages < each


async def _read_fleet(controller: VirtualNodeController, names: set[str]) -> Read:
    """The virtual Nodes named and every slice of theirs, in pages (as bring-up reads them)."""
    found: dict[str, JSON] = {}
    async for page in controller.api.node_pages(labels=OWNED):
        found.update({n["metadata"]["name"]: n for n in page if n["metadata"]["name"] in names})
    slices: dict[str, list[SliceKey]] = collections.defaultdict(list)
    if controller.options is not None:
        async for keys in controller.api.slice_pages(controller.options.api_version):
            for key in keys:
                if key.node in names:
                    slices[key.node].append(key)
    return found, slices


async def _prepare_hit(
    controller: VirtualNodeController, plan: FleetFaultPlan, hit: Hit, report: FaultReport, read: Read | None
) -> Prepared | None:
    """Read (unless the fleet read holds it) and check one hit's node; None when there is nothing to write
    (its outcome and any problem are in ``report``)."""
    async with controller.limit.slot():
        try:
            if read is None:
                ready = await prepare_node_faults(controller, hit.node, plan.change(hit.gpus))
            else:
                obj, slices = read[0].get(hit.node), read[1].get(hit.node, [])
                ready = await prepare_node_faults(controller, hit.node, plan.change(hit.gpus), obj, slices)
        except ApiCallError as exc:
            ready = "failed"
            report.problems[hit.node] = str(exc)
    if isinstance(ready, Prepared):
        return ready
    if ready == "missing":
        report.problems[hit.node] = "no such virtual node in the cluster (bring the fleet up first)"
    if ready.startswith("refused"):
        report.problems[hit.node] = ready.partition(": ")[2]
        ready = "refused"
    _note(report, hit.node, ready)
    return None


async def _write_hit(controller: VirtualNodeController, ready: Prepared, report: FaultReport) -> None:
    async with controller.limit.slot():
        try:
            outcome = await write_prepared(controller, ready)
        except ApiCallError as exc:
            outcome = "failed"
            report.problems[ready.name] = str(exc)
    _note(report, ready.name, outcome)


def _note(report: FaultReport, node: str, outcome: str) -> None:
    if report.outcomes.get(node) != "written":
        report.outcomes[node] = outcome
    report.done += 1


@dataclass(frozen=True)
class Prepared:
    """A node whose record a hit changes, read and checked: what :func:`write_prepared` writes."""

    name: str
    obj: JSON
    slices: list[SliceKey]
    after: NodeFaults


def _differs(controller: VirtualNodeController, name: str, obj: JSON, slices: list[SliceKey]) -> str | None:
    """What of the stored node differs from this run's plan of it with the faults it records (None: nothing):
    its labels, annotations, taints or status (capacity, allocatable), or its ResourceSlices. A difference means
    this run's pool flags are not those of the node's bring-up; writing would put this run's flags on it."""
    changes = controller.existing_of(obj).changes
    parts = []
    meta = (changes.node or {}).get("metadata") or {}
    parts += [f"labels {', '.join(sorted(meta['labels']))}"] if meta.get("labels") else []
    parts += [f"annotations {', '.join(sorted(meta['annotations']))}"] if meta.get("annotations") else []
    parts += ["taints"] if (changes.node or {}).get("spec") else []
    status = (changes.status or {}).get("status") or {}
    parts += [" and ".join(sorted(status))] if status else []
    uid = str((obj.get("metadata") or {}).get("uid") or "")
    if controller.options is not None and uid and not controller.slices_as_planned(name, slices, uid):
        parts.append("ResourceSlices")
    return "; ".join(parts) or None


async def prepare_node_faults(
    controller: VirtualNodeController,
    name: str,
    change: Callable[[NodeFaults], NodeFaults],
    obj: JSON | None = None,
    slices: list[SliceKey] | None = None,
) -> Prepared | str:
    """Read node ``name`` (one get and, in the DRA modes, one list of its slices, unless the caller read them:
    ``obj`` and ``slices``, a fleet read) and work out its changed record; ``missing``, ``unchanged``, or
    ``refused: <why>`` when the stored node is not what this run's pool flags plan with the faults it records
    (see :func:`_differs`): nothing is written then."""
    if slices is None:
        obj = await controller.api.get_node(name)
    if obj is None or not is_ours(obj) or name not in controller.bases:
        return "missing"
    controller.adopt_faults(obj)
    before = dict(controller.nodes[name].faults)
    after = {i: fs for i, fs in change(before).items() if fs}
    if after == before:
        return "unchanged"
    if slices is None and controller.options is not None and controller.nodes[name].publishes_slices:
        listed, _ = await controller.api.list_slices(
            controller.options.api_version, fields=controller.slice_fields(name)
        )
        slices = controller.relevant(listed)
    slices = slices or []
    differs = _differs(controller, name, obj, slices)
    if differs is not None:
        return (
            f"refused: this run's pool flags differ from its bring-up (they would change its {differs}); run "
            "--fault/--recover with the pool flags the fleet was brought up with; nothing written"
        )
    return Prepared(name, obj, slices, after)


async def write_prepared(controller: VirtualNodeController, ready: Prepared) -> str:
    """Set the prepared record and bring the node in line with it: one or two patches, and its slices replaced
    when their taints change. ``written``."""
    controller.set_faults(ready.name, ready.after)
    counts: collections.Counter[str] = collections.Counter()
    await controller.sync(controller.nodes[ready.name], ready.obj, ready.slices, may_create=False, counts=counts)
    return "written"


async def write_node_faults(
    controller: VirtualNodeController,
    name: str,
    change: Callable[[NodeFaults], NodeFaults],
    obj: JSON | None = None,
    slices: list[SliceKey] | None = None,
) -> str:
    """:func:`prepare_node_faults`, then :func:`write_prepared` when there is something to write: ``written``,
    ``unchanged``, ``missing`` or ``refused: <why>``."""
    ready = await prepare_node_faults(controller, name, change, obj, slices)
    return ready if isinstance(ready, str) else await write_prepared(controller, ready)
