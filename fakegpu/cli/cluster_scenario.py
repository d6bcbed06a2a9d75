"""Runs a cluster scenario (``fakegpu.testing.scenario.cluster_model``) against an API server through lightkube.

The same file runs against the tests' API server (where the test harness stands in for the scheduler and
the kubelet) and against a real cluster (``--kubeconfig``): the runner only creates objects, drives faults
(a virtual-node fleet's, through ``fakegpu.virtual_nodes``; a real node's, through its daemon's admin socket)
and reads what Kubernetes shows. It lives with the command line because it drives both the virtual nodes and
the admin plane, which only the command line may import together (``tests/test_layering.py``).

Each step prints one line as node scenarios do; an ``expect`` polls until its checks hold or its ``within``
passes, then fails with what it waited for and what the cluster last showed. Exit status: 0 all passed, 1 an
expectation failed, 2 a bad file (``SpecError``: file, step, field), 3 no daemon on the admin socket.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, NoReturn, TextIO, cast

import httpx2
from lightkube import ApiError, AsyncClient, codecs
from lightkube.core.exceptions import LoadResourceError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources import core_v1, resource_v1

from fakegpu.cli.virtual_nodes_command import (
    DEFAULT_RESYNC,
    add_virtual_nodes_parser,
    pools_from_args,
    settings_from_args,
)
from fakegpu.control.client import NoDaemonError, admin_call
from fakegpu.control.protocol import AdminError
from fakegpu.dra.compute_domain.resources import ComputeDomain
from fakegpu.kube.client import api_failure, client_target
from fakegpu.kube.discovery import DiscoveryError
from fakegpu.sharing.errors import SpecError
from fakegpu.testing.scenario.cluster_checks import (
    check_claim_taint,
    check_compute_domain,
    check_node_allocatable,
    check_phases,
    check_pod_group,
    check_pod_health,
    check_tainted_devices,
    check_unwritten,
    claim_name,
    gpu_under,
    slice_versions,
)
from fakegpu.testing.scenario.cluster_model import (
    APPLY_KINDS,
    ApplyStep,
    ClusterScenario,
    ClusterStep,
    ExpectArgs,
    ExpectStep,
    FleetFaultStep,
    FleetRecoverStep,
    NodeAllocatable,
    NodeFaultArgs,
    NodeFaultStep,
    VirtualNodesStep,
    WaitStep,
)
from fakegpu.testing.scenario.model import step_kind
from fakegpu.testing.scenario.output import EXIT_FAIL, EXIT_PASS, detail_lines, step_line
from fakegpu.testing.scenario.run_count import RunCount
from fakegpu.virtual_nodes.api import Api, ApiCallError
from fakegpu.virtual_nodes.controller import OWNED, Settings, VirtualNodeController
from fakegpu.virtual_nodes.fleet_faults import FaultTargets, FleetFaultPlan, ScaledClock, apply_plan, plan_fleet_faults
from fakegpu.virtual_nodes.pools import VirtualNode, build_virtual_nodes
from fakegpu.virtual_nodes.watcher import Watcher

JSON = dict[str, Any]
PodGroup = create_namespaced_resource("scheduling.k8s.io", "v1alpha2", "PodGroup", "podgroups")
"""Kubernetes 1.36's gang (KEP-4671, ``scheduling.k8s.io/v1alpha2``, served with the GenericWorkload gate)."""
Workload = create_namespaced_resource("scheduling.k8s.io", "v1alpha2", "Workload", "workloads")
POLL = 0.2
"""Seconds between two looks of an ``expect`` (wall clock: the API server is asked, not a clock)."""
CLUSTER_WIDE = frozenset({"Namespace", "DeviceClass"})
REFUSED_FLEET_FLAGS = (
    "--delete",
    "--dry-run",
    "--kubeconfig",
    "--fault",
    "--recover",
    "--fault-nodes",
    "--fault-racks",
    "--fault-cliques",
    "--fault-fraction",
    "--fault-over",
    "--time-scale",
)
"""``virtual-nodes`` options a scenario step cannot take: the scenario owns the client, the run's end and the
faults (its fleet steps). ``--watch`` keeps the fleet (and the IMEX daemons it plays) going in the background
until the scenario ends."""


