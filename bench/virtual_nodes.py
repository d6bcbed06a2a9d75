"""Client cost of bringing up N virtual nodes, re-running with nothing to write, and deleting them.

Per size, a fresh fake API server of the tests runs in a process of its own
(``python -m tests.apiserver.standalone``), and each phase (bring-up, re-run, ``--delete``) runs in a
fresh client process, as the CLI would, so the client's CPU and peak RSS are its own. The client drives the
controller of ``fakegpu virtual-nodes`` through lightkube over HTTPS, verifying the fake server's own CA as
it would a real server's (``--plain-http`` for the old, cheaper path without TLS), so it pays what the real
path pays: handshakes, encryption, HTTP/1.1 (lightkube does not ask for HTTP/2, so it speaks HTTP/1.1 to a
real API server too). Per phase: wall time, client CPU
(user+sys of the whole client process: imports, planning and the run; and of the run alone), client peak
RSS, API calls by verb and request bytes sent (both counted by the server). Client CPU per node and calls per
node are the headline figures: they do not depend on the server's speed.

The fake server checks every write against the kubernetes-validate schemas, which costs it milliseconds per
object; above ``--schema-validation-up-to`` nodes it skips that check (its own rules still run) and says so.

With ``--kubeconfig K`` the same phases run against the cluster K points at instead, with a unique
``--name-prefix`` and the fleet deleted at the end; calls by verb then come from the client (``Api.calls``)
and bytes from a request hook on lightkube's HTTP client (``/version`` is not counted). The server's share
is read where it can be: the control-plane processes of this machine from /proc (a local cluster), else
the API server's own ``/metrics`` (``process_cpu_seconds_total``, ``process_resident_memory_bytes``; the
kubeconfig's user needs read access to ``/metrics``); each figure says which server and source it came from.
Against the fake server, its process's CPU and RSS come from /proc.

Run: ``.venv/bin/python bench/virtual_nodes.py [--sizes 100,1000] [--gpu-mode dra] [--mig-mode dynamic]
[--kubeconfig K]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User
from server_share import pid_reading, read_server, share_text  # bench/ is on sys.path when a script runs

from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.virtual_nodes.api import Api
from fakegpu.virtual_nodes.controller import Settings, VirtualNodeController
from fakegpu.virtual_nodes.pools import DEFAULT_POOL, Pool, build_virtual_nodes
from fakegpu.virtual_nodes.report import Outcome
from tests.apiserver.standalone import ServerProcess

REPO = Path(__file__).resolve().parent.parent
PHASES = ("bring-up", "re-run", "delete")
WRITES = ("create", "update", "patch", "delete", "deletecollection")
RESULT = "BENCH-RESULT "


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------------------------- client process


async def run_phase(args: argparse.Namespace) -> dict[str, Any]:
    """One phase in this (fresh) process; its CPU figure counts the imports and planning too, as the CLI's would."""
    fake = args.fake
    pool = Pool(
        DEFAULT_POOL, InventoryInputs(node_name="", gpus=(args.gpus,)), args.count, in_names=False, mode=args.gpu_mode
    )
    nodes, _ = build_virtual_nodes([pool], args.name_prefix) if args.child != "delete" else ([], [])
    if args.url:  # --plain-http
        config = KubeConfig.from_one(cluster=Cluster(server=args.url), user=User())
    else:
        config = KubeConfig.from_file(args.kubeconfig)
    client = AsyncClient(config=config, trust_env=not fake)
    sent: collections.Counter[str] = collections.Counter()

    async def count_bytes(request: Any) -> None:
        # Request line, header lines and body, as they go on the wire (HTTP/1.1).
        size = len(f"{request.method} {request.url.raw_path.decode()} HTTP/1.1\r\n") + 2
        size += sum(len(k) + len(v) + 4 for k, v in request.headers.raw)
        size += int(request.headers.get("content-length") or 0)
        sent[request.method] += size

    if not fake:  # the fake server counts the bytes itself: no hook, whose CPU would count as the client's
        client._client._client.event_hooks["request"].append(count_bytes)  # bench-only: bytes the client sends
    api = Api(client, trust_env=not fake)
    settings = Settings(
        mig_mode=args.mig_mode,
        server_minor=args.server_version if fake else None,
        concurrency=args.concurrency,
        name_prefix=args.name_prefix,
    )
    result: dict[str, Any] = {}
    try:
        cpu_before, started = cpu_seconds(), time.perf_counter()
        controller = VirtualNodeController(api, nodes, settings, say=lambda _: None)
        await controller.discover()
        if args.child == "delete":
            deleted = await controller.delete_all()
            result.update(ok=deleted.ok, lines=deleted.lines(), nodes=deleted.nodes_deleted)
        else:
            report = await controller.bring_up()
            result.update(
                ok=report.ok,
                lines=report.lines(),
                created=report.count(Outcome.CREATED),
                unchanged=report.count(Outcome.UNCHANGED),
            )
        result.update(wall=time.perf_counter() - started, run_cpu=cpu_seconds() - cpu_before)
    finally:
        await client.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result.update(
        cpu=usage.ru_utime + usage.ru_stime,  # the whole process, from its start
        rss_mib=usage.ru_maxrss / 1024,  # KiB on Linux
        client_calls=dict(api.calls),
        client_bytes=sum(sent.values()),
    )
    return result


