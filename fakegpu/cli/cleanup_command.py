"""``fakegpu cleanup --node N``: take off a node what fakegpu's daemons may have left there.

A daemon that stops normally removes its sockets and (``--cleanup-on-exit``) its labels; one that was
SIGKILLed, evicted with its RBAC already deleted, or kept its labels for a restart that never came, leaves
them. So do things no stop removes: the nvidia-smi files and MPS directories on the host, the CDI specs,
and the ``nvidia.com/*`` extended resources the kubelet keeps in the Node's status for its grace period.

Only what fakegpu owns goes: the labels recorded in ``fakegpu.io/managed-labels`` and that annotation
(``fakegpu.sharing.label_ownership``), never a label someone else wrote; on the host only fakegpu's own
file names under each location. Dry-run unless ``--yes``: each thing it would remove is one line, so the
output can be read, diffed or grepped before anything changes.

It runs with the caller's credentials (an admin kubeconfig), not as one of the overlays' ServiceAccounts:
the calls are ``get`` and ``patch`` on ``nodes`` and ``patch`` on ``nodes/status`` (deploy/README.md,
"Teardown"). The host part runs on the node, e.g. in ``kubectl debug node/N`` with ``--host-root /host``.
"""

from __future__ import annotations

import argparse
import os
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

from fakegpu.dra.claim_cdi_specs import CLAIM_CLASS, cdi_vendor
from fakegpu.fakeplugin.allocate_response import CDI_VENDOR
from fakegpu.kube.client import KUBECONFIG_HELP, client_factory
from fakegpu.runtime.bounded_run import run_bounded
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.label_ownership import OWNED_LABELS_ANNOTATION, label_patch, owned_keys
from fakegpu.telemetry.nvidia_smi.injection import DEFAULT_PLUGIN_DIR

RESOURCE_PREFIX = "nvidia.com/"
"""Extended resources fakegpu advertises (NVIDIA's names: nvidia.com/gpu, nvidia.com/mig-1g.10gb, ...)."""
STATUS_FIELDS = ("capacity", "allocatable")
DEFAULT_NVIDIA_SMI_DIR = Path(DEFAULT_PLUGIN_DIR).parent
"""``/var/run/fakegpu/nvidia-smi``: one directory per daemon under it (``device-plugin``, ``dra``)."""
DEFAULT_MPS_ROOT = Path("/run/nvidia/mps")
"""``MPS_ROOT`` in deploy/overlays/device-plugin, as in NVIDIA's chart."""
DEFAULT_CDI_ROOT = Path("/var/run/cdi")
MAX_SYMLINKS = 40
"""As the kernel's limit on links followed in one lookup (ELOOP)."""
DEFAULT_ADMIN_SOCKETS = (Path("/var/run/fakegpu/plugin.sock"), Path("/var/run/fakegpu/dra.sock"))
"""The daemons' ``--admin-socket`` as the overlays set it."""


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
    status_changes: dict[str, dict[str, None]] = {}
    for field in STATUS_FIELDS:
        names = sorted(k for k in status.get(field, {}) if k.startswith(RESOURCE_PREFIX))
        lines += [f"status.{field} {k}={status[field][k]}" for k in names]
        if names:
            status_changes[field] = dict.fromkeys(names)
    return NodeLeftovers(
        label_patch(labels, annotations, {}),
        {"status": status_changes} if status_changes else None,
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
    status = node.status
    found = node_leftovers(
        (meta.labels if meta else None) or {},
        (meta.annotations if meta else None) or {},
        {f: getattr(status, f, None) or {} for f in STATUS_FIELDS} if status else {},
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


@dataclass(frozen=True)
class HostLocations:
    """Where the daemons write on the node (each one a ``fakegpu cleanup`` flag with the daemons' default)."""

    nvidia_smi_dir: Path = DEFAULT_NVIDIA_SMI_DIR
    mps_root: Path = DEFAULT_MPS_ROOT
    cdi_root: Path = DEFAULT_CDI_ROOT
    admin_sockets: tuple[Path, ...] = DEFAULT_ADMIN_SOCKETS
    host_root: Path = Path("/")

    def _on_host(self, path: Path) -> Path:
        """``path`` of the node's file system under ``host_root``. Absolute symlinks on the way are followed
        from ``host_root``, not from here: a node's ``/var/run`` is usually a link to ``/run``, which in
        ``kubectl debug node`` would otherwise point into the debug container. The last part is not
        followed (a link is removed as a link)."""
        parts = list(path.relative_to(path.anchor).parts if path.is_absolute() else path.parts)
        current, hops = self.host_root, 0
        while parts:
            candidate = current / parts.pop(0)
            if parts and candidate.is_symlink() and hops < MAX_SYMLINKS:
                hops += 1
                target = Path(os.readlink(candidate))
                if target.is_absolute():
                    current, parts = self.host_root, [*target.relative_to(target.anchor).parts, *parts]
                else:
                    parts = [*target.parts, *parts]
                continue
            current = candidate
        return current

    def leftovers(self) -> list[Path]:
        """Every fakegpu path that exists: directories' contents before the directory itself."""
        found: list[Path] = []
        for tree in (self.nvidia_smi_dir, self.mps_root):
            root = self._on_host(tree)
            if root.is_dir() and not root.is_symlink():
                found += sorted(root.iterdir())
                found.append(root)
        cdi = self._on_host(self.cdi_root)
        if cdi.is_dir():
            found += sorted(cdi.glob(f"{CDI_VENDOR}-*.json"))
            found += sorted(cdi.glob(f"{cdi_vendor()}-{CLAIM_CLASS}_*"))
        found += [p for p in map(self._on_host, self.admin_sockets) if p.is_socket()]
        return found


def _kind(path: Path) -> str:
    if path.is_dir() and not path.is_symlink():
        return "directory"
    return "socket" if path.is_socket() else "file"


def clean_host(places: HostLocations, act: bool, out: TextIO) -> int:
    found = places.leftovers()
    for path in found:
        out.write(f"{'removed' if act else 'would remove'} {_kind(path)} {path}\n")
        if not act:
            continue
        if _kind(path) == "directory":
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return len(found)


# --- the command ----------------------------------------------------------------------------------------


async def run_cleanup(args: argparse.Namespace, client: AsyncClient | None = None, out: TextIO | None = None) -> int:
    """``client`` for tests (else one from ``--kubeconfig``); exit status 0."""
    out = out or sys.stdout
    count = 0
    if not args.skip_api:
        own = client is None
        client = client or client_factory(args.kubeconfig)()
        try:
            count += await clean_node(client, args.node, args.yes, out)
        except ApiError as exc:
            raise SpecError(f"node {args.node}", exc.status.message or str(exc)) from None
        except httpx2.HTTPError as exc:
            raise SpecError(f"node {args.node}", f"the API server could not be reached ({exc})") from None
        finally:
            if own:
                await client.close()
    if not args.skip_host:
        places = HostLocations(
            nvidia_smi_dir=args.nvidia_smi_dir,
            mps_root=args.mps_root,
            cdi_root=args.cdi_root,
            admin_sockets=tuple(args.admin_socket or DEFAULT_ADMIN_SOCKETS),
            host_root=args.host_root,
        )
        count += clean_host(places, args.yes, out)
    if count == 0:
        out.write(f"nothing of fakegpu's left on node {args.node}\n")
    elif not args.yes:
        out.write("dry run: nothing was changed; run again with --yes to remove the above\n")
    return 0


def run_cleanup_command(args: argparse.Namespace) -> int:
    return run_bounded(run_cleanup(args))
