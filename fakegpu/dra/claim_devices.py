"""What NodePrepareResources must do for one allocated ResourceClaim, computed without side effects.

The kubelet only sends a claim's identity; the driver reads the claim from the API server and works
out, from ``status.allocation``, which of *its* devices were allocated and with which opaque config.
Keeping that pure (claim dict in, ``ClaimPreparation`` out) makes prepare idempotent and testable: the
same claim always yields the same CDI devices and environment, so a retried or restarted prepare can
recompute instead of trusting half-written state.

Device names are NVIDIA's (``gpu.nvidia.com`` driver): full GPU ``gpu-<index>``; MIG
``gpu-<index>-mig-<profile without '.' and '+'>-<GI profile ID>-<start slot>``. Opaque configs follow
NVIDIA's ``resource.nvidia.com/v1beta1`` ``GpuConfig`` / ``MigDeviceConfig`` with NVIDIA's precedence
(class configs, then claim configs, later wins; empty ``requests`` matches every request) and strict
decoding (unknown fields, kinds and strategies are errors naming the field).

Environment each prepared device gets (one CDI device per allocation result):

* ``NVIDIA_VISIBLE_DEVICES=<uuid>,<uuid>`` — the UUIDs of the claim's devices allocated for the same
  request (a container references a claim or one of its requests; CDI env edits replace rather than
  merge, so the per-request list is what every device of that request carries). Dynamic MIG devices
  have no UUID until created; they get ``fakegpu.sharing.identifiers.mig_uuid(pool, gpu, profile, start)``,
  the same deterministic UUID static MIG devices have.
* MPS (``sharing.strategy: MPS``): ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<n>`` and
  ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<uuid>=<N>M,...`` (NVIDIA's per-device limit format, MiB rounded
  down, ``defaultPerDevicePinnedMemoryLimit`` keys are a UUID or an index into the config's devices).
* Time slicing on a full GPU: ``NVIDIA_TIME_SLICE_INTERVAL=Default|Short|Medium|Long`` — a fakegpu
  convention (the real driver calls ``nvidia-smi compute-policy``; nothing real sets this variable).

Only configs the claim or its class states produce sharing variables; the implicit defaults do not.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any, Final, Literal

from fakegpu.dra.cdi_specs import CLAIM_CLASS, cdi_vendor, check_claim_uid, claim_device_name, qualified_name
from fakegpu.dra.resource_slices import device_name_gpu, device_name_mig, whole_gpu_offered_with_dynamic_mig
from fakegpu.sharing.errors import shorten
from fakegpu.sharing.identifiers import mig_uuid
from fakegpu.sharing.node import Node

MigMode = Literal["static", "dynamic"]
DeviceKind = Literal["gpu", "mig"]

CONFIG_API_VERSION: Final = "resource.nvidia.com/v1beta1"
GPU_CONFIG: Final = "GpuConfig"
MIG_CONFIG: Final = "MigDeviceConfig"
TIME_SLICING: Final = "TimeSlicing"
MPS: Final = "MPS"
INTERVALS: Final = ("Default", "Short", "Medium", "Long")

VISIBLE_DEVICES_ENV: Final = "NVIDIA_VISIBLE_DEVICES"
MPS_THREAD_PERCENTAGE_ENV: Final = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_PINNED_MEMORY_ENV: Final = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
TIME_SLICE_ENV: Final = "NVIDIA_TIME_SLICE_INTERVAL"
"""fakegpu convention, see the module docstring."""

_MIB: Final = 1024 * 1024


class ClaimError(Exception):
    """The claim cannot be prepared on this node; the message is what the kubelet shows for the pod."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# --- published devices ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedDevice:
    """One device this node publishes in its ResourceSlices, with what prepare needs to know about it."""

    name: str
    kind: DeviceKind
    uuid: str | None
    """``GPU-...`` / ``MIG-...``; None for a dynamic MIG device, which does not exist until prepared."""
    parent_uuid: str
    parent_index: int
    profile: str | None
    start: int | None
    """First memory slice of a MIG device."""
    memory_mib: int

    def visible_uuid(self, node_name: str) -> str:
        """The UUID a workload sees; dynamic MIG devices get the one they would have if created."""
        if self.uuid is not None:
            return self.uuid
        assert self.profile is not None and self.start is not None  # only dynamic MIG has no UUID
        return mig_uuid(node_name, self.parent_index, self.profile, self.start)


