"""What fakegpu's daemons write on a node's file system, and which of it is there now (``fakegpu cleanup``).

Every name below comes from the module that writes it, so a writer that changes a name changes what cleanup
looks for (``tests/integration/test_cleanup_host_tree.py`` runs the daemons and checks nothing is missed):

- the device plugin (``fakegpu plugin``): its sockets ``device-plugins/nvidia-<resource>.sock`` and, with
  ``--registration plugins-registry``, ``plugins_registry/nvidia.com-<resource>-reg.sock``; its CDI specs
  ``k8s.device-plugin.nvidia.com-<class>.json``; the container runtime makes the MPS directories its
  Allocate mounts name under ``MPS_ROOT``;
- the DRA driver (``fakegpu dra``): ``plugins/gpu.nvidia.com/{dra.sock,checkpoint.json,mps/}``,
  ``plugins_registry/gpu.nvidia.com-reg.sock``, the claims' specs ``k8s.gpu.nvidia.com-claim_<uid>.yaml``;
  with ``--compute-domains`` also ``plugins/compute-domain.nvidia.com/{dra.sock,checkpoint.json,domains/}``,
  ``plugins_registry/compute-domain.nvidia.com-reg.sock``, ``k8s.compute-domain.nvidia.com-device_base.yaml``
  and ``k8s.compute-domain.nvidia.com-claim_<uid>.yaml``;
- both: the nvidia-smi files (``--nvidia-smi-dir``, one directory per daemon), the admin sockets, the temp
  files of an atomic write and the private name of a socket not yet renamed into place (left only by a
  process killed between the two steps).

A socket some process still accepts connections on is never removed (its daemon runs: stop it first), nor is
a plugin directory whose DRA socket is served. What is kept on purpose is returned with the reason, so the
dry run can say it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fakegpu.control.socket_paths import DEFAULT_DRA_SOCKET, DEFAULT_PLUGIN_SOCKET
from fakegpu.dra.claim_cdi_specs import CLAIM_CLASS, DEFAULT_DRIVER, cdi_vendor
from fakegpu.dra.compute_domain.cdi_edits import BASE_SPEC_FILE
from fakegpu.dra.compute_domain.cdi_edits import VENDOR as COMPUTE_DOMAIN_VENDOR
from fakegpu.dra.compute_domain.devices import COMPUTE_DOMAIN_DRIVER
from fakegpu.dra.compute_domain.domain_prepare import DOMAINS_DIR
from fakegpu.dra.mps_control_files import MPS_DIR
from fakegpu.dra.prepared_claims import CHECKPOINT_FILE
from fakegpu.fakeplugin.allocate_response import CDI_VENDOR
from fakegpu.fakeplugin.plugin_manager import plugin_socket_name
from fakegpu.kubelet.checkpoint import CHECKPOINT_NAME
from fakegpu.runtime.atomic_files import temp_name_glob
from fakegpu.runtime.kubelet_paths import DEFAULT_ROOT, DRA_SOCKET, KUBELET_SOCKET, KubeletPaths
from fakegpu.runtime.plugin_registration import registry_socket_name
from fakegpu.runtime.socket_server import PRIVATE_SOCKET_PREFIX
from fakegpu.runtime.unix_socket import listening_pid, pid_text
from fakegpu.telemetry.nvidia_smi.injection import DEFAULT_PLUGIN_DIR

DEFAULT_NVIDIA_SMI_DIR: Final = Path(DEFAULT_PLUGIN_DIR).parent
"""``/var/run/fakegpu/nvidia-smi``: one directory per daemon under it (``device-plugin``, ``dra``)."""
DEFAULT_MPS_ROOT: Final = Path("/run/nvidia/mps")
"""``MPS_ROOT`` in deploy/overlays/device-plugin, as in NVIDIA's chart."""
DEFAULT_CDI_ROOT: Final = Path("/var/run/cdi")
DEFAULT_ADMIN_SOCKETS: Final = (DEFAULT_PLUGIN_SOCKET, DEFAULT_DRA_SOCKET)
"""The daemons' ``--admin-socket`` as the overlays set it."""
RUN_DIR_NAME: Final = "fakegpu"
"""The directory holding the nvidia-smi directories and admin sockets (``/var/run/fakegpu``, the DaemonSets'
hostPath) goes too once nothing else is in it: its name is fakegpu's."""
NVIDIA_RUN_DIR_NAME: Final = "nvidia"
"""The MPS root's parent (``/run/nvidia``): NVIDIA's, so it goes only when nothing but the MPS root was in it."""
MAX_SYMLINKS: Final = 40
"""As the kernel's limit on links followed in one lookup (ELOOP)."""