class StepFailed(Exception):
    def __init__(self, details: Sequence[str]) -> None:
        super().__init__("; ".join(details))
        self.details = list(details)


@dataclass(frozen=True)
class ClusterOptions:
    """How ``scenario run`` was asked to run cluster scenarios."""

    kubeconfig: str | None = None
    admin_socket: str | None = None
    time_scale: float = 1.0
    """How much faster a fleet fault's schedule (its ``over``) runs than written. ``wait`` and ``within`` are not
    scaled: they measure how long the cluster takes to react (a scheduler, a kubelet, a controller), which runs
    at its own pace however fast the faults come."""
    cleanup: bool = False
    """Delete what the run created when it ends (``--cleanup``): a scenario's ``apply`` keeps objects that exist
    and a fleet stays up, so without it a second run meets the first one's leftovers."""


# -- the virtual-nodes options of a step ---------------------------------------------------------------
class _Refusal(Exception):
    pass


class _RaisingParser(argparse.ArgumentParser):
    """The virtual-nodes parser, raising instead of printing usage and exiting: a step's bad option is a
    one-line SpecError of the file."""

    def error(self, message: str) -> NoReturn:
        raise _Refusal(message)


def _fleet_parser() -> argparse.ArgumentParser:
    parser = _RaisingParser(prog="virtual-nodes", add_help=False)
    add_virtual_nodes_parser(cast(Any, parser.add_subparsers(dest="command")))
    return parser


@dataclass
class FleetPlan:
    args: argparse.Namespace
    nodes: list[VirtualNode]
    settings: Settings


def plan_fleet(options: str, source: str, where: str) -> FleetPlan:
    """A ``virtual_nodes`` step's options as ``fakegpu virtual-nodes`` takes them, turned into its nodes and
    settings; every problem a SpecError naming the step."""
    try:
        argv = shlex.split(options)
    except ValueError as exc:
        raise SpecError(source, f"cannot split the options: {exc}", where) from None
    refused = [a.split("=", 1)[0] for a in argv if a.split("=", 1)[0] in REFUSED_FLEET_FLAGS]
    if refused:
        raise SpecError(source, f"{refused[0]} cannot be given in a scenario (the scenario runs the fleet)", where)
    try:
        args = _fleet_parser().parse_args(["virtual-nodes", *argv])
        settings = settings_from_args(args, os.environ)
        nodes, _warnings = build_virtual_nodes(pools_from_args(args, os.environ), settings.name_prefix, None)
    except _Refusal as exc:
        raise SpecError(source, " ".join(str(exc).split()), where) from None
    except SpecError as exc:
        raise SpecError(source, f"{exc.source}: {exc.message}", where) from None
    return FleetPlan(args, nodes, settings)


def check_cluster_scenario(scenario: ClusterScenario) -> None:
    """What the schema cannot check: each ``virtual_nodes`` step's options; a fleet fault or an expectation
    on the fleet before any fleet is up; a ``node_fault`` without an admin socket."""
    fleet: FleetPlan | None = None
    for index, step in enumerate(scenario.steps):
        where = f"steps[{index}].{step_kind(step)}"
        if isinstance(step, VirtualNodesStep):
            fleet = plan_fleet(step.virtual_nodes, scenario.path, where)
        elif isinstance(step, FleetFaultStep | FleetRecoverStep):
            if fleet is None:
                raise SpecError(scenario.path, "comes before any virtual_nodes step: there is no fleet yet", where)
            fleet_plan(step, fleet.nodes, scenario.path, where)
        elif isinstance(step, ExpectStep) and step.expect.healthy_nodes_unwritten and fleet is None:
            raise SpecError(
                scenario.path,
                "comes before any virtual_nodes step: there is no fleet yet",
                f"{where}.healthy_nodes_unwritten",
            )


# -- the run ----------------------------------------------------------------------------------------
@dataclass
class Fleet:
    controller: VirtualNodeController
    nodes: list[VirtualNode]
    slices_before: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]


