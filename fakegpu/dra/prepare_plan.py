"""What NodePrepareResources must do for one allocated ResourceClaim, computed without side effects.

The kubelet only sends a claim's identity; the driver reads the claim from the API server and works
out, from ``status.allocation``, which of *its* devices were allocated and with which opaque config.
Keeping that pure (claim dict in, ``PreparePlan`` out) makes prepare idempotent and testable: the
same claim always yields the same CDI devices and environment, so a retried or restarted prepare can
recompute instead of trusting half-written state.

Device names are NVIDIA's (``fakegpu.dra.device_map``); opaque configs are NVIDIA's ``GpuConfig`` /
``MigDeviceConfig`` (``fakegpu.dra.opaque_config``).

Environment each prepared device gets (one CDI device per allocation result; the claim's spec adds
NVIDIA's common ``NVIDIA_VISIBLE_DEVICES=void``, ``fakegpu.dra.claim_cdi_specs``):

* ``FAKEGPU_VISIBLE_DEVICES=<uuid>,<uuid>`` — what stands in for NVIDIA's per-device edits (the device
  nodes a fake GPU does not have): the UUIDs of the claim's devices allocated for the same request (a
  container references a claim or one of its requests; CDI env edits replace rather than merge, so the
  per-request list is what every device of that request carries). The fake nvidia-smi shows exactly
  these. Dynamic MIG devices have no UUID until created; they get
  ``fakegpu.sharing.identifiers.mig_uuid(pool, gpu, profile, start)``, the same deterministic UUID static
  MIG devices have.
* MPS (``sharing.strategy: MPS``): NVIDIA's ``CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps`` (the spec adds the
  pipe and shm mounts of the group's control daemon, ``fakegpu.dra.mps_control_files``), then
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<n>`` and
  ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<uuid>=<N>M,...`` (NVIDIA's per-device limit format, MiB rounded
  down, ``defaultPerDevicePinnedMemoryLimit`` keys are a UUID or an index into the config's devices).
  NVIDIA hands these to its MPS control daemon as the defaults every client gets
  (``cmd/gpu-kubelet-plugin/sharing.go``); fakegpu has no daemon and gives them to the client.
* Time slicing on a full GPU: ``NVIDIA_TIME_SLICE_INTERVAL=Default|Short|Medium|Long`` — a fakegpu
  convention (the real driver calls ``nvidia-smi compute-policy``; nothing real sets this variable).

Only configs the claim or its class states produce sharing variables; the implicit defaults do not, and a
config without a ``sharing`` section sets no time slice either (NVIDIA stopped injecting an implicit
TimeSlicing in kubernetes-sigs/dra-driver-nvidia-gpu PR #1183, ``api/nvidia.com/resource/v1beta1/gpuconfig.go``
at ed0d0e5).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fakegpu.dra.claim_cdi_specs import CLAIM_CLASS, cdi_vendor, check_claim_uid, claim_device_name
from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.device_map import PublishedDevice
from fakegpu.dra.feature_gates import DYNAMIC_MIG, MPS_SUPPORT, TIME_SLICING_SETTINGS, FeatureGates
from fakegpu.dra.mps_control_files import control_daemon_id, pipe_directory_env
from fakegpu.dra.mps_multi_user import multi_user_error
from fakegpu.dra.opaque_config import MPS, TIME_SLICING, SharingConfig, opaque_configs, pick_config
from fakegpu.runtime.cdi_spec_model import qualified_name
from fakegpu.sharing.node import Node
from fakegpu.telemetry.nvidia_smi.injection import VISIBLE_DEVICES_ENV

MPS_THREAD_PERCENTAGE_ENV: Final = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_PINNED_MEMORY_ENV: Final = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
TIME_SLICE_ENV: Final = "NVIDIA_TIME_SLICE_INTERVAL"
"""fakegpu convention, see the module docstring."""


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
    mps_daemon_id: str | None = None
    """The MPS control daemon of the device's config group (NVIDIA's ``GetMpsControlDaemonID``), whose
    directories the CDI spec mounts; None without an MPS config."""
    admin_access: bool = False
    """The result's ``adminAccess``: such a device may also be prepared for other claims."""
    consumed_capacity: tuple[tuple[str, str], ...] = ()
    """The result's ``consumedCapacity`` (consumable shares): what the scheduler booked for this claim."""
    config_key: str = ""
    """The device's opaque config, normalized, as canonical JSON: claims sharing a device must agree on it."""
    time_slice: str | None = None
    """The interval prepare sets on this full GPU (NVIDIA's ``TimeSliceApplied``): only with a config whose
    ``sharing.strategy`` is TimeSlicing, never implicitly; unprepare sets it back to ``Default``."""

    @property
    def full_gpu_uuid(self) -> str | None:
        """The UUID when this is a full GPU, whose compute mode and time slice a sharing strategy changes
        (NVIDIA's ``GpuUUIDs``: MIG devices have none of their own)."""
        return self.uuid if self.uuid.startswith("GPU-") else None

    @property
    def request_name(self) -> str:
        """What goes into the kubelet's ``request_names``: the helper strips ``/<subrequest>``."""
        return self.request.split("/", 1)[0]


