"""``fakegpu virtual-nodes``: the command line.

Bad flags and files raise ``SpecError`` (``fakegpu``'s main prints one line and exits 2). API failures
print one line each; the exit status is 1 when a node was refused or failed, or the server could not be
used at all, and 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TextIO

import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ConfigError

from fakegpu.cli.compute_domain_controller_command import _namespace
from fakegpu.cli.fleet_fault_options import add_fault_options, check_fault_flags, fault_mode, fault_plan_from_args
from fakegpu.cli.inventory_options import add_inventory_options, inventory_inputs
from fakegpu.cli.progress import progress
from fakegpu.cli.slice_commands import add_slice_options, check_api_version_served, virtual_node_gates
from fakegpu.dra.compute_domain.resources import DRIVER_NAMESPACE
from fakegpu.dra.resource_slices import check_driver_name
from fakegpu.kube.client import KUBECONFIG_HELP, api_failure, client_factory, client_target
from fakegpu.kube.discovery import DiscoveryError
from fakegpu.kube.lean_requests import LongCall
from fakegpu.runtime.bounded_run import run_bounded
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.rack_layout import NVL72_NODES_PER_RACK, RackLayout, TopologyKeys, parse_topology_keys
from fakegpu.virtual_nodes.api import LONG_CALL, Api, ApiCallError, KubeconfigError
from fakegpu.virtual_nodes.controller import Settings, VirtualNodeController
from fakegpu.virtual_nodes.cost_estimate import (
    DEFAULT_MAX_SERVER_MEMORY,
    ESTIMATE_MINOR,
    estimate_options,
    fleet_cost,
    parse_limit,
)
from fakegpu.virtual_nodes.fleet_faults import FaultReport, FleetFaultPlan, ScaledClock, apply_plan, gate_warning
from fakegpu.virtual_nodes.names import DEFAULT_PREFIX, pool_name_from_stem
from fakegpu.virtual_nodes.node_manifest import NodeShape
from fakegpu.virtual_nodes.pool_rules import checked_mig_mode, rack_pool
from fakegpu.virtual_nodes.pools import (
    DEFAULT_MODE,
    DEFAULT_POOL,
    GPU_MODES,
    MAX_NODES,
    Pool,
    VirtualNode,
    build_virtual_nodes,
    parse_pool_value,
)
from fakegpu.virtual_nodes.report import RunReport, calls_line
from fakegpu.virtual_nodes.watcher import Watcher

DESCRIPTION = """\
Create (or adopt) KWOK nodes with fake GPUs and GPU Feature Discovery labels, so a real kube-scheduler can
be rehearsed on many GPU nodes. As a real node, each pool offers its GPUs one way (--gpu-mode): device
plugin resources in capacity and allocatable, or DRA ResourceSlices owned by the Node, never both. KWOK
must run in the cluster to keep the nodes Ready. The nodes carry the taint kwok.x-k8s.io/node=fake:NoSchedule:
rehearsal pods need a toleration for it. Before writing, it prints what the plan will cost the API server
(bytes of objects, and the memory a real API server was measured to need for them) and refuses a plan above
--max-server-memory (nodes that exist already count too: give the same limit on a re-run); --dry-run
prints the plan and that estimate only. Re-running with the same
arguments writes nothing; --delete removes what this tool created with that --name-prefix (recorded in the
label fakegpu.io/virtual-node-prefix) and hands adopted nodes back as they were.
"""
DEFAULT_RESYNC = 60.0


def pools_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> list[Pool]:
    """The pools the command line asks for; every conflict is a SpecError naming the flag."""
    if args.node_name is not None:
        raise SpecError("--node-name", "virtual node names come from --name-prefix and the index; drop --node-name")
    environ = dict(os.environ if env is None else env)
    default_mode = args.gpu_mode or DEFAULT_MODE
    base = replace(inventory_inputs(args, environ), node_name="")
    racks = rack_layout_from_args(args)
    if not args.pool:
        if racks is not None:
            return checked_mig_mode([rack_pool(base, racks, default_mode, args.count)], args.mig_mode)
        count = 1 if args.count is None else args.count
        if not 1 <= count <= MAX_NODES:
            raise SpecError("--count", f"must be from 1 to {MAX_NODES}, found {count}")
        return checked_mig_mode([Pool(DEFAULT_POOL, base, count, in_names=False, mode=default_mode)], args.mig_mode)
    if racks is not None:
        raise SpecError("--racks", "applies to the single pool (--gpus or --node-spec), not to --pool pools")
    conflicts = [
        flag
        for flag, given in (
            ("--count", args.count is not None),
            ("--node-spec", bool(args.node_spec)),
            ("--gpus", bool(args.gpus)),
        )
        if given
    ]
    if conflicts:
        raise SpecError(
            "--pool", f"cannot be combined with {', '.join(conflicts)}: each pool's node spec file and count say it"
        )
    pools: dict[str, Pool] = {}
    sources: dict[str, str] = {}
    for value in args.pool:
        path, count, mode = parse_pool_value(value)
        name = pool_name_from_stem(Path(path).stem, "--pool")
        if name in pools:
            raise SpecError("--pool", f"two pools are named {name!r} ({sources[name]} and {path}); rename one file")
        pools[name] = Pool(
            name, replace(base, node_spec=path), count, in_names=True, source=path, mode=mode or default_mode
        )
        sources[name] = path
    total = sum(p.count for p in pools.values())
    if total > MAX_NODES:
        raise SpecError("--pool", f"{total} nodes in all; at most {MAX_NODES}")
    return checked_mig_mode(list(pools.values()), args.mig_mode)


def rack_layout_from_args(args: argparse.Namespace) -> RackLayout | None:
    """The ``--racks`` layout, or None; the rack options without ``--racks`` are refused, not ignored."""
    if args.racks is None:
        lone = [
            flag
            for flag, given in (
                ("--nodes-per-rack", args.nodes_per_rack is not None),
                ("--racks-per-block", args.racks_per_block is not None),
                ("--topology-label-keys", args.topology_label_keys is not None),
            )
            if given
        ]
        if lone:
            raise SpecError(lone[0], "only applies with --racks")
        return None
    keys = parse_topology_keys(args.topology_label_keys) if args.topology_label_keys is not None else TopologyKeys()
    return RackLayout(
        racks=args.racks,
        nodes_per_rack=NVL72_NODES_PER_RACK if args.nodes_per_rack is None else args.nodes_per_rack,
        racks_per_block=args.racks_per_block,
        domain_prefix=args.name_prefix,
        keys=keys,
    )


def add_virtual_nodes_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "virtual-nodes",
        help="create KWOK nodes with fake GPUs (capacity, labels, ResourceSlices) for scheduler rehearsals",
        description=DESCRIPTION,
    )
    add_inventory_options(parser, config_applies="only --gpu-mode device-plugin nodes advertise what it says")
    add_slice_options(
        parser,
        api_version_default="the newest the API server serves",
        server_version_default=None,
        version_from="the API server's /version",
    )
    parser.add_argument(
        "--feature-gates",
        default=None,
        metavar="NAME=BOOL,...",
        help="NVIDIA's DRA driver feature gates (env FEATURE_GATES), checked as `fakegpu dra` checks them; the "
        "slices are the driver's with these gates (NVMLDeviceHealthCheck: node-spec XIDs become device taints; "
        "DRAListTypeAttributes, FabricManagerPartitioning: attributes)",
    )
    group = parser.add_argument_group("virtual nodes")
    group.add_argument("--count", type=int, default=None, metavar="N", help="how many nodes (default 1)")
    group.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="FILE=COUNT[:MODE]",
        help="COUNT nodes described by the node spec FILE, named PREFIX<file stem>-<index> (repeatable, for "
        "heterogeneous fleets; instead of --count, --node-spec and --gpus); MODE overrides --gpu-mode for "
        f"the pool ({', '.join(GPU_MODES)})",
    )
    racks = parser.add_argument_group(
        "rack topology (GB200/GB300 NVL72): one NVLink clique per rack (nvidia.com/gpu.clique), block / rack / "
        "host labels, and in the dra modes each node's compute-domain.nvidia.com ResourceSlice; single pool only"
    )
    racks.add_argument(
        "--racks", type=int, default=None, metavar="N", help="lay the nodes out in N racks (count = N x M)"
    )
    racks.add_argument(
        "--nodes-per-rack",
        type=int,
        default=None,
        metavar="M",
        help=f"nodes per rack (default {NVL72_NODES_PER_RACK}, an NVL72 rack's compute trays)",
    )
    racks.add_argument(
        "--compute-domain-namespace",
        type=_namespace,
        default=DRIVER_NAMESPACE,
        metavar="NS",
        help="with --watch, the virtual nodes play their IMEX daemons: the namespace of the ComputeDomainCliques "
        "they write, the compute-domain controller's --namespace (default %(default)s)",
    )
    racks.add_argument(
        "--racks-per-block", type=int, default=None, metavar="K", help="racks per block (default: all in one)"
    )
    racks.add_argument(
        "--topology-label-keys",
        default=None,
        metavar="LEVEL=KEY,...",
        help="label keys of the levels block, rack and host, e.g. block=cloud.google.com/gce-topology-block,"
        "rack=cloud.google.com/gce-topology-subblock (default fakegpu.io/topology-block, fakegpu.io/topology-rack, "
        "kubernetes.io/hostname); values block-<b>, rack-<r> and the node name",
    )
    group.add_argument(
        "--gpu-mode",
        choices=GPU_MODES,
        default=None,
        help="how the nodes offer their GPUs; a real node runs one of the two, and offering both lets the "
        "scheduler hand every GPU out twice. device-plugin (default): nvidia.com/gpu (or MIG, shared) in "
        "capacity, no ResourceSlices; dra: ResourceSlices, no GPU capacity; dra-extended: ResourceSlices and "
        "DeviceClasses whose extendedResourceName (resource.k8s.io/v1 only) serves nvidia.com/gpu requests "
        "from the same devices",
    )
    group.add_argument(
        "--name-prefix",
        default=DEFAULT_PREFIX,
        metavar="P",
        help="node names are P<index>, the index zero-padded to 4 digits (default %(default)s)",
    )
    group.add_argument("--node-cpu", default="32", metavar="Q", help="cpu capacity of each node (default %(default)s)")
    group.add_argument(
        "--node-memory", default="256Gi", metavar="Q", help="memory capacity of each node (default %(default)s)"
    )
    group.add_argument(
        "--node-pods",
        default="110",
        metavar="N",
        help="pod capacity of each node, a whole number (default %(default)s)",
    )
    group.add_argument(
        "--kubeconfig",
        default=None,
        help=KUBECONFIG_HELP,
    )
    group.add_argument(
        "--concurrency", type=int, default=16, metavar="N", help="nodes in flight at once (default %(default)s)"
    )
    mode = group.add_mutually_exclusive_group()
    mode.add_argument(
        "--watch",
        action="store_true",
        help="after bringing the nodes up, keep them as planned until SIGINT/SIGTERM (a node someone deletes "
        "is not re-created)",
    )
    mode.add_argument(
        "--delete",
        action="store_true",
        help="delete the virtual nodes created with --name-prefix and their ResourceSlices, hand back adopted "
        "ones as they were",
    )
    mode.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and what it would cost the API server, and stop: no API server is asked, nothing "
        "is written",
    )
    group.add_argument(
        "--max-server-memory",
        default=None,
        metavar="SIZE",
        help="refuse a plan estimated to add more than SIZE to the API server's memory (bytes of objects "
        "times what a real API server was measured to hold per byte); 0 goes ahead whatever the estimate "
        f"(default {DEFAULT_MAX_SERVER_MEMORY}; the slice layout of Kubernetes 1.{ESTIMATE_MINOR} unless "
        "--server-version)",
    )
    group.add_argument(
        "--no-timestamp",
        action="store_true",
        help="leave out nvidia.com/gfd.timestamp, as GFD's --no-timestamp does (by default a node gets the time "
        "its labels were first written; --watch stamps the nodes with its own start)",
    )
    group.add_argument(
        "--resync-interval",
        type=float,
        default=None,
        metavar="S",
        help=f"with --watch, also re-list everything every S seconds (default {DEFAULT_RESYNC:g})",
    )
    add_fault_options(parser)


def settings_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Settings:
    """The run's settings from the flags (and ``$FEATURE_GATES`` from ``env``, the process's by default)."""
    if args.concurrency < 1:
        raise SpecError("--concurrency", f"must be at least 1, found {args.concurrency}")
    check_fault_flags(args)
    if args.resync_interval is not None:
        if not args.watch:
            raise SpecError("--resync-interval", "only applies with --watch")
        if not (math.isfinite(args.resync_interval) and args.resync_interval > 0):
            raise SpecError(
                "--resync-interval", f"must be a number of seconds above zero, found {args.resync_interval}"
            )
    if args.delete:
        if not args.name_prefix:
            raise SpecError("--name-prefix", "--delete needs a prefix: an empty one would select every virtual node")
        planned = [
            flag
            for flag, given in (
                ("--count", args.count is not None),
                ("--racks", args.racks is not None),
                ("--pool", bool(args.pool)),
                ("--gpus", bool(args.gpus)),
                ("--node-spec", bool(args.node_spec)),
                ("--gpu-mode", args.gpu_mode is not None),
                ("--max-server-memory", args.max_server_memory is not None),
            )
            if given
        ]
        if planned:
            raise SpecError(
                "--delete",
                f"removes every virtual node of --name-prefix whatever its GPUs; drop {', '.join(planned)}",
            )
    try:
        check_driver_name(args.driver_name)
    except ValueError as exc:
        raise SpecError("--driver-name", str(exc)) from None
    if args.server_version is not None and args.resource_api_version is not None:
        check_api_version_served(args.resource_api_version, args.server_version, given=True)
    return Settings(
        shape=NodeShape(cpu=args.node_cpu, memory=args.node_memory, pods=args.node_pods),
        driver=args.driver_name,
        mig_mode=args.mig_mode,
        server_minor=args.server_version,
        api_version=args.resource_api_version,
        concurrency=args.concurrency,
        name_prefix=args.name_prefix,
        refresh_timestamp=args.watch,
        feature_gates=virtual_node_gates(args, os.environ if env is None else env),
        compute_domain_namespace=args.compute_domain_namespace,
    )


def plan_lines(nodes: list[VirtualNode]) -> list[str]:
    """One line per pool: how many nodes, which GPUs each has and how it offers them."""
    pools: dict[str, list[VirtualNode]] = collections.defaultdict(list)
    for node in nodes:
        pools[node.pool].append(node)
    lines = []
    for pool, members in pools.items():
        models = collections.Counter(g.model.key for g in members[0].inventory.node.gpus)
        gpus = ", ".join(f"{n}x{key}" for key, n in models.items())
        first = members[0]
        offered = (
            ", ".join(f"{r.name}: {len(r.devices)}" for r in first.inventory.resources)
            if first.has_gpu_capacity
            else "ResourceSlices, no GPU capacity"
        )
        cliques = {v.inventory.node.fabric.clique for v in members if v.inventory.node.fabric is not None}
        fabric = ""
        if cliques:
            fabric = f", {len(cliques)} NVLink clique(s)"
            if first.publishes_slices:
                fabric += " with a compute-domain.nvidia.com ResourceSlice per node"
        lines.append(
            f"pool {pool}: {len(members)} node(s) {first.name}..{members[-1].name}, {gpus} ({offered}), "
            f"{first.mode}{fabric}"
        )
    return lines


def _client(kubeconfig: str | None) -> AsyncClient:
    """The API client; a missing or malformed kubeconfig is a bad input, named by its flag."""
    try:
        return client_factory(kubeconfig)()
    except SpecError:
        raise
    except (ConfigError, OSError) as exc:
        raise SpecError("--kubeconfig" if kubeconfig else "kubeconfig", " ".join(str(exc).split())) from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(kubeconfig or "kubeconfig", f"not valid YAML: {first}") from None
    except (AttributeError, TypeError, ValueError, KeyError):
        raise SpecError(
            kubeconfig or "kubeconfig", "not a usable kubeconfig (expected clusters, users and a current context)"
        ) from None


def _kubeconfig_name(kubeconfig: str | None, client: AsyncClient) -> str:
    """How to name the kubeconfig whose credentials failed: the flag's file, or the file the client read."""
    if kubeconfig:
        return kubeconfig
    fname = getattr(client.config, "fname", None)
    return str(fname) if fname else "kubeconfig (in-cluster, $KUBECONFIG or ~/.kube/config)"


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def run_virtual_nodes(
    args: argparse.Namespace,
    *,
    client: AsyncClient | None = None,
    stop: asyncio.Event | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    retry_pause: float = 0.2,
    long_call: LongCall = LONG_CALL,
    watching: Callable[[Watcher], object] = lambda watcher: None,
) -> int:
    """The whole command in the caller's event loop; tests pass their own ``client``, ``stop`` and a
    short ``retry_pause`` (the first pause before retrying a failed request; it doubles each time), a
    short ``long_call`` (how long lists and collection deletes may take), and may follow the ``--watch``
    loop's progress through ``watching``, called with it before it runs."""
    out = out or sys.stdout
    err = err or sys.stderr

    def say(line: str) -> None:
        stream = err if line.startswith(("error:", "warning:")) else out
        print(f"fakegpu: {line}" if stream is err else line, file=stream, flush=True)

    settings = settings_from_args(args)
    if fault_mode(args):
        return await _run_faults(args, settings, client, stop, say, err, retry_pause, long_call)
    limit = parse_limit(DEFAULT_MAX_SERVER_MEMORY if args.max_server_memory is None else args.max_server_memory)
    nodes: list[VirtualNode] = []
    if not args.delete:
        timestamp = None if args.no_timestamp else int(time.time())
        nodes, warnings = build_virtual_nodes(pools_from_args(args), settings.name_prefix, timestamp)
        for warning in warnings:
            say(f"warning: {warning}")
        _plan_and_cost(nodes, settings, limit, say)
        if args.dry_run:
            return 0
    own_client = client is None
    client = client or _client(args.kubeconfig)
    api = Api(client, backoff=retry_pause, long_call=long_call)

    def say_target() -> None:
        """After per-node errors: where those requests went (the errors themselves name the object)."""
        target = client_target(client)
        if target is not None:
            say(f"error: the failed requests went to the {target}")

    controller = VirtualNodeController(api, nodes, settings, say)

    async def work() -> int:
        if args.delete:
            return await _delete_nodes(controller, err, say, say_target)
        ok = await _bring_up(controller, err, say, say_target)
        if args.watch:
            resync = DEFAULT_RESYNC if args.resync_interval is None else args.resync_interval
            await _watch(controller, resync, stop, say, watching)
        return 0 if ok else 1

    return await _on_the_server(work(), args, client, own_client, say)