_FLEET_FIELDS = {
    "--fault": "fault",
    "--recover": "how",
    "--fault-nodes": "nodes",
    "--fault-racks": "racks",
    "--fault-cliques": "cliques",
    "--fault-fraction": "fraction",
    "--fault-over": "over",
    "--fault-gpus": "gpus",
}
"""The fleet library names the ``virtual-nodes`` flag of a bad target; a scenario names the step's field."""


def fleet_plan(
    step: FleetFaultStep | FleetRecoverStep,
    nodes: Sequence[VirtualNode],
    source: str,
    where: str,
    pod_node: str | None = None,
) -> FleetFaultPlan:
    """The fleet library's plan for a fleet step on the fleet ``nodes`` (``pod_node``: the node the step's
    ``pod`` runs on, known once running; the first node while checking); a target the fleet lacks is a
    SpecError naming the step's field."""
    by_pod = (pod_node or (nodes[0].name if nodes else ""),)
    try:
        if isinstance(step, FleetFaultStep):
            f = step.fleet_fault
            targets = FaultTargets(
                nodes=by_pod if f.pod else tuple(f.nodes or ()),
                racks=tuple(str(r) for r in f.racks or ()),
                cliques=tuple(f.cliques or ()),
                fraction=f.fraction,
                seed=f.seed,
                gpus=tuple(f.gpus) if f.gpus is not None else None,
            )
            return plan_fleet_faults(nodes, targets, fault=f.gpu_fault, over=f.over)
        r = step.fleet_recover
        every = not (r.nodes or r.pod or r.racks or r.cliques)
        targets = FaultTargets(
            nodes=by_pod if r.pod else tuple(r.nodes or ()),
            racks=tuple(str(n) for n in r.racks or ()),
            cliques=tuple(r.cliques or ()),
            fraction=1.0 if every else None,
            gpus=tuple(r.gpus) if r.gpus is not None else None,
        )
        return plan_fleet_faults(nodes, targets, recover=r.how)
    except SpecError as exc:
        field_name = _FLEET_FIELDS.get(exc.source)
        raise SpecError(source, exc.message, f"{where}.{field_name}" if field_name else where) from None


def _dict(obj: Any) -> JSON:
    out: JSON = obj.to_dict()
    return out