@functools.lru_cache(maxsize=16)
def published_devices(node: Node, mig_mode: MigMode) -> dict[str, PublishedDevice]:
    """Every device name the DRA driver publishes for ``node``: GPU by GPU, sorted by name within a GPU.

    Cached per node and mode (prepare and the health stream ask often); callers must not modify it.

    static: MIG-enabled GPUs publish their MIG instances, the others their full GPU.
    dynamic: MIG-capable GPUs publish every profile at every allowed start slot plus the full GPU (see
    ``whole_gpu_offered_with_dynamic_mig``); other GPUs publish the full GPU. Names come from the slice
    builder's own rules, so prepare and publish can never disagree.
    """
    out: dict[str, PublishedDevice] = {}
    for gpu in node.gpus:
        full = PublishedDevice(
            name=device_name_gpu(gpu),
            kind="gpu",
            uuid=gpu.uuid,
            parent_uuid=gpu.uuid,
            parent_index=gpu.index,
            profile=None,
            start=None,
            memory_mib=gpu.model.memory_mib,
        )
        devices: list[PublishedDevice] = []
        if mig_mode == "static" or not gpu.model.mig_capable:
            if not gpu.mig_enabled:
                devices.append(full)
            devices.extend(
                PublishedDevice(
                    name=device_name_mig(gpu, mig.profile, mig.start),
                    kind="mig",
                    uuid=mig.uuid,
                    parent_uuid=gpu.uuid,
                    parent_index=gpu.index,
                    profile=mig.profile.name,
                    start=mig.start,
                    memory_mib=mig.profile.memory_mib,
                )
                for mig in (gpu.mig_devices if gpu.mig_enabled else ())
            )
        else:
            if whole_gpu_offered_with_dynamic_mig(gpu):
                devices.append(full)
            devices.extend(
                PublishedDevice(
                    name=device_name_mig(gpu, profile, start),
                    kind="mig",
                    uuid=None,
                    parent_uuid=gpu.uuid,
                    parent_index=gpu.index,
                    profile=profile.name,
                    start=start,
                    memory_mib=profile.memory_mib,
                )
                for profile in gpu.model.mig_profiles
                for start in profile.placements
            )
        out.update((d.name, d) for d in sorted(devices, key=lambda d: d.name))
    return out


# --- opaque configs ---------------------------------------------------------------------------------------


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

    @property
    def device_kind(self) -> DeviceKind:
        return "gpu" if self.kind == GPU_CONFIG else "mig"


_DEFAULTS: Final = (
    SharingConfig(kind=MIG_CONFIG, strategy=TIME_SLICING, explicit=False),
    SharingConfig(kind=GPU_CONFIG, strategy=TIME_SLICING, interval="Default", explicit=False),
)

