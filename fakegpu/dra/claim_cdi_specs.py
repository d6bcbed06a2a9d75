"""Per-claim CDI spec files: what a container runtime reads to inject a prepared claim's devices.

The kubelet only passes CDI device IDs (``k8s.gpu.nvidia.com/claim=<claimUID>-gpu-0``) to the runtime;
the runtime resolves them through spec files in ``/var/run/cdi`` (the spec model, its checks and the
atomic writing are ``fakegpu.runtime.cdi_spec_model``, shared with the device plugin's spec).

Naming and layout mirror NVIDIA's kubelet plugin (``cmd/gpu-kubelet-plugin/cdi.go`` ``CreateClaimSpecFile``
in kubernetes-sigs/dra-driver-nvidia-gpu): vendor ``k8s.<driver>``, class ``claim``, device names
``<claimUID>-<device>``, one transient spec per claim written as YAML to
``<vendor>-<class>_<claimUID>.yaml``. The spec-wide (common) edits set ``NVIDIA_VISIBLE_DEVICES=void``, so
a ``nvidia-container-runtime`` never injects devices a second time from an image's own
``NVIDIA_VISIBLE_DEVICES=all``; each device carries its own edits. Specs of older fakegpu versions were
``.json``: removing a claim's spec removes that file too, so a checkpoint written before the change
unprepares cleanly.

A fake GPU has no device nodes, so each device's edits name the devices the container gets in
``FAKEGPU_VISIBLE_DEVICES`` (``fakegpu.dra.prepare_plan``) where NVIDIA's add ``/dev/nvidia<N>``;
with ``--inject-nvidia-smi`` the common edits also bind-mount the fake nvidia-smi and devices.json
read-only (``fakegpu.telemetry.nvidia_smi.injection``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from fakegpu.dra.mps_control_files import cdi_mounts
from fakegpu.runtime.cdi_spec_model import (
    SpecFormat,
    check_device_name,
    new_spec,
    remove_spec_file,
    spec_file_name,
    write_spec_file,
)
from fakegpu.telemetry.nvidia_smi.injection import NVIDIA_VISIBLE_DEVICES_ENV, cdi_container_edits

CLAIM_CLASS: Final = "claim"
DEFAULT_DRIVER: Final = "gpu.nvidia.com"
SPEC_EXTENSION: Final[SpecFormat] = ".yaml"
"""What NVIDIA's ``writeSpec`` saves (``specName + ".yaml"``); CDI picks the YAML encoder from it."""
LEGACY_EXTENSION: Final[SpecFormat] = ".json"
"""fakegpu's claim specs before they followed NVIDIA's format; still removed on unprepare and roll-back."""
VOID_VISIBLE_DEVICES: Final = f"{NVIDIA_VISIBLE_DEVICES_ENV}=void"
"""NVIDIA's common edit: nothing for nvidia-container-runtime to inject besides the CDI devices."""

# What may appear in a claim UID that becomes part of a file name and a CDI device name: the CDI
# device-name alphabet minus ':' (kept out of file names), never '/' and never '..'.
_SAFE_UID: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
MAX_CLAIM_UID_LENGTH: Final = 128
"""Longer UIDs would push ``<vendor>-<class>_<uid>.yaml`` (and its temp file's name) past NAME_MAX."""


class CdiDevice(Protocol):
    """One prepared device as the spec writer needs it (``prepare_plan.PreparedResult`` fits)."""

    @property
    def device(self) -> str: ...

    @property
    def share_id(self) -> str | None: ...

    @property
    def env(self) -> Sequence[str]: ...

    @property
    def mps_daemon_id(self) -> str | None: ...


# --- names --------------------------------------------------------------------------------------------


def cdi_vendor(driver: str = DEFAULT_DRIVER) -> str:
    """NVIDIA's CDI vendor for a DRA driver: ``k8s.<driver>`` (``k8s.gpu.nvidia.com``)."""
    return f"k8s.{driver}"


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
    check_device_name(name)
    return name