DEVICE_PLUGIN_WRITER: Final = "device plugin"
CDI_SPECS_BY_WRITER: Final = {
    DEVICE_PLUGIN_WRITER: (f"{CDI_VENDOR}-*.json",),
    DEFAULT_DRIVER: (f"{cdi_vendor(DEFAULT_DRIVER)}-{CLAIM_CLASS}_*",),
    COMPUTE_DOMAIN_DRIVER: (BASE_SPEC_FILE, f"{COMPUTE_DOMAIN_VENDOR}-{CLAIM_CLASS}_*"),
}
"""Each writer's specs: the device plugin's, the GPU driver's claim specs (YAML, and JSON of older fakegpu
versions), the compute-domain plugin's base spec and claim specs. A writer that still serves keeps its specs:
its running containers resolve their devices through them."""
CDI_SPEC_GLOBS: Final = tuple(glob for globs in CDI_SPECS_BY_WRITER.values() for glob in globs)
DRA_PLUGIN_ENTRIES: Final = {
    DEFAULT_DRIVER: (DRA_SOCKET, CHECKPOINT_FILE, MPS_DIR),
    COMPUTE_DOMAIN_DRIVER: (DRA_SOCKET, CHECKPOINT_FILE, DOMAINS_DIR),
}
"""What each DRA plugin keeps in ``plugins/<driver>/``."""
REGISTRY_SOCKET_GLOBS: Final = (
    registry_socket_name("nvidia.com/*"),
    *(registry_socket_name(driver) for driver in DRA_PLUGIN_ENTRIES),
)
DEVICE_PLUGIN_SOCKET_GLOB: Final = plugin_socket_name("nvidia.com/*")
PRIVATE_SOCKET_GLOB: Final = f"{PRIVATE_SOCKET_PREFIX}*"

SERVED = "a running process{pid} serves it: stop that daemon first"
SERVED_SPEC = "the {writer} still serves (a running process{pid}): its containers resolve devices through it"
CDI_DIR_KEPT = "the container runtime's CDI directory, where other writers' specs live too"
NVIDIA_RUN_DIR_KEPT = "NVIDIA's run directory, which holds more than the MPS root (a driver's or the GPU operator's)"
KUBELET_CHECKPOINT_KEPT = "the kubelet's own device checkpoint: only the kubelet writes it"
KUBELET_SOCKET_KEPT = "the kubelet's own registration socket"
FOREIGN_FILES_KEPT = "holds files fakegpu does not write: {names}"


@dataclass(frozen=True)
class Kept:
    """Something cleanup leaves on purpose, and why."""

    path: Path
    reason: str


@dataclass
class HostFindings:
    """``remove``: fakegpu's paths, each directory after its contents; ``empty_dirs``: those of them that hold
    nothing else by then (removed only if still empty); ``kept``: what stays, with the reason."""

    remove: list[Path] = field(default_factory=list)
    empty_dirs: set[Path] = field(default_factory=set)
    kept: list[Kept] = field(default_factory=list)