_QUANTITY: Final = re.compile(
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


_MAX_QUANTITY = 2**63 - 1
_MAX_QUANTITY_DIGITS = 19


def quantity_bytes(value: Any) -> int:
    """A Kubernetes quantity (``10Gi``, ``512M``, ``1e9`` or a JSON number) as bytes, rounded up like
    ``Quantity.Value()``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{value!r} is not a quantity")
    text = str(value)
    shown = shorten(repr(text), 60)
    m = _QUANTITY.fullmatch(text)
    if not m:
        raise ValueError(f"{shown} is not a quantity (expected e.g. 10Gi, 512Mi, 1G)")
    try:
        number = Decimal(m.group(1))
        suffix = m.group(2) or ""
        # Kubernetes quantities fit in int64 once scaled; decide on the magnitude before any exact arithmetic,
        # so 1e999999 costs nothing instead of a million-digit integer.
        if suffix in _BINARY:
            scale = len(str(_BINARY[suffix])) - 1
        elif suffix in _DECIMAL:
            scale = _DECIMAL[suffix]
        else:
            scale = int(suffix[1:]) if suffix else 0
        if number and number.adjusted() + scale > _MAX_QUANTITY_DIGITS:
            raise ValueError(f"{shown} is larger than any Kubernetes quantity (at most 2^63-1)")
        if suffix in _BINARY:
            number *= _BINARY[suffix]
        elif suffix:
            number = number.scaleb(scale)
        result = int(number.to_integral_value(rounding=ROUND_CEILING))
    except (InvalidOperation, OverflowError) as exc:
        raise ValueError(f"{shown} is not a quantity") from exc
    if result > _MAX_QUANTITY:
        raise ValueError(f"{shown} is larger than any Kubernetes quantity (at most 2^63-1)")
    return result


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
            mib = quantity_bytes(value) // _MIB
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
            # NVIDIA's Normalize(): no sharing section means time slicing with the default interval.
            return SharingConfig(kind=kind, strategy=TIME_SLICING, interval="Default" if kind == GPU_CONFIG else None)
        allowed = ("strategy", "timeSlicingConfig", "mpsConfig") if kind == GPU_CONFIG else ("strategy", "mpsConfig")
        sharing = self.obj(sharing_raw, "sharing", allowed)
        strategy = sharing.get("strategy")
        if strategy not in (TIME_SLICING, MPS):
            raise self.fail(f"sharing.strategy {strategy!r} is not supported; use {TIME_SLICING} or {MPS}")
        if strategy == TIME_SLICING:
            if sharing.get("mpsConfig") is not None:
                raise self.fail(f"sharing.mpsConfig cannot be used with the {TIME_SLICING} strategy")
            if kind == MIG_CONFIG:
                return SharingConfig(kind=kind, strategy=strategy)
            ts = self.obj(sharing.get("timeSlicingConfig") or {}, "sharing.timeSlicingConfig", ("interval",))
            interval = ts.get("interval", "Default")
            if interval not in INTERVALS:
                shown = shorten(repr(interval), 60)
                raise self.fail(f"sharing.timeSlicingConfig.interval {shown} is not one of {', '.join(INTERVALS)}")
            return SharingConfig(kind=kind, strategy=strategy, interval=interval)
        if sharing.get("timeSlicingConfig") is not None:
            raise self.fail(f"sharing.timeSlicingConfig cannot be used with the {MPS} strategy")
        return SharingConfig(
            kind=kind, strategy=strategy, **self.mps(sharing.get("mpsConfig") or {}, "sharing.mpsConfig")
        )


@dataclass(frozen=True)
class _OpaqueConfig:
    requests: tuple[str, ...]
    config: SharingConfig
    where: str


def _opaque_configs(entries: Any, driver: str, claim_name: str) -> list[_OpaqueConfig]:
    """This driver's configs in precedence order: class configs, then claim configs (later wins)."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ClaimError(f"claim {claim_name}: status.allocation.devices.config must be a list")
    by_source: dict[str, list[_OpaqueConfig]] = {"FromClass": [], "FromClaim": []}
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
        by_source[source].append(_OpaqueConfig(tuple(requests), config, where))
    return by_source["FromClass"] + by_source["FromClaim"]


def _matches(requests: Sequence[str], request: str) -> bool:
    """``requests`` names ``request`` itself or, for a prioritized-list result ``main/sub``, ``main``."""
    return request in requests or request.split("/", 1)[0] in requests


# --- preparation ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedResult:
    """One allocation result of this driver, ready to become a CDI device and a kubelet ``Device``."""

    request: str
    pool: str
    device: str
    share_id: str | None
    uuid: str
    cdi_device_name: str
    cdi_ids: tuple[str, ...]
    env: tuple[str, ...]

    @property
    def request_name(self) -> str:
        """What goes into the kubelet's ``request_names``: the helper strips ``/<subrequest>``."""
        return self.request.split("/", 1)[0]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "pool": self.pool,
            "device": self.device,
            "uuid": self.uuid,
            "cdiDeviceName": self.cdi_device_name,
            "cdiDeviceIDs": list(self.cdi_ids),
            "env": list(self.env),
        }
        if self.share_id:
            out["shareID"] = self.share_id
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreparedResult:
        """Inverse of ``to_json``; unknown keys are ignored so newer checkpoints stay readable."""
        return cls(
            request=str(data["request"]),
            pool=str(data["pool"]),
            device=str(data["device"]),
            share_id=str(data["shareID"]) if data.get("shareID") else None,
            uuid=str(data["uuid"]),
            cdi_device_name=str(data["cdiDeviceName"]),
            cdi_ids=tuple(str(i) for i in data["cdiDeviceIDs"]),
            env=tuple(str(e) for e in data["env"]),
        )