def child_main(args: argparse.Namespace) -> None:
    result = asyncio.run(run_phase(args))
    print(RESULT + json.dumps(result), flush=True)


# ------------------------------------------------------------------------------------- parent process


@dataclass
class Phase:
    name: str
    result: dict[str, Any]
    calls: dict[str, int]
    bytes_sent: int
    server_share: str


def diff(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in sorted(after.items()) if n - before.get(k, 0)}


def calls_text(calls: Mapping[str, int]) -> str:
    return ", ".join(f"{verb} {n}" for verb, n in sorted(calls.items()) if n) or "none"


def run_child(phase: str, count: int, server: ServerProcess | None, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", phase, "--count", str(count)]
    if server is None:
        command += ["--kubeconfig", args.kubeconfig]
    elif args.plain_http:
        command += ["--fake", "--url", server.url]
    else:
        command += ["--fake", "--kubeconfig", str(server.kubeconfig)]
    command += ["--gpus", args.gpus, "--gpu-mode", args.gpu_mode, "--mig-mode", args.mig_mode]
    command += ["--server-version", str(args.server_version), "--concurrency", str(args.concurrency)]
    command += ["--name-prefix", args.name_prefix]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the {phase} client process failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(lines[-1][len(RESULT) :])
    return result


def check(phase: str, count: int, result: Mapping[str, Any], calls: Mapping[str, int]) -> None:
    problem = ""
    if not result["ok"]:
        problem = "reported problems"
    elif phase == "bring-up" and result["created"] != count:
        problem = f"created {result['created']} of {count} nodes"
    elif phase == "re-run" and (result["unchanged"] != count or any(calls.get(v) for v in WRITES)):
        problem = f"re-run not a no-op: {result['unchanged']} unchanged, calls {calls_text(calls)}"
    if problem:
        raise SystemExit(f"{phase} of {count} nodes: {problem}\n" + "\n".join(result["lines"]))


def measure(count: int, args: argparse.Namespace) -> tuple[list[Phase], str, Mapping[str, int]]:
    if args.kubeconfig:
        return measure_cluster(count, args), "counted by the client", {}
    phases: list[Phase] = []
    validate = count <= args.schema_validation_up_to
    objects: Mapping[str, int] = {}
    with ServerProcess(args.server_version, validate_schema=validate, tls=not args.plain_http) as server:
        for phase in PHASES:
            before = server.counts()
            share_before = pid_reading(server.pid, "fake API server", "the tests' API server process, /proc")
            result = run_child(phase, count, server, args)
            share_after = pid_reading(server.pid, "fake API server", "the tests' API server process, /proc")
            after = server.counts()
            calls = diff(after["calls"], before["calls"])
            sent = sum(diff(after["bytes_received"], before["bytes_received"]).values())
            check(phase, count, result, calls)
            phases.append(Phase(phase, result, calls, sent, share_text(share_before, share_after)))
            if phase == "bring-up":
                objects = after["objects"]
        left = server.counts()["objects"]
        peak = server.peak_rss_mib()
    if left:
        raise SystemExit(f"--delete left objects behind: {left}")
    source = "counted by the server; schema validation " + ("on" if validate else "off (fleet size)")
    if peak is not None:
        source += f"; server peak RSS {peak:.0f} MiB"
    return phases, source, objects


def measure_cluster(count: int, args: argparse.Namespace) -> list[Phase]:
    """The phases against the kubeconfig's cluster; the fleet is deleted at the end whatever happened."""
    phases: list[Phase] = []

    def run(phase: str) -> dict[str, Any]:
        before = read_server(args.kubeconfig)
        result = run_child(phase, count, None, args)
        phases.append(
            Phase(
                phase,
                result,
                result["client_calls"],
                result["client_bytes"],
                share_text(before, read_server(args.kubeconfig)),
            )
        )
        return result

    try:
        for phase in PHASES[:-1]:
            result = run(phase)
            check(phase, count, result, result["client_calls"])
    finally:  # never leave the fleet behind in somebody's cluster
        result = run("delete")
    check("delete", count, result, result["client_calls"])
    return phases


def report(count: int, phases: list[Phase], source: str, objects: Mapping[str, int]) -> None:
    print(f"\n{count} nodes ({source}):")
    if objects:
        print(f"  objects after bring-up: {', '.join(f'{n} {kind}' for kind, n in sorted(objects.items()))}")
    print(
        f"  {'phase':<9} {'wall s':>7} {'CPU s':>7} {'run CPU s':>9} {'CPU ms/node':>11} {'peak RSS MiB':>12} "
        f"{'calls':>6} {'calls/node':>10} {'sent MiB':>8}  calls by verb"
    )
    for phase in phases:
        r, total = phase.result, sum(phase.calls.values())
        print(
            f"  {phase.name:<9} {r['wall']:>7.2f} {r['cpu']:>7.2f} {r['run_cpu']:>9.2f} "
            f"{r['cpu'] / count * 1000:>11.1f} {r['rss_mib']:>12.0f} {total:>6} {total / count:>10.2f} "
            f"{phase.bytes_sent / 2**20:>8.1f}  {calls_text(phase.calls)}"
        )
    for phase in phases:
        print(f"  {phase.name}: {phase.server_share}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000", help="comma-separated node counts (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=16, help="nodes in flight (default %(default)s)")
    parser.add_argument("--gpus", default="8xh100-80gb", help="GPUs per node (default %(default)s)")
    parser.add_argument("--gpu-mode", choices=("device-plugin", "dra", "dra-extended"), default="dra")
    parser.add_argument("--mig-mode", choices=("static", "dynamic"), default="dynamic")
    parser.add_argument("--server-version", type=int, default=36, help="Kubernetes minor, 32-36 (default 36)")
    parser.add_argument(
        "--schema-validation-up-to",
        type=int,
        default=100,
        help="the fake server validates writes against the schemas up to this many nodes (default %(default)s)",
    )
    parser.add_argument(
        "--kubeconfig",
        default="",
        metavar="K",
        help="run against the cluster of kubeconfig K instead of the fake server (creates and deletes nodes there)",
    )
    parser.add_argument(
        "--plain-http",
        action="store_true",
        help="the fake server over plain HTTP instead of TLS (the old, cheaper path)",
    )
    parser.add_argument("--fake", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--name-prefix", default="", help="node name prefix (default: fakegpu-bench-<random>-)")
    parser.add_argument("--child", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.name_prefix:
        args.name_prefix = f"fakegpu-bench-{uuid.uuid4().hex[:6]}-"
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        child_main(args)
        return
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        raise SystemExit(f"--kubeconfig {args.kubeconfig}: no such file")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.kubeconfig:
        target = KubeConfig.from_file(args.kubeconfig).get()
        where = f"the cluster of {args.kubeconfig} ({target.cluster.server if target else 'no current context'})"
    else:
        where = "the fake API server of the tests" + (" over plain HTTP" if args.plain_http else " over HTTPS")
    print(f"fakegpu virtual-nodes benchmark against {where}, lightkube, HTTP/1.1")
    print(
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()} ({platform.system()}); "
        + ("" if args.kubeconfig else "the server runs in its own process; ")
        + "each phase runs in a fresh client process"
    )
    print(
        f"nodes: {args.gpus}, --gpu-mode {args.gpu_mode}, --mig-mode {args.mig_mode}, "
        + ("the cluster's slice layout" if args.kubeconfig else f"Kubernetes 1.{args.server_version} layout")
        + f", concurrency {args.concurrency}, prefix {args.name_prefix}"
    )
    print("CPU s: the client process (imports, planning, run); run CPU s: the controller calls alone")
    for count in sizes:
        phases, source, objects = measure(count, args)
        report(count, phases, source, objects)


if __name__ == "__main__":
    main()