class ClusterScenarioRun:
    def __init__(
        self, scenario: ClusterScenario, client: AsyncClient, out: TextIO, options: ClusterOptions, count: RunCount
    ) -> None:
        self.scenario = scenario
        self.client = client
        self.out = out
        self.options = options
        self.count = count
        self.namespace = scenario.cluster.namespace
        self.fleet: Fleet | None = None
        self.stop = asyncio.Event()
        """Ends the fleets' ``--watch`` loops when the scenario ends."""
        self.watches: list[asyncio.Task[None]] = []
        self.created: list[tuple[Any, str, str | None]] = []
        """The objects this run created (kind, name, namespace), for ``--cleanup``; kept ones are not ours."""
        self.controllers: list[VirtualNodeController] = []

    async def run(self) -> int:
        try:
            return await self._run()
        finally:
            self.stop.set()
            await asyncio.gather(*self.watches, return_exceptions=True)
            if self.options.cleanup:
                await self._cleanup()
            elif self.created or self.controllers:
                left = [f"{len(self.created)} object(s) created"] if self.created else []
                left += [f"the virtual nodes of --name-prefix {c.settings.name_prefix}" for c in self.controllers]
                self.out.write(f"  left in the cluster: {' and '.join(left)} (--cleanup deletes them)\n")

    async def _cleanup(self) -> None:
        """``--cleanup``: delete the objects this run created, newest first (a Namespace last), then each fleet
        through the virtual-nodes library's delete (``virtual-nodes --delete`` with the step's prefix)."""
        deleted, nodes, problems = 0, 0, []
        for kind, name, namespace in reversed(self.created):
            try:
                await self.client.delete(kind, name, namespace=namespace)
                deleted += 1
            except ApiError as exc:
                if exc.status.code != HTTPStatus.NOT_FOUND:
                    problems.append(f"deleting {kind.__name__} {name}: {exc.status.message}")
            except (httpx2.HTTPError, OSError) as exc:
                problems.append(f"deleting {kind.__name__} {name}: {api_failure(exc, client_target(self.client))}")
        for controller in self.controllers:
            try:
                report = await controller.delete_all()
            except (ApiError, ApiCallError, DiscoveryError, httpx2.HTTPError, OSError) as exc:
                failure = api_failure(exc, client_target(self.client))
                problems.append(
                    f"deleting the virtual nodes of --name-prefix {controller.settings.name_prefix}: {failure}"
                )
                continue
            nodes += report.nodes_deleted
            problems += [f"virtual node {name}: {problem}" for name, problem in report.problems.items()]
        self.out.write(f"  cleanup: deleted {deleted} object(s) and {nodes} virtual node(s)\n")
        detail_lines(self.out, problems)

    async def _run(self) -> int:
        s = self.scenario
        self.out.write(f"scenario {s.name} ({s.issue}): {s.path}\n")
        self.out.write(f"  against the API server at {self.client.config.cluster.server}\n")
        if s.cluster.needs:
            # What a real cluster must have (and who must run the runner): read before it runs, not after.
            self.out.write(textwrap.fill(s.cluster.needs, 116, initial_indent="  needs: ", subsequent_indent="    "))
            self.out.write("\n")
        if self.options.time_scale != 1:
            self.out.write(f"  fleet fault schedules run {self.options.time_scale:g}x faster (--time-scale)\n")
        began = time.monotonic()
        for index, step in enumerate(s.steps):
            kind = step_kind(step)
            started = time.monotonic()
            try:
                note = await self._execute(step)
            except StepFailed as exc:
                return self._failed(index, step, started, began, exc.details)
            except SpecError as exc:
                raise SpecError(s.path, exc.message, f"steps[{index}].{kind}") from None
            except NoDaemonError as exc:
                # Exit 3 (the caller says how to start a daemon), but the step that met no daemon is shown.
                self._failed(index, step, started, began, [str(exc)])
                raise
            except (ApiError, ApiCallError, DiscoveryError, httpx2.HTTPError, OSError) as exc:
                failure = f"the API server failed: {api_failure(exc, client_target(self.client))}"
                return self._failed(index, step, started, began, [failure])
            text = describe_cluster_step(step)
            step_line(
                self.out, str(index), kind, f"{text}: {note}" if note else text, time.monotonic() - started, "PASS"
            )
            self.count.steps_done += 1
        self.out.write(f"PASS {s.name}: {len(s.steps)} step(s) in {time.monotonic() - began:.2f} s\n")
        return EXIT_PASS

    def _failed(self, index: int, step: ClusterStep, started: float, began: float, details: Sequence[str]) -> int:
        """The failing step's FAIL line, why, and the scenario's FAIL line."""
        kind = step_kind(step)
        step_line(self.out, str(index), kind, describe_cluster_step(step), time.monotonic() - started, "FAIL")
        detail_lines(self.out, details)
        self.out.write(f"FAIL {self.scenario.name} after {time.monotonic() - began:.2f} s\n")
        return EXIT_FAIL

    async def _execute(self, step: ClusterStep) -> str:
        match step:
            case ApplyStep():
                return await self._apply(step.documents)
            case VirtualNodesStep(virtual_nodes=options):
                return await self._virtual_nodes(options)
            case FleetFaultStep() | FleetRecoverStep():
                return await self._fleet_step(step)
            case NodeFaultStep(node_fault=args):
                return await self._node_fault(args)
            case WaitStep(wait=seconds):
                await asyncio.sleep(seconds)
                return ""
            case ExpectStep(expect=e):
                return await self._expect(e)
        raise AssertionError(f"unhandled step {step!r}")  # pragma: no cover

    # -- apply --------------------------------------------------------------------------------------
    async def _apply(self, docs: Sequence[Mapping[str, Any]]) -> str:
        outcomes: list[str] = []
        for kind in APPLY_KINDS:
            for doc in (d for d in docs if d["kind"] == kind):
                body = {**doc, "metadata": dict(doc["metadata"])}
                if kind not in CLUSTER_WIDE:
                    body["metadata"].setdefault("namespace", self.namespace)
                outcomes.append(await self._create(body))
        return ", ".join(f"{outcomes.count(o)} {o}" for o in ("created", "kept", "not served") if o in outcomes)

    async def _create(self, body: JSON) -> str:
        """Create one object: ``created``, ``kept`` (it exists: left as it is) or, for a Namespace on a server
        that serves none (the tests' API server by default), ``not served``."""
        try:
            obj = codecs.from_dict(body)
        except LoadResourceError as exc:
            raise SpecError(self.scenario.path, f"{body['kind']} {body['metadata']['name']}: {exc}") from None
        try:
            await self.client.create(obj)
        except ApiError as exc:
            if exc.status.code == HTTPStatus.CONFLICT:
                return "kept"
            if exc.status.code == HTTPStatus.NOT_FOUND and body["kind"] == "Namespace":
                return "not served"
            raise StepFailed([f"creating {body['kind']} {body['metadata']['name']}: {exc.status.message}"]) from None
        namespace = None if body["kind"] in CLUSTER_WIDE else body["metadata"].get("namespace")
        self.created.append((type(obj), body["metadata"]["name"], namespace))
        return "created"

    # -- faults -------------------------------------------------------------------------------------
    async def _virtual_nodes(self, options: str) -> str:
        plan = plan_fleet(options, self.scenario.path, "virtual_nodes")
        controller = VirtualNodeController(Api(self.client), plan.nodes, plan.settings, say=lambda line: None)
        self.controllers.append(controller)
        await controller.discover()
        report = await controller.bring_up()
        if not report.ok:
            raise StepFailed(report.lines())
        names = [n.name for n in plan.nodes]
        self.fleet = Fleet(controller, plan.nodes, slice_versions(await self._slices(), names))
        gpus = sum(len(n.inventory.node.gpus) for n in plan.nodes)
        note = f"{len(names)} nodes, {gpus} GPUs, {sum(controller.api.calls.values())} calls"
        if plan.args.watch:
            resync = plan.args.resync_interval or DEFAULT_RESYNC
            self.watches.append(asyncio.create_task(Watcher(controller, resync_interval=resync).run(self.stop)))
            note += ", watching"
        return note

    async def _fleet_step(self, step: FleetFaultStep | FleetRecoverStep) -> str:
        fleet = self.fleet
        if fleet is None:  # check_cluster_scenario refuses such a file before the run
            raise StepFailed(["no fleet: a virtual_nodes step must come first"])
        pod = step.fleet_fault.pod if isinstance(step, FleetFaultStep) else step.fleet_recover.pod
        node = None
        if pod is not None:
            node = str(((await self._pod(pod) or {}).get("spec") or {}).get("nodeName") or "")
            if node not in fleet.names:
                raise StepFailed([f"expected pod {pod} on a node of the fleet, got {node or 'no node'}"])
        plan = fleet_plan(step, fleet.nodes, self.scenario.path, step_kind(step), node)
        calls = sum(fleet.controller.api.calls.values())
        report = await apply_plan(fleet.controller, plan, clock=ScaledClock(self.options.time_scale))
        if not report.ok:
            raise StepFailed(report.lines(plan))
        made = sum(fleet.controller.api.calls.values()) - calls
        return f"{plan.gpu_count} GPUs on {plan.node_count} nodes, {made} calls"

    async def _node_fault(self, args: NodeFaultArgs) -> str:
        socket = args.socket or self.options.admin_socket or self.scenario.cluster.admin_socket
        if socket is None:
            raise SpecError(self.scenario.path, "no admin socket: give socket, cluster.admin_socket or --admin-socket")
        gpu = await self._gpu(args)
        fields = args.model_dump(exclude={"gpu", "gpu_of", "socket", "kind"}, exclude_defaults=True)
        try:
            result = await admin_call(socket, "gpu-fault", gpu=gpu, kind=args.kind, **fields)
        except NoDaemonError:
            raise
        except AdminError as exc:
            raise StepFailed([f"the daemon on {socket} refused gpu-fault: {exc}"]) from None
        return _fault_note(result)

    async def _gpu(self, args: NodeFaultArgs) -> str:
        """The ``gpu`` field of the op: given, or the GPU under the pod ``gpu_of`` names."""
        if args.gpu_of is None:
            return str(args.gpu)
        want = args.gpu_of
        pod = await self._pod(want.pod)
        if pod is None:
            raise StepFailed([f"gpu_of: expected pod {want.pod}, got no such pod"])
        claim = None
        if want.resource.startswith("claim:"):
            name = claim_name(pod, want.resource.removeprefix("claim:"))
            claim = await self._get(resource_v1.ResourceClaim, name) if name else None
        gpu = gpu_under(pod, want.resource, claim)
        if gpu is None:
            raise StepFailed([f"gpu_of: pod {want.pod} shows no GPU for {want.resource} (not running, or no status)"])
        return gpu

    # -- expect -------------------------------------------------------------------------------------
    async def _expect(self, expect: ExpectArgs) -> str:
        timeout = expect.within
        started = time.monotonic()
        problems = await self.look(expect)
        while problems:
            if time.monotonic() - started >= timeout:
                raise StepFailed([f"waited {timeout:g} s for: {describe_expect(expect)}", "last seen:", *problems])
            await asyncio.sleep(POLL)
            problems = await self.look(expect)
        waited = time.monotonic() - started
        return "held at once" if waited < POLL else f"held after {waited:.1f} s"

    async def look(self, expect: ExpectArgs) -> list[str]:
        """Every check of ``expect`` against what the API server shows now: the problems seen."""
        problems: list[str] = []
        slices: list[JSON] | None = None

        async def all_slices() -> list[JSON]:
            nonlocal slices
            if slices is None:
                slices = await self._slices()
            return slices

        if expect.pod_health is not None:
            problems += check_pod_health(await self._pod(expect.pod_health.pod), expect.pod_health)
        for names, phase in ((expect.pods_running, "Running"), (expect.pods_pending, "Pending")):
            if names is not None:
                problems += check_phases({n: await self._pod(n) for n in names}, phase)
        if expect.claim_taint is not None:
            want = expect.claim_taint
            pod = await self._pod(want.pod)
            name = claim_name(pod, want.claim) if pod is not None else None
            claim = await self._get(resource_v1.ResourceClaim, name) if name else None
            problems += check_claim_taint(pod, claim, await all_slices(), want)
        if expect.compute_domain is not None:
            domain = await self._get(ComputeDomain, expect.compute_domain.name)
            problems += check_compute_domain(domain, expect.compute_domain)
        if expect.pod_group is not None:
            problems += check_pod_group(await self._get(PodGroup, expect.pod_group.name), expect.pod_group)
        if expect.tainted_devices is not None:
            problems += check_tainted_devices(await all_slices(), expect.tainted_devices)
        if expect.node_allocatable is not None:
            problems += await self._allocatable(expect.node_allocatable)
        if expect.healthy_nodes_unwritten:
            problems += await self._unwritten(await all_slices())
        return problems

    async def _allocatable(self, want: NodeAllocatable) -> list[str]:
        name = want.node
        if name is None and want.pod is not None:
            pod = await self._pod(want.pod)
            name = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
        node = await self._get(core_v1.Node, name, namespaced=False) if name else None
        return check_node_allocatable(node, name or "", want)

    async def _unwritten(self, slices: list[JSON]) -> list[str]:
        fleet = self.fleet
        if fleet is None:
            return check_unwritten({}, slices, {})
        # One list of this tool's Nodes per look, not a read per fleet node (125 of them in the 5 % rehearsal).
        owned: dict[str, Any] = dict(OWNED)
        try:
            listed = [_dict(n) async for n in self.client.list(core_v1.Node, labels=owned)]
        except ApiError as exc:
            raise StepFailed([f"listing Node: {exc.status.message}"]) from None
        by_name = {str(n["metadata"]["name"]): n for n in listed}
        nodes = {n: by_name.get(n) for n in fleet.names}
        return check_unwritten(nodes, slices, fleet.slices_before)

    # -- reading ------------------------------------------------------------------------------------
    async def _get(self, kind: Any, name: str, *, namespaced: bool = True) -> JSON | None:
        try:
            if namespaced:
                return _dict(await self.client.get(kind, name, namespace=self.namespace))
            return _dict(await self.client.get(kind, name))
        except ApiError as exc:
            if exc.status.code == HTTPStatus.NOT_FOUND:
                return None
            raise StepFailed([f"reading {kind.__name__} {name}: {exc.status.message}"]) from None

    async def _pod(self, name: str) -> JSON | None:
        return await self._get(core_v1.Pod, name)

    async def _slices(self) -> list[JSON]:
        return [_dict(s) async for s in self.client.list(resource_v1.ResourceSlice)]


