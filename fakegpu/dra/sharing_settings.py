"""What preparing and unpreparing a claim does to its full GPUs' compute mode and time slice.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin``:

* prepare (``device_state.go`` ``applySharingConfig``): a config whose ``sharing.strategy`` is TimeSlicing
  sets compute mode ``Default`` and the interval on the group's full GPUs (``TimeSlicingManager.SetTimeSlice``,
  recorded as ``TimeSliceApplied``); an MPS config starts the control daemon, which first puts the full
  GPUs in ``Exclusive_Process`` (``sharing.go`` ``MpsControlDaemon.Start``). A config without a sharing
  section, and the defaults, change nothing (PR #1183: no implicit TimeSlicing).
* unprepare (``unprepareDevices``): the MPS daemon's ``Stop`` sets its full GPUs back to ``Default``
  (PR #1262), then a group whose time slice was applied gets ``Default`` again, except on a GPU another
  prepared claim still holds (NVIDIA checks that with consumable shares, where GPUs are shared by claims).

MIG devices have no settings of their own here (NVIDIA passes only ``GpuUUIDs()``). The fake GPU's state
lives in ``fakegpu.sharing.gpu_policies``; at start the driver re-applies what its checkpoint's claims set,
since a real GPU keeps its settings across a restart of the plugin (and loses them with a reboot, which
empties the checkpoint: ``fakegpu.dra.boot_reset``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fakegpu.dra.prepare_plan import PreparedResult
from fakegpu.sharing.gpu_policies import DEFAULT_MODE, DEFAULT_TIME_SLICE, EXCLUSIVE_PROCESS, GpuPolicies


def _mps_gpus(results: Iterable[PreparedResult]) -> list[str]:
    return sorted({r.full_gpu_uuid for r in results if r.mps_daemon_id and r.full_gpu_uuid})


def apply_prepared(policies: GpuPolicies, results: Sequence[PreparedResult]) -> None:
    """Set what a prepared claim's configs ask for (at prepare, and again at start for prepared claims)."""
    by_interval: dict[str, set[str]] = {}
    for r in results:
        if r.time_slice and r.full_gpu_uuid:
            by_interval.setdefault(r.time_slice, set()).add(r.full_gpu_uuid)
    for interval, uuids in sorted(by_interval.items()):
        policies.set_time_slice(sorted(uuids), interval)
    policies.set_compute_mode(_mps_gpus(results), EXCLUSIVE_PROCESS)


def reset_unprepared(
    policies: GpuPolicies, results: Sequence[PreparedResult], still_held: Iterable[PreparedResult] = ()
) -> None:
    """Undo ``apply_prepared`` for a claim being unprepared; ``still_held`` are the devices of the other
    prepared claims, whose GPUs keep their time slice."""
    policies.set_compute_mode(_mps_gpus(results), DEFAULT_MODE)
    held = {r.full_gpu_uuid for r in still_held}
    applied = {r.full_gpu_uuid for r in results if r.time_slice and r.full_gpu_uuid}
    policies.set_time_slice(sorted(u for u in applied - held if u is not None), DEFAULT_TIME_SLICE)
