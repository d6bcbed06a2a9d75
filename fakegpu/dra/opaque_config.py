"""NVIDIA's opaque device configs for this driver: strict decoding, precedence and lookup.

Opaque configs follow NVIDIA's ``resource.nvidia.com/v1beta1`` ``GpuConfig`` / ``MigDeviceConfig``
with NVIDIA's precedence (class configs, then claim configs, later wins; empty ``requests`` matches
every request) and strict decoding (unknown fields, kinds and strategies are errors naming the field).
Every error is a ``ClaimError`` whose text names the claim, the config and the field: it is what the
kubelet shows for the pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.device_map import DeviceKind
from fakegpu.sharing.errors import shorten
from fakegpu.sharing.gpu_policies import TIME_SLICES
from fakegpu.sharing.quantities import quantity_value

CONFIG_API_VERSION: Final = "resource.nvidia.com/v1beta1"
GPU_CONFIG: Final = "GpuConfig"
MIG_CONFIG: Final = "MigDeviceConfig"
TIME_SLICING: Final = "TimeSlicing"
MPS: Final = "MPS"

_MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class SharingConfig:
    """A decoded, normalized ``GpuConfig`` / ``MigDeviceConfig``."""

    kind: str
    strategy: str
    interval: str | None = None
    active_thread_percentage: int | None = None
    pinned_memory_limit_mib: int | None = None
    per_device_pinned_mib: tuple[tuple[str, int], ...] = ()
    multi_user: bool | None = None
    explicit: bool = True
    """False for the built-in defaults, which set no sharing variables."""
    sharing_given: bool = True
    """False when the config has no ``sharing`` section: NVIDIA validates (and gates) only a given one."""
    where: str = "default config"
    """Which config this is, for error texts."""

    @property
    def device_kind(self) -> DeviceKind:
        return "gpu" if self.kind == GPU_CONFIG else "mig"


@dataclass(frozen=True)
class OpaqueConfig:
    """One decoded config entry of this driver, with the requests it names and where it came from."""

    requests: tuple[str, ...]
    config: SharingConfig
    where: str


_DEFAULTS: Final = (
    OpaqueConfig(
        (), SharingConfig(kind=MIG_CONFIG, strategy=TIME_SLICING, explicit=False, sharing_given=False), "default config"
    ),
    OpaqueConfig(
        (),
        SharingConfig(kind=GPU_CONFIG, strategy=TIME_SLICING, explicit=False, sharing_given=False),
        "default config",
    ),
)
"""What applies when no config names a device; lowest precedence."""


class _Decoder:
    """Strict decoding of one opaque config; every error names the config and the field."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, message: str) -> ClaimError:
        return ClaimError(f"{self.where}: {message}")

    def obj(self, value: Any, path: str, allowed: Iterable[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(f"{path or 'parameters'} must be an object")
        allowed_set = set(allowed)
        for key in value:
            if key not in allowed_set:
                name = f"{path}.{key}" if path else str(key)
                raise self.fail(f'unknown field "{name}" (strict decoding; allowed: {", ".join(sorted(allowed_set))})')
        return value

    def mps(self, value: Any, path: str) -> dict[str, Any]:
        mps = self.obj(
            value,
            path,
            (
                "defaultActiveThreadPercentage",
                "defaultPinnedDeviceMemoryLimit",
                "defaultPerDevicePinnedMemoryLimit",
                "multiUser",
            ),
        )
        out: dict[str, Any] = {}
        pct = mps.get("defaultActiveThreadPercentage")
        if pct is not None:
            if isinstance(pct, bool) or not isinstance(pct, int):
                raise self.fail(f"{path}.defaultActiveThreadPercentage must be an integer, found {pct!r}")
            if not 0 <= pct <= 100:
                raise self.fail(f"{path}.defaultActiveThreadPercentage must be between 0 and 100, found {pct}")
            out["active_thread_percentage"] = pct
        limit = mps.get("defaultPinnedDeviceMemoryLimit")
        if limit is not None:
            out["pinned_memory_limit_mib"] = self.mib(limit, f"{path}.defaultPinnedDeviceMemoryLimit")
        per_device = mps.get("defaultPerDevicePinnedMemoryLimit")
        if per_device is not None:
            if not isinstance(per_device, Mapping):
                raise self.fail(f"{path}.defaultPerDevicePinnedMemoryLimit must map device index or UUID to a quantity")
            out["per_device_pinned_mib"] = tuple(
                (str(k), self.mib(v, f"{path}.defaultPerDevicePinnedMemoryLimit[{k}]")) for k, v in per_device.items()
            )
        multi_user = mps.get("multiUser")
        if multi_user is not None:
            if not isinstance(multi_user, bool):
                raise self.fail(f"{path}.multiUser must be a boolean")
            out["multi_user"] = multi_user
        return out

    def mib(self, value: Any, path: str) -> int:
        try:
            mib = quantity_value(value) // _MIB
        except ValueError as exc:
            raise self.fail(f"{path}: {exc}") from None
        if mib <= 0:
            raise self.fail(f"{path} = {value!r} is too low: MPS limits are set in whole MiB and must be at least 1Mi")
        return mib

    def decode(self, params: Any) -> SharingConfig:
        head = self.obj(params, "", ("apiVersion", "kind", "sharing"))
        if head.get("apiVersion") != CONFIG_API_VERSION:
            raise self.fail(f"apiVersion must be {CONFIG_API_VERSION}, found {head.get('apiVersion')!r}")
        kind = head.get("kind")
        if kind not in (GPU_CONFIG, MIG_CONFIG):
            raise self.fail(f"unsupported kind {kind!r}; this driver accepts {GPU_CONFIG} and {MIG_CONFIG}")
        sharing_raw = head.get("sharing")
        if sharing_raw is None:
            # NVIDIA's Normalize() leaves no sharing section alone since PR #1183 (gpuconfig.go at ed0d0e5): the
            # GPU keeps its settings, no time slice is set.
            return SharingConfig(kind=kind, strategy=TIME_SLICING, sharing_given=False, where=self.where)
        allowed = ("strategy", "timeSlicingConfig", "mpsConfig") if kind == GPU_CONFIG else ("strategy", "mpsConfig")
        sharing = self.obj(sharing_raw, "sharing", allowed)
        strategy = sharing.get("strategy")
        if strategy not in (TIME_SLICING, MPS):
            raise self.fail(f"sharing.strategy {strategy!r} is not supported; use {TIME_SLICING} or {MPS}")
        if strategy == TIME_SLICING:
            if sharing.get("mpsConfig") is not None:
                raise self.fail(f"sharing.mpsConfig cannot be used with the {TIME_SLICING} strategy")
            if kind == MIG_CONFIG:
                return SharingConfig(kind=kind, strategy=strategy, where=self.where)
            ts = self.obj(sharing.get("timeSlicingConfig") or {}, "sharing.timeSlicingConfig", ("interval",))
            interval = ts.get("interval", "Default")
            if interval not in TIME_SLICES:
                shown = shorten(repr(interval), 60)
                raise self.fail(f"sharing.timeSlicingConfig.interval {shown} is not one of {', '.join(TIME_SLICES)}")
            return SharingConfig(kind=kind, strategy=strategy, interval=interval, where=self.where)
        if sharing.get("timeSlicingConfig") is not None:
            raise self.fail(f"sharing.timeSlicingConfig cannot be used with the {MPS} strategy")
        return SharingConfig(
            kind=kind,
            strategy=strategy,
            where=self.where,
            **self.mps(sharing.get("mpsConfig") or {}, "sharing.mpsConfig"),
        )


def opaque_configs(entries: Any, driver: str, claim_name: str) -> list[OpaqueConfig]:
    """This driver's configs in precedence order: class configs, then claim configs (later wins)."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ClaimError(f"claim {claim_name}: status.allocation.devices.config must be a list")
    by_source: dict[str, list[OpaqueConfig]] = {"FromClass": [], "FromClaim": []}
    for i, entry in enumerate(entries):
        where = f"claim {claim_name}: config[{i}]"
        if not isinstance(entry, Mapping):
            raise ClaimError(f"{where} must be an object")
        source = entry.get("source")
        if source not in by_source:
            raise ClaimError(f"{where}: invalid config source {source!r} (expected FromClass or FromClaim)")
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping):
            raise ClaimError(f"{where}: only opaque parameters are supported by driver {driver}")
        if opaque.get("driver") != driver:
            continue  # a request may be satisfiable by several drivers; their configs are not ours
        requests = entry.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise ClaimError(f"{where}: requests must be a list of request names")
        where = f"{where} ({source})"
        config = _Decoder(where).decode(opaque.get("parameters"))
        by_source[source].append(OpaqueConfig(tuple(requests), config, where))
    return by_source["FromClass"] + by_source["FromClaim"]


def names_request(requests: Sequence[str], request: str) -> bool:
    """``requests`` names ``request`` itself or, for a prioritized-list result ``main/sub``, ``main``."""
    return request in requests or request.split("/", 1)[0] in requests


def pick_config(configs: Sequence[OpaqueConfig], request: str, device: str, kind: DeviceKind) -> SharingConfig:
    """NVIDIA's lookup: walk configs from highest precedence down (the defaults last); a config naming the
    request must fit the device type (else error), an all-requests config of the wrong type is skipped."""
    for entry in reversed((*_DEFAULTS, *configs)):
        config, requests, where = entry.config, entry.requests, entry.where
        if requests and names_request(requests, request):
            if config.device_kind != kind:
                raise ClaimError(
                    f"{where}: cannot apply {config.kind} to device {device!r} of type {kind!r} (request {request})"
                )
            return config
        if not requests and config.device_kind == kind:
            return config
    raise AssertionError("the default configs match every device")  # pragma: no cover
