"""CDI specs as a container runtime loads them: the one model both faces write their specs with.

The kubelet hands the runtime fully qualified CDI device names (``<vendor>/<class>=<name>``) and the
runtime resolves them through the spec files in ``/var/run/cdi``; a name no spec defines, or a spec the
runtime refuses, fails the container ("unresolvable CDI devices"). So every spec is checked here against
the rules of ``cncf-tags/container-device-interface`` (``pkg/parser``, ``pkg/cdi/spec.go``,
``specs-go`` ``MinimumRequiredVersion``) before it is written, declares the lowest ``cdiVersion`` that
admits the fields it uses (as NVIDIA's writers do), and is written atomically into a directory no one
but its owner may write (a world-writable CDI root would let anyone plant a spec the runtime applies).

The device plugin writes ``k8s.device-plugin.nvidia.com-<class>.json`` (``internal/cdi/cdi.go``), the DRA
driver one transient ``k8s.gpu.nvidia.com-claim_<claimUID>.yaml`` per claim
(``cmd/gpu-kubelet-plugin/cdi.go``): the file format follows the extension, as CDI's ``Spec.Save``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from fakegpu.runtime.atomic_files import atomic_write
from fakegpu.runtime.directories import ensure_dir

SpecFormat = Literal[".json", ".yaml"]

SPEC_FILE_MODE: Final = 0o644
"""Runtimes (containerd, CRI-O) read the spec as another user than the daemon may run as."""

EARLIEST_VERSION: Final = "0.3.0"
KNOWN_VERSIONS: Final = (
    "0.1.0",
    "0.2.0",
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
MAX_CLASS_LENGTH: Final = 63

_SPEC_FIELDS: Final = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
_DEVICE_FIELDS: Final = frozenset({"name", "annotations", "containerEdits"})
_EDIT_FIELDS: Final = frozenset({"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"})
_HOOK_NAMES: Final = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)


# --- names --------------------------------------------------------------------------------------------


def qualified_name(vendor: str, cdi_class: str, name: str) -> str:
    """The fully qualified CDI device name ``<vendor>/<class>=<name>`` (CDI's ``parser.QualifiedName``)."""
    check_vendor_or_class(vendor, "vendor")
    check_vendor_or_class(cdi_class, "class")
    check_device_name(name)
    return f"{vendor}/{cdi_class}={name}"


def spec_file_name(vendor: str, cdi_class: str, transient_id: str | None, ext: SpecFormat) -> str:
    """CDI's ``GenerateSpecName`` (``<vendor>-<class>``) or ``GenerateTransientSpecName``
    (``<vendor>-<class>_<id>``), plus the extension that picks the format."""
    check_vendor_or_class(vendor, "vendor")
    check_vendor_or_class(cdi_class, "class")
    base = f"{vendor}-{cdi_class}" if transient_id is None else f"{vendor}-{cdi_class}_{transient_id}"
    return base + ext


# --- building and validating ----------------------------------------------------------------------------


def new_spec(
    vendor: str, cdi_class: str, devices: list[dict[str, Any]], common_edits: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A spec of ``devices`` (and spec-wide ``common_edits``, applied whenever one of its devices is),
    at the lowest cdiVersion that admits what it uses, checked as a runtime would."""
    spec: dict[str, Any] = {"cdiVersion": EARLIEST_VERSION, "kind": f"{vendor}/{cdi_class}", "devices": devices}
    if common_edits:
        spec["containerEdits"] = dict(common_edits)
    spec["cdiVersion"] = minimum_version(spec)
    validate_spec(spec)
    return spec


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.removeprefix("v").split("."))


def _all_edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    edits: list[Mapping[str, Any]] = []
    if isinstance(spec.get("containerEdits"), Mapping):
        edits.append(spec["containerEdits"])
    for device in spec.get("devices") or []:
        if isinstance(device, Mapping) and isinstance(device.get("containerEdits"), Mapping):
            edits.append(device["containerEdits"])
    return edits


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest cdiVersion admitting the fields ``spec`` uses (CDI's ``MinimumRequiredVersion``)."""
    edits = _all_edits(spec)
    devices = [d for d in spec.get("devices") or [] if isinstance(d, Mapping)]
    kind = spec.get("kind")
    cdi_class = kind.split("/", 1)[1] if isinstance(kind, str) and "/" in kind else ""

    def intel_rdt_v110(rdt: Any) -> bool:
        return isinstance(rdt, Mapping) and (rdt.get("schemata") is not None or bool(rdt.get("enableMonitoring")))

    if any(e.get("netDevices") or intel_rdt_v110(e.get("intelRdt")) for e in edits):
        return "1.1.0"
    if any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits):
        return "0.7.0"
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in cdi_class:
        return "0.6.0"
    names = [d.get("name") for d in devices]
    if any(isinstance(n, str) and n[:1].isdigit() for n in names) or any(
        isinstance(node, Mapping) and node.get("hostPath") for e in edits for node in e.get("deviceNodes") or []
    ):
        return "0.5.0"
    if any(isinstance(m, Mapping) and m.get("type") for e in edits for m in e.get("mounts") or []):
        return "0.4.0"
    return EARLIEST_VERSION


def _check_name(name: str, what: str, first_letter_only: bool, inner: str) -> None:
    """CDI's name rules (``pkg/parser``): a letter (vendor, class) or alphanumeric (device) first, letters,
    digits and ``inner`` inside, alphanumeric last."""
    if not name:
        raise ValueError(f"CDI {what} name is empty")
    if first_letter_only and not ("A" <= name[0] <= "Z" or "a" <= name[0] <= "z"):
        raise ValueError(f"CDI {what} name {name!r} must start with a letter")
    if not first_letter_only and not (name[0].isascii() and name[0].isalnum()):
        raise ValueError(f"CDI {what} name {name!r} must start with a letter or digit")
    for c in name[1:-1]:
        if not (c.isascii() and (c.isalnum() or c in inner)):
            allowed = " ".join(["A-Z a-z 0-9", *inner])
            raise ValueError(f"invalid character {c!r} in CDI {what} name {name!r} (allowed: {allowed})")
    if not (name[-1].isascii() and name[-1].isalnum()):
        raise ValueError(f"CDI {what} name {name!r} must end with a letter or digit")


def check_vendor_or_class(name: str, what: str) -> None:
    """A vendor or class name: a letter first, ``_ - .`` inside."""
    _check_name(name, what, True, "_-.")


def check_device_name(name: str) -> None:
    """A device name: alphanumeric first, ``_ - . :`` inside."""
    _check_name(name, "device", False, "_-.:")


def _check_fields(obj: Any, allowed: frozenset[str], where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where} must be an object")
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise ValueError(f"unknown field {where}.{unknown[0]} (CDI rejects specs with unknown fields)")
    return obj


def _check_annotations(value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{where}.annotations must map strings to strings")


def _check_edits(raw: Any, where: str) -> Mapping[str, Any]:
    edits = _check_fields(raw, _EDIT_FIELDS, where)
    env = edits.get("env") or []
    if not isinstance(env, list):
        raise ValueError(f'{where}.env must be a list of "KEY=VALUE" strings')
    for i, var in enumerate(env):
        if not isinstance(var, str) or var.find("=") <= 0:
            raise ValueError(f'{where}.env[{i}] = {var!r} is not "KEY=VALUE" with a non-empty KEY')
    for i, node in enumerate(edits.get("deviceNodes") or []):
        if not isinstance(node, Mapping) or not node.get("path"):
            raise ValueError(f"{where}.deviceNodes[{i}] needs a path")
    for i, mount in enumerate(edits.get("mounts") or []):
        if not isinstance(mount, Mapping) or not mount.get("hostPath") or not mount.get("containerPath"):
            raise ValueError(f"{where}.mounts[{i}] needs hostPath and containerPath")
    for i, hook in enumerate(edits.get("hooks") or []):
        if not isinstance(hook, Mapping) or hook.get("hookName") not in _HOOK_NAMES:
            raise ValueError(f"{where}.hooks[{i}].hookName must be one of {sorted(_HOOK_NAMES)}")
        if not str(hook.get("path", "")).startswith("/"):
            raise ValueError(f"{where}.hooks[{i}].path must be absolute")
    return edits


def _is_empty_edits(edits: Mapping[str, Any]) -> bool:
    return not any(edits.get(k) for k in _EDIT_FIELDS)


def validate_spec(spec: Any) -> None:
    """Check the CDI rules a runtime enforces when loading a spec; ``ValueError`` names the rule broken."""
    spec = _check_fields(spec, _SPEC_FIELDS, "spec")
    version = spec.get("cdiVersion")
    if not isinstance(version, str) or version.removeprefix("v") not in KNOWN_VERSIONS:
        raise ValueError(f"cdiVersion {version!r} is not a known CDI version ({', '.join(KNOWN_VERSIONS)})")
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind.count("/") != 1:
        raise ValueError(f"kind {kind!r} must be <vendor>/<class>")
    vendor, cdi_class = kind.split("/")
    check_vendor_or_class(vendor, "vendor")
    check_vendor_or_class(cdi_class, "class")
    if len(cdi_class) > MAX_CLASS_LENGTH:
        raise ValueError(f"CDI class {cdi_class!r} is longer than {MAX_CLASS_LENGTH} characters")
    _check_annotations(spec.get("annotations"), "spec")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        raise ValueError("spec.devices must list at least one device")
    seen: set[str] = set()
    for i, raw_device in enumerate(devices):
        where = f"devices[{i}]"
        device = _check_fields(raw_device, _DEVICE_FIELDS, where)
        name = device.get("name")
        if not isinstance(name, str):
            raise ValueError(f"{where}.name must be a string")
        check_device_name(name)
        if name in seen:
            raise ValueError(f"device name {name!r} appears twice in the spec")
        seen.add(name)
        _check_annotations(device.get("annotations"), where)
        edits = _check_edits(device.get("containerEdits"), f"{where}.containerEdits")
        if _is_empty_edits(edits):
            raise ValueError(f"{where} ({name}) has empty containerEdits; CDI rejects such devices")
    if spec.get("containerEdits") is not None:
        _check_edits(spec["containerEdits"], "spec.containerEdits")
    required = minimum_version(spec)
    if _version_tuple(version) < _version_tuple(required):
        raise ValueError(f"cdiVersion {version} is too old for the fields used: the spec needs at least {required}")


# --- files ----------------------------------------------------------------------------------------------


def _inside(cdi_root: Path, file_name: str) -> Path:
    path = cdi_root / file_name
    if path.parent.resolve() != cdi_root.resolve() or os.sep in file_name or file_name.startswith("."):
        raise ValueError(f"CDI spec file name {file_name!r} would leave {cdi_root}")
    return path


def render_spec(spec: Mapping[str, Any], ext: SpecFormat) -> bytes:
    """The file's bytes: compact JSON, or block YAML in the spec's own key order (as ``Spec.Save`` picks
    the encoder by extension)."""
    if ext == ".yaml":
        return yaml.safe_dump(dict(spec), sort_keys=False, default_flow_style=False).encode("utf-8")
    return (json.dumps(spec, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def write_spec_file(cdi_root: Path, file_name: str, spec: Mapping[str, Any]) -> Path:
    """Validate ``spec`` and write it atomically (mode 0644) as ``cdi_root/file_name``, creating
    ``cdi_root`` owner-writable only; the extension of ``file_name`` picks JSON or YAML."""
    validate_spec(spec)
    path = _inside(cdi_root, file_name)
    formats: dict[str, SpecFormat] = {".json": ".json", ".yaml": ".yaml"}
    if path.suffix not in formats:
        raise ValueError(f"CDI spec file {file_name!r} must end in .json or .yaml (a runtime loads nothing else)")
    ensure_dir(cdi_root)
    atomic_write(path, render_spec(spec, formats[path.suffix]), SPEC_FILE_MODE)
    return path


def remove_spec_file(cdi_root: Path, file_name: str) -> bool:
    """Delete ``cdi_root/file_name``; a missing file is fine. True if one was removed."""
    path = _inside(cdi_root, file_name)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
