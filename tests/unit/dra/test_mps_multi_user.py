"""Multi-user MPS needs Volta (``fakegpu.dra.mps_multi_user``).

Follows kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/sharing.go and mps_capability.go at
421c0f4 (PR #1153): ``ensureCapability`` joins one error per GPU below 7.0 with ``errors.Join``, the
later GPU (in UUID order) first."""

from __future__ import annotations

from fakegpu.dra.mps_multi_user import multi_user_error


def test_volta_and_newer_pass():
    assert multi_user_error([("GPU-b", (7, 0)), ("GPU-a", (10, 0))]) is None
    assert multi_user_error([]) is None


def test_older_gpus_are_named_with_nvidias_text():
    error = multi_user_error([("GPU-b", (6, 1)), ("GPU-c", (7, 5)), ("GPU-a", (6, 0))])
    assert error == (
        "error starting MPS control daemon: multiuser mode was requested but is not supported: "
        'GPU-b has insufficient cudaComputeCapability "6.1", wanted >= "7.0"\n'
        'GPU-a has insufficient cudaComputeCapability "6.0", wanted >= "7.0"'
    )