async def _on_the_server(
    work: Awaitable[int], args: argparse.Namespace, client: AsyncClient, own_client: bool, say: Callable[[str], None]
) -> int:
    """``work``'s exit code, or 1 with one error line where the API server failed it (a kubeconfig problem
    found on the way: a SpecError naming the file); the client closed after if the command made it."""
    try:
        return await work
    except (ApiCallError, DiscoveryError) as exc:
        say(f"error: {api_failure(exc, client_target(client))}")
        return 1
    except KubeconfigError as exc:
        raise SpecError(_kubeconfig_name(args.kubeconfig, client), str(exc)) from None
    finally:
        if own_client:
            await client.close()


def _plan_and_cost(nodes: list[VirtualNode], settings: Settings, limit: int, say: Callable[[str], None]) -> None:
    """The plan and its cost, before the server is asked anything; a plan above ``limit`` is refused here,
    so a fleet too big for the control plane is never half written."""
    options = replace(
        estimate_options(settings.driver, settings.mig_mode, settings.server_minor, settings.api_version),
        feature_gates=settings.feature_gates,
    )
    cost = fleet_cost(nodes, settings.shape, options)
    for line in (*plan_lines(nodes), *cost.lines(limit)):
        say(line)
    refusal = cost.refusal(limit)
    if refusal is not None:
        raise refusal


