"""``fakegpu cleanup --node N``: take off a node what fakegpu's daemons may have left there.

A daemon that stops normally removes its sockets and (``--cleanup-on-exit``) its labels; one that was
SIGKILLed, evicted with its RBAC already deleted, or kept its labels for a restart that never came, leaves
them. So do things no stop removes: the nvidia-smi files and MPS directories on the host, the CDI specs,
the DRA plugins' checkpoints and directories (``fakegpu.cli.host_leftovers`` lists every path and what stays
on purpose), and the ``nvidia.com/*`` extended resources the kubelet keeps in the Node's status for its grace
period, which it puts back until that ends (``--wait`` removes them until they stay off,
``fakegpu.cli.node_status_wait``).

Only what fakegpu owns goes: the labels recorded in ``fakegpu.io/managed-labels`` and that annotation
(``fakegpu.sharing.label_ownership``), never a label someone else wrote; on the host only fakegpu's own
file names under each location. Dry-run unless ``--yes``: each thing it would remove is one line, so the
output can be read, diffed or grepped before anything changes.

It runs with the caller's credentials (an admin kubeconfig), not as one of the overlays' ServiceAccounts:
the calls are ``get`` and ``patch`` on ``nodes`` and ``patch`` on ``nodes/status``, with ``--wait`` also
``list`` and ``watch`` on ``nodes`` (deploy/README.md, "Teardown"). The host part runs on the node, e.g. in
``kubectl debug node/N`` with ``--host-root /host``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node, NodeStatus
from lightkube.types import PatchType

from fakegpu.cli.host_leftovers import (
    DEFAULT_ADMIN_SOCKETS,
    DEFAULT_CDI_ROOT,
    DEFAULT_MPS_ROOT,
    DEFAULT_NVIDIA_SMI_DIR,
    HostFindings,
    HostLocations,
)
from fakegpu.cli.node_status_wait import (
    DEFAULT_SETTLE,
    DEFAULT_WAIT_TIMEOUT,
    RESOURCE_PREFIX,
    StatusWait,
    WaitLimits,
    duration,
    owned_quantities,
    status_fields,
    status_lines,
    status_patch,
)
from fakegpu.cli.seconds_argument import positive_seconds
from fakegpu.kube.client import KUBECONFIG_HELP, client_factory
from fakegpu.runtime.bounded_run import run_bounded
from fakegpu.runtime.kubelet_paths import DEFAULT_ROOT
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.label_ownership import OWNED_LABELS_ANNOTATION, label_patch, owned_keys


def add_cleanup_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "cleanup",
        help="remove the labels, annotation, node-status resources and host files fakegpu left on a node",
        description="Print (dry-run, the default) or remove with --yes, one line each: the node labels "
        f"recorded in {OWNED_LABELS_ANNOTATION} and that annotation, the {RESOURCE_PREFIX}* extended "
        "resources in the node's status.capacity/allocatable, and on this host the nvidia-smi directories, "
        "MPS directories, fakegpu's CDI specs and admin sockets. Labels others wrote are never touched.",
    )
    parser.add_argument("--node", required=True, metavar="N", help="the Node object to clean")
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help=KUBECONFIG_HELP,
    )
    parser.add_argument("--yes", action="store_true", help="remove what is listed (default: only list it)")
    where = parser.add_argument_group("what to clean")
    where.add_argument("--skip-api", action="store_true", help="leave the Node object alone (no API server needed)")
    where.add_argument("--skip-host", action="store_true", help="leave this host's files alone")
    where.add_argument(
        "--host-root",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="the node's root file system as seen here (/host in `kubectl debug node/N`; default %(default)s)",
    )
    where.add_argument(
        "--nvidia-smi-dir",
        type=Path,
        default=DEFAULT_NVIDIA_SMI_DIR,
        metavar="DIR",
        help="parent of the daemons' --nvidia-smi-dir directories (default %(default)s)",
    )
    where.add_argument(
        "--mps-root",
        type=Path,
        default=DEFAULT_MPS_ROOT,
        metavar="DIR",
        help="the plugin's MPS_ROOT (default %(default)s)",
    )
    where.add_argument(
        "--cdi-root",
        type=Path,
        default=DEFAULT_CDI_ROOT,
        metavar="DIR",
        help="the daemons' --cdi-root (default %(default)s)",
    )
    where.add_argument(
        "--admin-socket",
        type=Path,
        action="append",
        default=None,
        metavar="PATH",
        help="a daemon's --admin-socket (repeatable; default " + ", ".join(str(p) for p in DEFAULT_ADMIN_SOCKETS) + ")",
    )
    where.add_argument(
        "--kubelet-dir",
        type=Path,
        default=DEFAULT_ROOT,
        metavar="DIR",
        help="the daemons' --kubelet-dir: their sockets, the DRA plugins' directories (default %(default)s)",
    )
    add_wait_options(parser)


def add_wait_options(parser: argparse.ArgumentParser) -> None:
    wait = parser.add_argument_group("waiting out the kubelet's grace period")
    wait.add_argument(
        "--wait",
        action="store_true",
        help=f"with --yes: keep watching the node and remove the {RESOURCE_PREFIX}* resources the kubelet puts "
        "back, until they stay off (needs list and watch on nodes too)",
    )
    wait.add_argument(
        "--wait-timeout",
        type=positive_seconds,
        default=DEFAULT_WAIT_TIMEOUT,
        metavar="SECONDS",
        help="give up waiting after this long, exit 1 and name what remains (default %(default)s)",
    )
    wait.add_argument(
        "--settle",
        type=positive_seconds,
        default=DEFAULT_SETTLE,
        metavar="SECONDS",
        help="how long the resources must stay off the node for --wait to end (default %(default)s)",
    )


def check_wait(args: argparse.Namespace) -> WaitLimits | None:
    """The limits of ``--wait``, None without it; a clear error for a combination that cannot work."""
    if not args.wait:
        return None
    if not args.yes:
        raise SpecError("--wait", "needs --yes (a dry run removes nothing, so there is nothing to wait for)")
    if args.skip_api:
        raise SpecError("--wait", "watches the Node: it cannot go with --skip-api")
    if args.settle >= args.wait_timeout:
        raise SpecError("--settle", f"{args.settle:g} s must be shorter than --wait-timeout ({args.wait_timeout:g} s)")
    return WaitLimits(settle=args.settle, timeout=args.wait_timeout)


# --- the Node object -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeLeftovers:
    """What fakegpu left on one Node: a metadata patch, a status patch, and a line per item."""

    metadata_patch: dict[str, Any] | None
    status_patch: dict[str, Any] | None
    lines: tuple[str, ...]


def node_leftovers(
    labels: Mapping[str, str], annotations: Mapping[str, str], status: Mapping[str, Mapping[str, str]]
) -> NodeLeftovers:
    """Only the owned labels (nulling a recorded key already gone is harmless), the record itself, and the
    ``nvidia.com/*`` quantities in ``status.capacity`` / ``status.allocatable``."""
    lines = [f"label {k}={labels[k]}" for k in sorted(owned_keys(annotations)) if k in labels]
    if OWNED_LABELS_ANNOTATION in annotations:
        lines.append(f"annotation {OWNED_LABELS_ANNOTATION}")
    quantities = owned_quantities(status)
    lines += status_lines(quantities)
    return NodeLeftovers(
        label_patch(labels, annotations, {}),
        status_patch(quantities) if quantities else None,
        tuple(lines),
    )


async def clean_node(client: AsyncClient, node_name: str, act: bool, out: TextIO) -> int:
    """List (and with ``act`` remove) fakegpu's leftovers on the Node; how many there were."""
    try:
        node = await client.get(Node, node_name)
    except ApiError as exc:
        if exc.status.code == 404:
            raise SpecError("--node", f"node {node_name} does not exist") from None
        raise
    meta = node.metadata
    found = node_leftovers(
        (meta.labels if meta else None) or {}, (meta.annotations if meta else None) or {}, status_fields(node)
    )
    for line in found.lines:
        out.write(f"{'removed' if act else 'would remove'} {line}\n")
    if act and found.metadata_patch is not None:
        await client.patch(Node, node_name, found.metadata_patch, patch_type=PatchType.MERGE)
    if act and found.status_patch is not None:
        # The kubelet keeps a resource whose plugin went away (capacity, at allocatable 0) for its grace
        # period; only a nodes/status write takes it off sooner. One still registered comes back.
        await client.patch(NodeStatus, node_name, found.status_patch, patch_type=PatchType.MERGE)
    return len(found.lines)


# --- this host ------------------------------------------------------------------------------------------


def _kind(path: Path) -> str:
    if path.is_dir() and not path.is_symlink():
        return "directory"
    return "socket" if path.is_socket() else "file"


def _remove(path: Path, found: HostFindings) -> None:
    if path in found.empty_dirs:
        path.rmdir()  # fails loudly if something appeared in it meanwhile
    elif _kind(path) == "directory":
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def clean_host(places: HostLocations, act: bool, out: TextIO) -> int:
    """List (and with ``act`` remove) fakegpu's files on this host, then what stays and why; how many went."""
    found = places.find()
    for path in found.remove:
        out.write(f"{'removed' if act else 'would remove'} {_kind(path)} {path}\n")
        if act:
            _remove(path, found)
    for kept in found.kept:
        out.write(f"{'kept' if act else 'would keep'} {_kind(kept.path)} {kept.path}: {kept.reason}\n")
    return len(found.remove)


# --- the command ----------------------------------------------------------------------------------------


async def run_cleanup(args: argparse.Namespace, client: AsyncClient | None = None, out: TextIO | None = None) -> int:
    """``client`` for tests (else one from ``--kubeconfig``); exit status 0, 1 when ``--wait`` timed out."""
    out = out or sys.stdout
    limits = check_wait(args)
    count, remaining = 0, []
    if not args.skip_api:
        own = client is None
        client = client or client_factory(args.kubeconfig)()
        try:
            count += await clean_node(client, args.node, args.yes, out)
            if not args.skip_host:
                count += clean_host(host_locations(args), args.yes, out)
            summary(args, count, out)
            if limits is not None:
                remaining = await StatusWait(client, args.node, out, limits).run()
        except ApiError as exc:
            raise SpecError(f"node {args.node}", exc.status.message or str(exc)) from None
        except httpx2.HTTPError as exc:
            raise SpecError(f"node {args.node}", f"the API server could not be reached ({exc})") from None
        finally:
            if own:
                await client.close()
    elif not args.skip_host:
        summary(args, clean_host(host_locations(args), args.yes, out), out)
    if remaining:
        out.write(
            f"still in node {args.node}'s status after {duration(args.wait_timeout)}: {', '.join(remaining)} "
            "(a device plugin still registered, or a kubelet with a longer grace period)\n"
        )
        return 1
    return 0


def host_locations(args: argparse.Namespace) -> HostLocations:
    return HostLocations(
        nvidia_smi_dir=args.nvidia_smi_dir,
        mps_root=args.mps_root,
        cdi_root=args.cdi_root,
        admin_sockets=tuple(args.admin_socket or DEFAULT_ADMIN_SOCKETS),
        kubelet_dir=args.kubelet_dir,
        host_root=args.host_root,
    )


def summary(args: argparse.Namespace, count: int, out: TextIO) -> None:
    if count == 0:
        out.write(f"nothing of fakegpu's left on node {args.node}\n")
    elif not args.yes:
        out.write("dry run: nothing was changed; run again with --yes to remove the above\n")


def run_cleanup_command(args: argparse.Namespace) -> int:
    return run_bounded(run_cleanup(args))