def spec_file_name_for(vendor: str, claim_uid: str, ext: SpecFormat, cdi_class: str = CLAIM_CLASS) -> str:
    """CDI's transient spec name ``<vendor>-<class>_<claimUID>`` plus ``ext``."""
    return spec_file_name(vendor, cdi_class, check_claim_uid(claim_uid), ext)


def claim_spec_file_name(vendor: str, claim_uid: str, cdi_class: str = CLAIM_CLASS) -> str:
    """The claim's spec file as NVIDIA names it: ``<vendor>-<class>_<claimUID>.yaml``."""
    return spec_file_name_for(vendor, claim_uid, SPEC_EXTENSION, cdi_class)


# --- building and files ---------------------------------------------------------------------------------


def _device_edits(device: CdiDevice, mps_root: Path | None) -> dict[str, Any]:
    """A device's own edits: its env, then for an MPS group the control daemon's mounts (NVIDIA appends the
    config's edits to the device's)."""
    edits: dict[str, Any] = {"env": list(device.env)}
    if device.mps_daemon_id:
        if mps_root is None:
            raise ValueError(f"device {device.device} shares an MPS control daemon, but no MPS root was given")
        edits["mounts"] = cdi_mounts(mps_root, device.mps_daemon_id)
    return edits


def claim_spec(
    vendor: str,
    claim_uid: str,
    prepared: Iterable[CdiDevice],
    cdi_class: str = CLAIM_CLASS,
    *,
    nvidia_smi_dir: str | None = None,
    mps_root: Path | None = None,
) -> dict[str, Any]:
    """The claim's spec: NVIDIA's common ``NVIDIA_VISIBLE_DEVICES=void`` (plus the fake nvidia-smi's mounts
    when ``nvidia_smi_dir`` is set) and one device per prepared device with its own edits (MPS devices
    mount their control daemon's directories under ``mps_root``)."""
    devices: list[dict[str, Any]] = [
        {"name": claim_device_name(claim_uid, d.device, d.share_id), "containerEdits": _device_edits(d, mps_root)}
        for d in prepared
    ]
    common: dict[str, Any] = {"env": [VOID_VISIBLE_DEVICES]}
    if nvidia_smi_dir:
        smi = cdi_container_edits(nvidia_smi_dir)
        common = {"env": [*common["env"], *smi["env"]], "mounts": smi["mounts"]}
    return new_spec(vendor, cdi_class, devices, common)


def write_spec(cdi_root: Path, spec: dict[str, Any], claim_uid: str) -> Path:
    """Validate and atomically write the claim's spec (YAML, mode 0644); returns the file written. A spec
    an older fakegpu wrote as JSON for the same claim is removed after: two specs defining the same
    devices would make the runtime refuse both."""
    vendor, cdi_class = str(spec["kind"]).split("/")
    file_name = claim_spec_file_name(vendor, claim_uid, cdi_class)
    prefix = f"{claim_uid}-"
    for device in spec["devices"]:
        if not str(device["name"]).startswith(prefix):
            raise ValueError(f"device {device['name']!r} does not belong to claim {claim_uid}")
    path = write_spec_file(cdi_root, file_name, spec)
    remove_spec_file(cdi_root, spec_file_name_for(vendor, claim_uid, LEGACY_EXTENSION, cdi_class))
    return path


def remove_spec(cdi_root: Path, claim_uid: str, vendor: str | None = None, cdi_class: str = CLAIM_CLASS) -> bool:
    """Delete the claim's spec, YAML or a legacy JSON one; a missing file is fine (unprepare is
    idempotent). True if one was removed."""
    removed = False
    for ext in (SPEC_EXTENSION, LEGACY_EXTENSION):
        removed |= remove_spec_file(cdi_root, spec_file_name_for(vendor or cdi_vendor(), claim_uid, ext, cdi_class))
    return removed