async def _delete_nodes(
    controller: VirtualNodeController, err: TextIO, say: Callable[[str], None], say_target: Callable[[], None]
) -> int:
    """``--delete``: the report's lines and the calls made; the exit status."""
    async with progress(
        err, "deleting virtual nodes", lambda: (controller.done, controller.total), step=lambda: controller.step
    ):
        deleted = await controller.delete_all()
    return 0 if _told(deleted, controller, say, say_target) else 1


async def _bring_up(
    controller: VirtualNodeController,
    err: TextIO,
    say: Callable[[str], None],
    say_target: Callable[[], None],
) -> bool:
    """Bring-up with its report and the calls made; whether every node came up."""
    await controller.discover()
    async with progress(err, "virtual nodes", lambda: (controller.done, controller.total)):
        report = await controller.bring_up()
    return _told(report, controller, say, say_target)


def _told(
    report: RunReport, controller: VirtualNodeController, say: Callable[[str], None], say_target: Callable[[], None]
) -> bool:
    """A run's report, the server it ran against if it failed, and the calls made; whether it went well."""
    for line in report.lines():
        say(line)
    if not report.ok:
        say_target()
    say(calls_line(controller.api.calls))
    return report.ok


async def _watch(
    controller: VirtualNodeController,
    resync: float,
    stop: asyncio.Event | None,
    say: Callable[[str], None],
    watching: Callable[[Watcher], object],
) -> None:
    """``--watch``: keep the nodes as planned until ``stop`` (the caller's) or SIGINT/SIGTERM (without one)."""
    watcher = Watcher(controller, resync_interval=resync)
    watching(watcher)
    say("watching the virtual nodes; stop with Ctrl-C")
    own_stop = stop is None
    stop = stop or asyncio.Event()
    with _stop_on_signals(stop) if own_stop else contextlib.nullcontext():
        await watcher.run(stop)
    repaired = ", ".join(f"{k} {v}" for k, v in sorted(watcher.stats.items())) or "nothing to repair"
    say(f"watch stopped: {repaired}")
    say(calls_line(controller.api.calls))