def _fault_note(result: Any) -> str:
    """What the daemon said it did: the GPU, the XIDs it reported, how many devices changed."""
    if not isinstance(result, dict):
        return str(result or "")
    xids = ", ".join(f"XID {x.get('xid')} ({x.get('class')})" for x in result.get("xids") or [])
    parts = [f"GPU {result.get('gpu')}", *([xids] if xids else []), f"{len(result.get('changed') or [])} device(s)"]
    return ", ".join(parts)


# -- describing steps ------------------------------------------------------------------------------
def describe_expect(e: ExpectArgs) -> str:
    parts: list[str] = []
    if e.pod_health is not None:
        parts.append(f"pod {e.pod_health.pod} {e.pod_health.resource} {e.pod_health.health}")
    if e.pods_running is not None:
        parts.append(f"running {', '.join(e.pods_running)}")
    if e.pods_pending is not None:
        parts.append(f"pending {', '.join(e.pods_pending)}")
    if e.claim_taint is not None:
        parts.append(f"claim {e.claim_taint.claim} of {e.claim_taint.pod} tainted {e.claim_taint.key}")
    if e.compute_domain is not None:
        parts.append(f"ComputeDomain {e.compute_domain.name} {e.compute_domain.status}")
    if e.pod_group is not None:
        reason = f" ({e.pod_group.reason})" if e.pod_group.reason else ""
        parts.append(f"PodGroup {e.pod_group.name} {e.pod_group.condition}={e.pod_group.status}{reason}")
    if e.tainted_devices is not None:
        parts.append(f"{e.tainted_devices.count} tainted device(s)")
    if e.node_allocatable is not None:
        wanted = ", ".join(f"{k}: {v}" for k, v in e.node_allocatable.resources.items())
        where = e.node_allocatable.node or f"the node of {e.node_allocatable.pod}"
        parts.append(f"{where} allocatable {wanted}")
    if e.healthy_nodes_unwritten:
        parts.append("healthy nodes unwritten")
    return "; ".join(parts)


