"""Resolving CDI device names the way a container runtime does, to test the specs fakegpu writes.

Follows cncf-tags/container-device-interface ``pkg/cdi/cache.go`` (``refresh``: every ``*.json`` and
``*.yaml`` of the spec directories is loaded and validated; a device defined by two specs of one
directory is a conflict, and the runtime refuses it), ``pkg/parser/parser.go``
(``ParseQualifiedName``: ``<vendor>/<class>=<name>``) and ``pkg/cdi/container-edits.go``
(``InjectDevices``: a spec's common edits once, before the edits of its devices; env edits replace a
variable already set).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fakegpu.runtime.cdi_spec_model import qualified_name, validate_spec


class UnresolvableDevice(LookupError):
    """What containerd reports as "unresolvable CDI devices"."""


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """``<vendor>/<class>=<name>`` -> (vendor, class, name); ValueError if it is not one."""
    kind, sep, name = device.partition("=")
    vendor, slash, cdi_class = kind.partition("/")
    if not sep or not slash:
        raise ValueError(f"unqualified CDI device {device!r}")
    qualified_name(vendor, cdi_class, name)
    return vendor, cdi_class, name


def read_spec_file(path: Path) -> dict[str, Any]:
    """One spec file, decoded by its extension as CDI's ``ReadSpec`` does (YAML is a superset of JSON)."""
    spec: dict[str, Any] = yaml.safe_load(path.read_text())
    return spec


def claim_spec_path(cdi_root: Path, claim_uid: str, vendor: str = "k8s.gpu.nvidia.com") -> Path:
    """Where NVIDIA's kubelet plugin writes a claim's spec (``cmd/gpu-kubelet-plugin/cdi.go``)."""
    return cdi_root / f"{vendor}-claim_{claim_uid}.yaml"


def load_specs(cdi_root: Path) -> dict[str, tuple[str, dict[str, Any], dict[str, Any]]]:
    """Qualified device name -> (spec file, spec, device), after validating every spec file."""
    devices: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}
    conflicts: set[str] = set()
    for path in sorted(cdi_root.iterdir()):
        if path.suffix not in (".json", ".yaml"):
            continue
        spec = read_spec_file(path)
        validate_spec(spec)
        for device in spec["devices"]:
            name = f"{spec['kind']}={device['name']}"
            if name in devices:
                conflicts.add(name)
            devices[name] = (path.name, spec, device)
    for name in conflicts:
        del devices[name]
    return devices


@dataclass
class ContainerEdits:
    """What the runtime adds to a container for its CDI devices."""

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, edits: dict[str, Any]) -> None:
        for var in edits.get("env") or []:
            key, _, value = var.partition("=")
            self.env[key] = value
        self.device_nodes += edits.get("deviceNodes") or []
        self.mounts += edits.get("mounts") or []

    @property
    def mount_targets(self) -> list[str]:
        return [m["containerPath"] for m in self.mounts]

    @property
    def node_paths(self) -> list[str]:
        return [n["path"] for n in self.device_nodes]


def resolve(cdi_root: Path, names: list[str]) -> ContainerEdits:
    """The edits a runtime applies for ``names``; UnresolvableDevice names the ones no spec defines."""
    for name in names:
        parse_qualified_name(name)
    known = load_specs(cdi_root)
    missing = [n for n in names if n not in known]
    if missing:
        raise UnresolvableDevice(f"unresolvable CDI devices {', '.join(missing)}")
    out = ContainerEdits()
    seen_specs: set[str] = set()
    for name in names:
        file_name, spec, device = known[name]
        if file_name not in seen_specs:
            seen_specs.add(file_name)
            out.apply(spec.get("containerEdits") or {})
        out.apply(device["containerEdits"])
    return out
