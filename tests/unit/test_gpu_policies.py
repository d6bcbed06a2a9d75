"""The fake GPUs' compute mode and time slice (``fakegpu.sharing.gpu_policies``)."""

from __future__ import annotations

import pytest

from fakegpu.sharing.gpu_policies import GpuPolicies


def test_settings_start_at_default_and_announce_only_changes():
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/sharing.go at commit 14fd2e6: the plugin sets a
    GPU's compute mode only where a config asks (MpsControlDaemon.Start: EXCLUSIVE_PROCESS; Stop and
    SetTimeSlice: DEFAULT), so a GPU never named is in its power-on DEFAULT mode and Default time slice."""
    policies = GpuPolicies()
    seen: list[str] = []
    unsubscribe = policies.subscribe(lambda: seen.append("changed"))
    assert (policies.compute_mode("GPU-a"), policies.time_slice("GPU-a")) == ("Default", "Default")
    policies.set_compute_mode(["GPU-a"], "Exclusive_Process")
    policies.set_compute_mode(["GPU-a"], "Exclusive_Process")
    assert policies.compute_mode("GPU-a") == "Exclusive_Process" and seen == ["changed"]
    unsubscribe()
    policies.reset()
    assert policies.compute_mode("GPU-a") == "Default" and seen == ["changed"]


def test_a_time_slice_puts_the_gpu_back_in_default_compute_mode_first():
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/sharing.go at commit 14fd2e6
    (TimeSlicingManager.SetTimeSlice: compute mode DEFAULT first, then the interval)."""
    policies = GpuPolicies()
    policies.set_compute_mode(["GPU-a"], "Exclusive_Process")
    policies.set_time_slice(["GPU-a"], "Long")
    assert (policies.compute_mode("GPU-a"), policies.time_slice("GPU-a")) == ("Default", "Long")


def test_unknown_values_are_refused():
    """Only what the plugin can set: the compute modes of kubernetes-sigs/dra-driver-nvidia-gpu
    cmd/gpu-kubelet-plugin/sharing.go at commit 14fd2e6 (DEFAULT, EXCLUSIVE_PROCESS; nvidia-smi's Prohibited
    beside them) and the four named TimeSliceInterval values of its GpuConfig (Default, Short, Medium, Long)."""
    with pytest.raises(ValueError, match="compute mode 'Shared'"):
        GpuPolicies().set_compute_mode(["GPU-a"], "Shared")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="time-slice interval 'Longest'"):
        GpuPolicies().set_time_slice(["GPU-a"], "Longest")