def describe_cluster_step(step: ClusterStep) -> str:
    match step:
        case ApplyStep():
            docs = step.documents
            pods = [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]
            return f"{len(docs)} object(s)" + (f", pod(s) {', '.join(pods)}" if pods else "")
        case VirtualNodesStep():
            return "fakegpu virtual-nodes"
        case FleetFaultStep(fleet_fault=f):
            target = f.nodes or (f.pod and f"the node of {f.pod}") or f.racks or f.cliques
            spread = f", over {f.over:g} s" if f.over else ""
            return f"{f.fault}, {target or f'{f.fraction:.0%} (seed {f.seed})'}{spread}"
        case FleetRecoverStep(fleet_recover=r):
            target = r.nodes or (r.pod and f"the node of {r.pod}") or r.racks or r.cliques or "every node"
            return f"{r.how} on {target}"
        case NodeFaultStep(node_fault=n):
            gpu = f"GPU {n.gpu}" if n.gpu_of is None else f"the GPU under {n.gpu_of.pod} ({n.gpu_of.resource})"
            return f"{n.describe()} on {gpu}"
        case WaitStep(wait=seconds):
            return f"{seconds:g} s"
        case ExpectStep(expect=e):
            return describe_expect(e)
    raise AssertionError(f"unhandled step {step!r}")  # pragma: no cover


async def run_cluster_scenario(
    scenario: ClusterScenario,
    client_factory: Callable[[], AsyncClient],
    out: TextIO,
    options: ClusterOptions,
    count: RunCount | None = None,
) -> int:
    """Run one checked cluster scenario with a client of ``client_factory`` (closed afterwards)."""
    check_cluster_scenario(scenario)
    client = client_factory()
    try:
        return await ClusterScenarioRun(scenario, client, out, options, count or RunCount()).run()
    finally:
        await client.close()
