"""Per-claim CDI spec files: what a container runtime reads to inject a prepared claim's devices.

The kubelet only passes CDI device IDs (``k8s.gpu.nvidia.com/claim=<claimUID>-gpu-0``) to the runtime;
the runtime resolves them through spec files in ``/var/run/cdi``. A spec the runtime rejects fails the
container ("unresolvable CDI devices"), so every spec is validated here against the CDI rules before it
is written (``cncf-tags/container-device-interface``: ``pkg/parser``, ``specs-go`` version checks).

Naming mirrors NVIDIA's DRA driver: vendor ``k8s.<driver>``, class ``claim``, device names
``<claimUID>-<device>``, one transient spec per claim named ``<vendor>-<class>_<claimUID>``. The file is
written as **JSON** (``.json``), not NVIDIA's ``.yaml``: CDI loads both, JSON is valid YAML, needs no
third-party serializer and is byte-for-byte deterministic (the test driver in the golden readings writes
``.json`` too).

A fake GPU has no device nodes, so devices carry environment edits only; with ``--inject-nvidia-smi``
each device also sets ``FAKEGPU_VISIBLE_DEVICES`` (its ``NVIDIA_VISIBLE_DEVICES`` list, which the fake
nvidia-smi prefers to an image's own ``NVIDIA_VISIBLE_DEVICES=all``) and the spec adds spec-wide edits
(applied whenever one of its devices is) that bind-mount the fake
nvidia-smi and devices.json read-only, as NVIDIA's toolkit specs mount driver files: no mount ``type``,
so the lowest ``cdiVersion`` that admits the fields used stays ``0.3.0``, or ``0.5.0`` once a device name
starts with a digit, as most claim UIDs do.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from fakegpu.runtime.atomic_files import atomic_write
from fakegpu.telemetry.nvidia_smi.injection import (
    CONTAINER_DEVICES_PATH,
    DEVICES_FILE_ENV,
    NVIDIA_VISIBLE_DEVICES_ENV,
    VISIBLE_DEVICES_ENV,
    injected_mounts,
)

CLAIM_CLASS: Final = "claim"
DEFAULT_DRIVER: Final = "gpu.nvidia.com"
SPEC_EXTENSION: Final = ".json"
SPEC_FILE_MODE: Final = 0o644
"""Runtimes (containerd, CRI-O) read the spec as another user than the driver may run as."""

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
MOUNT_OPTIONS: Final = ("ro", "nosuid", "nodev", "bind")
"""The options nvidia-ctk gives the driver files it mounts; ``bind`` makes a runtime bind-mount without a
``type`` field (which would need cdiVersion 0.4.0)."""

_SPEC_FIELDS: Final = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
_DEVICE_FIELDS: Final = frozenset({"name", "annotations", "containerEdits"})
_EDIT_FIELDS: Final = frozenset({"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"})
_HOOK_NAMES: Final = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
# What may appear in a claim UID that becomes part of a file name and a CDI device name: the CDI
# device-name alphabet minus ':' (kept out of file names), never '/' and never '..'.
_SAFE_UID: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
MAX_CLAIM_UID_LENGTH: Final = 128
"""Longer UIDs would push ``<vendor>-<class>_<uid>.json`` (and its temp file's name) past NAME_MAX."""


class CdiDevice(Protocol):
    """One prepared device as the spec writer needs it (``claim_preparation.PreparedResult`` fits)."""

    @property
    def device(self) -> str: ...

    @property
    def share_id(self) -> str | None: ...

    @property
    def env(self) -> Sequence[str]: ...


# --- names --------------------------------------------------------------------------------------------


def cdi_vendor(driver: str = DEFAULT_DRIVER) -> str:
    """NVIDIA's CDI vendor for a DRA driver: ``k8s.<driver>`` (``k8s.gpu.nvidia.com``)."""
    return f"k8s.{driver}"


def qualified_name(vendor: str, cdi_class: str, name: str) -> str:
    """The fully qualified CDI device ID ``<vendor>/<class>=<name>`` the kubelet hands to the runtime."""
    _check_vendor_or_class(vendor, "vendor")
    _check_vendor_or_class(cdi_class, "class")
    _check_device_name(name)
    return f"{vendor}/{cdi_class}={name}"


def check_claim_uid(claim_uid: str) -> str:
    """Reject claim UIDs that could escape the CDI directory or break a CDI device name."""
    if len(claim_uid) > MAX_CLAIM_UID_LENGTH:
        raise ValueError(
            f"claim UID of {len(claim_uid)} characters is not usable in a CDI spec: at most "
            f"{MAX_CLAIM_UID_LENGTH} (a Kubernetes UID has 36), or the spec file's name gets too long"
        )
    if not _SAFE_UID.fullmatch(claim_uid) or ".." in claim_uid:
        raise ValueError(
            f"claim UID {claim_uid!r} is not usable in a CDI spec: only letters, digits, '-', '_' and '.' "
            "are allowed (no '/', no '..', alphanumeric first and last)"
        )
    return claim_uid


def claim_device_name(claim_uid: str, device: str, share_id: str | None = None) -> str:
    """``<claimUID>-<device>[-<shareID>]``: unique per claim, so a runtime's spec cache never serves a
    stale device for a new claim."""
    check_claim_uid(claim_uid)
    name = f"{claim_uid}-{device}" if not share_id else f"{claim_uid}-{device}-{share_id}"
    _check_device_name(name)
    return name


def spec_file_name(vendor: str, claim_uid: str, cdi_class: str = CLAIM_CLASS) -> str:
    """CDI's transient spec name ``<vendor>-<class>_<claimUID>`` plus ``.json``."""
    _check_vendor_or_class(vendor, "vendor")
    _check_vendor_or_class(cdi_class, "class")
    return f"{vendor}-{cdi_class}_{check_claim_uid(claim_uid)}{SPEC_EXTENSION}"


# --- building and validating ----------------------------------------------------------------------------


def nvidia_smi_edits(directory: str) -> dict[str, Any]:
    """Spec-wide edits for ``--inject-nvidia-smi``: the script and devices.json from ``directory``."""
    return {
        "env": [f"{DEVICES_FILE_ENV}={CONTAINER_DEVICES_PATH}"],
        "mounts": [
            {"hostPath": m.host_path, "containerPath": m.container_path, "options": list(MOUNT_OPTIONS)}
            for m in injected_mounts(directory)
        ],
    }


def _device_env(env: Sequence[str], nvidia_smi_dir: str | None) -> list[str]:
    """A device's env; with the fake nvidia-smi, its NVIDIA_VISIBLE_DEVICES again as FAKEGPU_VISIBLE_DEVICES."""
    out = list(env)
    if nvidia_smi_dir:
        prefix = f"{NVIDIA_VISIBLE_DEVICES_ENV}="
        out += [f"{VISIBLE_DEVICES_ENV}={e.removeprefix(prefix)}" for e in env if e.startswith(prefix)]
    return out


def cdi_spec(
    vendor: str,
    claim_uid: str,
    prepared: Iterable[CdiDevice],
    cdi_class: str = CLAIM_CLASS,
    *,
    nvidia_smi_dir: str | None = None,
) -> dict[str, Any]:
    """The claim's spec: one env-only device per prepared device (plus the fake nvidia-smi's mounts when
    ``nvidia_smi_dir`` is set), at the lowest cdiVersion that fits."""
    devices: list[dict[str, Any]] = [
        {
            "name": claim_device_name(claim_uid, d.device, d.share_id),
            "containerEdits": {"env": _device_env(d.env, nvidia_smi_dir)},
        }
        for d in prepared
    ]
    spec: dict[str, Any] = {"cdiVersion": EARLIEST_VERSION, "kind": f"{vendor}/{cdi_class}", "devices": devices}
    if nvidia_smi_dir:
        spec["containerEdits"] = nvidia_smi_edits(nvidia_smi_dir)
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


def _check_vendor_or_class(name: str, what: str) -> None:
    if not name:
        raise ValueError(f"CDI {what} name is empty")
    if not ("A" <= name[0] <= "Z" or "a" <= name[0] <= "z"):
        raise ValueError(f"CDI {what} name {name!r} must start with a letter")
    for c in name[1:-1]:
        if not (c.isascii() and (c.isalnum() or c in "_-.")):
            raise ValueError(f"invalid character {c!r} in CDI {what} name {name!r} (allowed: A-Z a-z 0-9 _ - .)")
    if not (name[-1].isascii() and name[-1].isalnum()):
        raise ValueError(f"CDI {what} name {name!r} must end with a letter or digit")


def _check_device_name(name: str) -> None:
    if not name:
        raise ValueError("CDI device name is empty")
    if not (name[0].isascii() and name[0].isalnum()):
        raise ValueError(f"CDI device name {name!r} must start with a letter or digit")
    for c in name[1:-1]:
        if not (c.isascii() and (c.isalnum() or c in "_-.:")):
            raise ValueError(f"invalid character {c!r} in CDI device name {name!r} (allowed: A-Z a-z 0-9 _ - . :)")
    if not (name[-1].isascii() and name[-1].isalnum()):
        raise ValueError(f"CDI device name {name!r} must end with a letter or digit")


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
    _check_vendor_or_class(vendor, "vendor")
    _check_vendor_or_class(cdi_class, "class")
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
        _check_device_name(name)
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


def write_spec(cdi_root: Path, spec: Mapping[str, Any], claim_uid: str) -> Path:
    """Validate and atomically write the claim's spec (mode 0644); returns the file written."""
    validate_spec(spec)
    vendor, cdi_class = str(spec["kind"]).split("/")
    path = _inside(cdi_root, spec_file_name(vendor, claim_uid, cdi_class))
    prefix = f"{claim_uid}-"
    for device in spec["devices"]:
        if not str(device["name"]).startswith(prefix):
            raise ValueError(f"device {device['name']!r} does not belong to claim {claim_uid}")
    blob = (json.dumps(spec, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")
    atomic_write(path, blob, SPEC_FILE_MODE)
    return path


def remove_spec(cdi_root: Path, claim_uid: str, vendor: str | None = None, cdi_class: str = CLAIM_CLASS) -> bool:
    """Delete the claim's spec; a missing file is fine (unprepare is idempotent). True if one was removed."""
    path = _inside(cdi_root, spec_file_name(vendor or cdi_vendor(), claim_uid, cdi_class))
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