@dataclass(frozen=True)
class ClaimPreparation:
    """Everything prepare produces for one claim: the CDI devices to write and the devices to return."""

    uid: str
    namespace: str
    name: str
    driver: str
    pool: str
    results: tuple[PreparedResult, ...] = field(default=())

    @property
    def cdi_vendor(self) -> str:
        return cdi_vendor(self.driver)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _claim_identity(claim: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = claim.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return _text(meta.get("namespace")), _text(meta.get("name")), _text(meta.get("uid"))


def _pick_config(configs: Sequence[SharingConfig | _OpaqueConfig], result: _Result) -> SharingConfig:
    """NVIDIA's lookup: walk configs from highest precedence down; a config naming the request must fit the
    device type (else error), an all-requests config of the wrong type is skipped."""
    for entry in reversed(configs):
        requests: tuple[str, ...]
        if isinstance(entry, SharingConfig):
            config, requests, where = entry, (), "default config"
        else:
            config, requests, where = entry.config, entry.requests, entry.where
        if requests and _matches(requests, result.request):
            if config.device_kind != result.published.kind:
                raise ClaimError(
                    f"{where}: cannot apply {config.kind} to device {result.device!r} of type "
                    f"{result.published.kind!r} (request {result.request})"
                )
            return config
        if not requests and config.device_kind == result.published.kind:
            return config
    raise AssertionError("the default configs match every device")  # pragma: no cover


@dataclass(frozen=True)
class _Result:
    index: int
    request: str
    pool: str
    device: str
    share_id: str | None
    published: PublishedDevice
    uuid: str


def _results(
    allocation: Mapping[str, Any], driver: str, pool: str, devices: Mapping[str, PublishedDevice], claim_name: str
) -> list[_Result]:
    raw_devices = allocation.get("devices")
    raw_devices = raw_devices if isinstance(raw_devices, Mapping) else {}
    raw_results = raw_devices.get("results") or []
    if not isinstance(raw_results, list):
        raise ClaimError(f"claim {claim_name}: status.allocation.devices.results must be a list")
    out: list[_Result] = []
    seen: dict[tuple[str, str | None], str] = {}
    for i, r in enumerate(raw_results):
        if not isinstance(r, Mapping):
            raise ClaimError(f"claim {claim_name}: results[{i}] must be an object")
        if r.get("driver") != driver:
            continue
        request, device, result_pool = _text(r.get("request")), _text(r.get("device")), _text(r.get("pool"))
        if not request or not device:
            raise ClaimError(f"claim {claim_name}: results[{i}] lacks a request or device name")
        if result_pool != pool:
            raise ClaimError(
                f"claim {claim_name}: device {device!r} (request {request}) was allocated from pool "
                f"{result_pool!r}, but this node's pool is {pool!r}"
            )
        published = devices.get(device)
        if published is None:
            raise ClaimError(
                f"claim {claim_name}: device {device!r} (request {request}) is not published by driver "
                f"{driver} on node {pool}"
            )
        share_id = _text(r.get("shareID")) or None
        key = (device, share_id)
        if key in seen:
            raise ClaimError(
                f"claim {claim_name}: device {device!r} is allocated twice (requests {seen[key]} and {request})"
            )
        seen[key] = request
        out.append(_Result(i, request, result_pool, device, share_id, published, published.visible_uuid(pool)))
    return out


def _mps_limits(config: SharingConfig, group: Sequence[_Result]) -> dict[str, int]:
    """NVIDIA's ``Normalize``: default limit for every device of the config, then per-device overrides
    keyed by UUID or by index into the config's devices."""
    uuids = [r.uuid for r in group]
    limits = {u: config.pinned_memory_limit_mib for u in uuids} if config.pinned_memory_limit_mib else {}
    for key, mib in config.per_device_pinned_mib:
        if key in uuids:
            limits[key] = mib
        elif key.isdigit() and int(key) < len(uuids):
            limits[uuids[int(key)]] = mib
        else:
            raise ClaimError(
                f"defaultPerDevicePinnedMemoryLimit key {key!r} names no device of this config "
                f"(use an index 0..{len(uuids) - 1} or one of {', '.join(uuids)})"
            )
    return limits


def claim_preparation(
    claim: Mapping[str, Any], driver: str, pool: str, devices: Mapping[str, PublishedDevice]
) -> ClaimPreparation:
    """Work out this driver's devices, CDI names and environment for an allocated claim.

    ``claim`` is the ResourceClaim as the API server returns it (resource.k8s.io v1, v1beta2 or v1beta1:
    the status shape is the same). Results of other drivers are skipped; results of this driver must
    be in ``pool`` and name a published device. The caller checks the UID against the kubelet's.
    """
    namespace, name, uid = _claim_identity(claim)
    claim_name = f"{namespace}/{name}"
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    if not isinstance(allocation, Mapping):
        raise ClaimError(f"claim {claim_name} is not allocated")
    try:
        check_claim_uid(uid)
    except ValueError as exc:
        raise ClaimError(f"claim {claim_name}: {exc}") from None
    results = _results(allocation, driver, pool, devices, claim_name)
    raw_devices = allocation.get("devices")
    opaque = _opaque_configs(
        raw_devices.get("config") if isinstance(raw_devices, Mapping) else None, driver, claim_name
    )
    configs: list[SharingConfig | _OpaqueConfig] = [*_DEFAULTS, *opaque]

    chosen: list[SharingConfig] = []
    groups: dict[int, list[_Result]] = {}
    for result in results:
        config = _pick_config(configs, result)
        chosen.append(config)
        groups.setdefault(id(config), []).append(result)
    limits: dict[int, dict[str, int]] = {}
    for config in chosen:
        if config.explicit and config.strategy == MPS and id(config) not in limits:
            try:
                limits[id(config)] = _mps_limits(config, groups[id(config)])
            except ClaimError as exc:
                raise ClaimError(f"claim {claim_name}: {exc}") from None

    by_request: dict[str, list[_Result]] = {}
    for result in results:
        by_request.setdefault(result.request.split("/", 1)[0], []).append(result)

    vendor = cdi_vendor(driver)
    prepared: list[PreparedResult] = []
    for result, config in zip(results, chosen, strict=True):
        siblings = by_request[result.request.split("/", 1)[0]]
        env = [f"{VISIBLE_DEVICES_ENV}={','.join(r.uuid for r in siblings)}"]
        if config.explicit and config.strategy == MPS:
            if config.active_thread_percentage is not None:
                env.append(f"{MPS_THREAD_PERCENTAGE_ENV}={config.active_thread_percentage}")
            config_limits = limits[id(config)]
            visible = [r.uuid for r in siblings if r.uuid in config_limits]
            if visible:
                env.append(f"{MPS_PINNED_MEMORY_ENV}={','.join(f'{u}={config_limits[u]}M' for u in visible)}")
        elif config.explicit and config.interval is not None and result.published.kind == "gpu":
            env.append(f"{TIME_SLICE_ENV}={config.interval}")
        try:
            cdi_name = claim_device_name(uid, result.device, result.share_id)
        except ValueError as exc:
            raise ClaimError(f"claim {claim_name}: {exc}") from None
        prepared.append(
            PreparedResult(
                request=result.request,
                pool=result.pool,
                device=result.device,
                share_id=result.share_id,
                uuid=result.uuid,
                cdi_device_name=cdi_name,
                cdi_ids=(qualified_name(vendor, CLAIM_CLASS, cdi_name),),
                env=tuple(env),
            )
        )
    return ClaimPreparation(uid=uid, namespace=namespace, name=name, driver=driver, pool=pool, results=tuple(prepared))