async def _run_faults(
    args: argparse.Namespace,
    settings: Settings,
    client: AsyncClient | None,
    stop: asyncio.Event | None,
    say: Callable[[str], None],
    err: TextIO,
    retry_pause: float,
    long_call: LongCall,
) -> int:
    """``--fault`` / ``--recover``: the plan from the pool flags (no server asked), then its hits written on
    schedule until done or Ctrl-C; only the targeted nodes are read and written."""
    timestamp = None if args.no_timestamp else int(time.time())  # a stored one is kept, as on a re-run
    nodes, _ = build_virtual_nodes(pools_from_args(args), settings.name_prefix, timestamp)
    plan = fault_plan_from_args(args, nodes)
    say(plan.describe())
    warning = gate_warning(plan, nodes, settings.feature_gates)
    if warning is not None:
        say(warning)
    if args.dry_run:
        for hit in plan.hits:
            say(f"  at {hit.at:g} s: {hit.node} GPU(s) {','.join(map(str, hit.gpus))}")
        return 0
    own_client = client is None
    client = client or _client(args.kubeconfig)
    controller = VirtualNodeController(Api(client, backoff=retry_pause, long_call=long_call), nodes, settings, say)

    async def work() -> int:
        report = await _apply_on_schedule(controller, plan, args.time_scale or 1.0, stop, err)
        for line in report.lines(plan):
            say(line)
        say(calls_line(controller.api.calls))
        if report.refused:  # the flags do not describe the fleet: a usage error, as a bad flag is
            return 2
        return 0 if report.ok else 1

    return await _on_the_server(work(), args, client, own_client, say)


async def _apply_on_schedule(
    controller: VirtualNodeController, plan: FleetFaultPlan, scale: float, stop: asyncio.Event | None, err: TextIO
) -> FaultReport:
    """Discover the slice layout (only when a targeted node publishes slices: a device-plugin fault writes
    nothing DRA, and says nothing of it), then the plan's hits with a progress line; Ctrl-C (or the caller's
    ``stop``) ends the schedule between two hits."""
    if any(controller.nodes[h.node].publishes_slices for h in plan.hits if h.node in controller.nodes):
        await controller.discover()
    report = FaultReport(len(plan.hits))
    own_stop = stop is None
    stop = stop or asyncio.Event()
    with _stop_on_signals(stop) if own_stop else contextlib.nullcontext():
        async with progress(err, plan.what(), lambda: (report.done, report.total)):
            await apply_plan(controller, plan, ScaledClock(scale), stop, report)
    return report


def run_virtual_nodes_command(args: argparse.Namespace) -> int:
    return run_bounded(run_virtual_nodes(args))