@dataclass(frozen=True)
class HostLocations:
    """Where the daemons write on the node (each one a ``fakegpu cleanup`` flag with the daemons' default)."""

    nvidia_smi_dir: Path = DEFAULT_NVIDIA_SMI_DIR
    mps_root: Path = DEFAULT_MPS_ROOT
    cdi_root: Path = DEFAULT_CDI_ROOT
    admin_sockets: tuple[Path, ...] = DEFAULT_ADMIN_SOCKETS
    kubelet_dir: Path = DEFAULT_ROOT
    host_root: Path = Path("/")

    def on_host(self, path: Path) -> Path:
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

    def find(self) -> HostFindings:
        """Every fakegpu path that exists, and what is kept on purpose."""
        found = HostFindings()
        for tree in (self.nvidia_smi_dir, self.mps_root):
            _whole_tree(self.on_host(tree), found)
        self._cdi(found)
        _sockets((self.on_host(p) for p in self.admin_sockets), found)
        self._kubelet(found)
        self._emptied_parents(found)
        return found

    def _cdi(self, found: HostFindings) -> None:
        cdi = self.on_host(self.cdi_root)
        if not cdi.is_dir():
            return
        for writer, globs in CDI_SPECS_BY_WRITER.items():
            specs = _matching(cdi, [*globs, *map(temp_name_glob, globs)])
            pid = self._serving(writer)
            if pid is None:
                found.remove += specs
            else:
                found.kept += [Kept(spec, SERVED_SPEC.format(writer=writer, pid=pid_text(pid))) for spec in specs]
        found.kept.append(Kept(cdi, CDI_DIR_KEPT))

    def _serving(self, writer: str) -> int | None:
        """The pid (0 if unknown) of a process still serving for ``writer``, None when none does: a device
        plugin socket, or the DRA driver's ``dra.sock``."""
        paths = KubeletPaths(self.on_host(self.kubelet_dir))
        if writer == DEVICE_PLUGIN_WRITER:
            sockets = _matching(paths.device_plugins, [DEVICE_PLUGIN_SOCKET_GLOB])
        else:
            sockets = [paths.dra_plugin_dir(writer) / DRA_SOCKET]
        return next((pid for pid in map(_served, sockets) if pid is not None), None)

    def _kubelet(self, found: HostFindings) -> None:
        paths = KubeletPaths(self.on_host(self.kubelet_dir))
        _sockets(_matching(paths.device_plugins, [DEVICE_PLUGIN_SOCKET_GLOB, PRIVATE_SOCKET_GLOB]), found)
        _sockets(_matching(paths.plugins_registry, [*REGISTRY_SOCKET_GLOBS, PRIVATE_SOCKET_GLOB]), found)
        for driver, entries in DRA_PLUGIN_ENTRIES.items():
            _plugin_dir(paths.dra_plugin_dir(driver), entries, found)
        for own, reason in ((CHECKPOINT_NAME, KUBELET_CHECKPOINT_KEPT), (KUBELET_SOCKET, KUBELET_SOCKET_KEPT)):
            if os.path.lexists(paths.device_plugins / own):
                found.kept.append(Kept(paths.device_plugins / own, reason))

    def _emptied_parents(self, found: HostFindings) -> None:
        """``/var/run/fakegpu`` once everything in it is going; ``/run/nvidia`` too if only the MPS root was in
        it (the container runtime made both for the plugin's MPS mounts), else it stays with the reason."""
        going = set(found.remove)
        run_dirs = {self.on_host(p).parent for p in (self.nvidia_smi_dir, *self.admin_sockets)}
        candidates: list[tuple[Path, str | None]] = [(d, None) for d in sorted(run_dirs) if d.name == RUN_DIR_NAME]
        nvidia = self.on_host(self.mps_root).parent
        if nvidia.name == NVIDIA_RUN_DIR_NAME:
            candidates.append((nvidia, NVIDIA_RUN_DIR_KEPT))
        for directory, reason in candidates:
            if not directory.is_dir() or directory.is_symlink():
                continue
            if set(directory.iterdir()) <= going:
                found.remove.append(directory)
                found.empty_dirs.add(directory)
            elif reason is not None:
                found.kept.append(Kept(directory, reason))


def _matching(directory: Path, globs: Iterable[str]) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted({p for pattern in globs for p in directory.glob(pattern)})


def _whole_tree(root: Path, found: HostFindings) -> None:
    """A directory only fakegpu writes in: its entries, then itself."""
    if root.is_dir() and not root.is_symlink():
        found.remove += sorted(root.iterdir())
        found.remove.append(root)


def _served(path: Path) -> int | None:
    """The pid serving the socket at ``path`` (0 if unknown), None when it is not a live socket."""
    return listening_pid(path) if path.is_socket() else None


def _sockets(paths: Iterable[Path], found: HostFindings) -> None:
    """Stale sockets go; a served one stays (its daemon still runs)."""
    for path in paths:
        if not path.is_socket():
            continue
        pid = _served(path)
        if pid is None:
            found.remove.append(path)
        else:
            found.kept.append(Kept(path, SERVED.format(pid=pid_text(pid))))


def _plugin_dir(directory: Path, entries: tuple[str, ...], found: HostFindings) -> None:
    """``plugins/<driver>/``: fakegpu's entries, then the directory if nothing else is in it; all of it stays
    while the driver's DRA socket is served."""
    if not directory.is_dir() or directory.is_symlink():
        return
    pid = _served(directory / DRA_SOCKET)
    if pid is not None:
        found.kept.append(Kept(directory, SERVED.format(pid=pid_text(pid))))
        return
    ours = [directory / name for name in entries if os.path.lexists(directory / name)]
    ours += _matching(directory, [temp_name_glob(CHECKPOINT_FILE)])
    ours += [p for p in _matching(directory, [PRIVATE_SOCKET_GLOB]) if p.is_socket()]
    found.remove += sorted(ours)
    others = sorted(p.name for p in directory.iterdir() if p not in ours)
    if others:
        found.kept.append(Kept(directory, FOREIGN_FILES_KEPT.format(names=", ".join(others))))
    else:
        found.remove.append(directory)
        found.empty_dirs.add(directory)