@dataclass(frozen=True)
class PreparePlan:
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


@dataclass(frozen=True)
class _Result:
    index: int
    request: str
    pool: str
    device: str
    share_id: str | None
    published: PublishedDevice
    uuid: str
    admin_access: bool = False
    consumed_capacity: tuple[tuple[str, str], ...] = ()


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
        consumed = _consumed_capacity(r.get("consumedCapacity"), f"claim {claim_name}: results[{i}]")
        uuid = published.visible_uuid(pool)
        out.append(
            _Result(i, request, result_pool, device, share_id, published, uuid, r.get("adminAccess") is True, consumed)
        )
    return out


def _consumed_capacity(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    """A result's ``consumedCapacity``: capacity name -> quantity, as the scheduler wrote it."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, (str, int)) for k, v in raw.items()
    ):
        raise ClaimError(f"{where}: consumedCapacity must map capacity names to quantities")
    return tuple((name, str(raw[name])) for name in sorted(raw))


def config_key(config: SharingConfig) -> str:
    """NVIDIA compares the normalized configs of two claims on one device (``reflect.DeepEqual``): what the
    config says, not where it came from."""
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("explicit", "sharing_given", "where")}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


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


def _mps_env(config: SharingConfig, siblings: Sequence[_Result], limits: Mapping[str, int]) -> list[str]:
    """An MPS client's variables: the pipe directory, then the config's thread percentage and the pinned
    memory limits of the request's devices that have one."""
    env = [pipe_directory_env()]
    if config.active_thread_percentage is not None:
        env.append(f"{MPS_THREAD_PERCENTAGE_ENV}={config.active_thread_percentage}")
    visible = [r.uuid for r in siblings if r.uuid in limits]
    if visible:
        env.append(f"{MPS_PINNED_MEMORY_ENV}={','.join(f'{u}={limits[u]}M' for u in visible)}")
    return env


_GATE_OF_STRATEGY: Final = {TIME_SLICING: TIME_SLICING_SETTINGS, MPS: MPS_SUPPORT}


class SharingRefused(ClaimError):
    """A sharing strategy refused when NVIDIA applies the config (``applySharingConfig``): after the overlap
    check, which the caller runs first (see :func:`prepare_plan`'s ``refuse_mps``)."""


def check_sharing_gates(
    config: SharingConfig, gates: FeatureGates, *, shares: bool = False, refuse_mps: bool = True
) -> None:
    """NVIDIA's ``validateSharingStrategy`` and ``applySharingConfig`` (``sharing.go``, ``device_state.go``):
    a config that states a sharing strategy needs that strategy's feature gate, and MPS is refused with
    consumable shares (``shares``) and with DynamicMIG. Only configs applied to a device are checked, and only
    a stated ``sharing`` section."""
    if not config.sharing_given:
        return
    gate = _GATE_OF_STRATEGY[config.strategy]
    if not gates.enabled(gate):
        raise ClaimError(
            f'{config.where}: error validating GPU config: "{config.strategy}" is selected as the GPU sharing '
            f'strategy, but the "{gate}" feature gate is not enabled'
        )
    if not refuse_mps:
        return
    if config.strategy == MPS and shares:
        raise SharingRefused(
            f"{config.where}: error applying config: MPS sharing is not supported when consumable shares is enabled"
        )
    if config.strategy == MPS and gates.enabled(DYNAMIC_MIG):
        raise SharingRefused(
            f"{config.where}: error applying config: MPS is not yet supported when using featureGates.DynamicMIG=true"
        )


def _check_multi_user(config: SharingConfig, group: Sequence[_Result], node: Node) -> None:
    """``multiUser: true`` needs Volta or newer on every full GPU of the group (``fakegpu.dra.mps_multi_user``)."""
    capabilities = (
        (r.uuid, node.gpus[r.published.parent_index].model.compute_capability)
        for r in group
        if r.published.kind == "gpu"
    )
    error = multi_user_error(capabilities)
    if error:
        raise ClaimError(f"{config.where}: error applying config: {error}")


def prepare_plan(
    claim: Mapping[str, Any],
    driver: str,
    pool: str,
    devices: Mapping[str, PublishedDevice],
    gates: FeatureGates | None = None,
    node: Node | None = None,
    *,
    shares: bool = False,
    refuse_mps: bool = True,
) -> PreparePlan:
    """Work out this driver's devices, CDI names and environment for an allocated claim.

    ``claim`` is the ResourceClaim as the API server returns it (resource.k8s.io v1, v1beta2 or v1beta1:
    the status shape is the same). Results of other drivers are skipped; results of this driver must
    be in ``pool`` and name a published device. The caller checks the UID against the kubelet's.
    ``gates`` are the driver's feature gates (NVIDIA's defaults when None): a config's sharing strategy
    must be enabled by its gate (``check_sharing_gates``). ``node`` (the inventory's) gives the GPUs' compute
    capabilities, which multi-user MPS checks. ``shares``: the driver runs with consumable shares.
    ``refuse_mps=False`` builds the plan of an MPS config that :class:`SharingRefused` would refuse, so the
    caller can check overlaps first as NVIDIA's ``Prepare`` does (``device_state.go``).
    """
    gates = gates or FeatureGates()
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
    configs = opaque_configs(
        raw_devices.get("config") if isinstance(raw_devices, Mapping) else None, driver, claim_name
    )

    chosen: list[SharingConfig] = []
    groups: dict[int, list[_Result]] = {}
    for result in results:
        config = pick_config(configs, result.request, result.device, result.published.kind)
        check_sharing_gates(config, gates, shares=shares, refuse_mps=refuse_mps)
        chosen.append(config)
        groups.setdefault(id(config), []).append(result)
    limits: dict[int, dict[str, int]] = {}
    for config in chosen:
        if config.explicit and config.strategy == MPS and id(config) not in limits:
            if config.multi_user and node is not None:
                _check_multi_user(config, groups[id(config)], node)
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
        mps_daemon_id = time_slice = None
        if config.explicit and config.strategy == MPS:
            mps_daemon_id = control_daemon_id(uid, [r.uuid for r in groups[id(config)]])
            env += _mps_env(config, siblings, limits[id(config)])
        elif config.sharing_given and config.interval is not None and result.published.kind == "gpu":
            time_slice = config.interval
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
                mps_daemon_id=mps_daemon_id,
                time_slice=time_slice,
                admin_access=result.admin_access,
                consumed_capacity=result.consumed_capacity,
                config_key=config_key(config),
            )
        )
    return PreparePlan(uid=uid, namespace=namespace, name=name, driver=driver, pool=pool, results=tuple(prepared))
