"""Which faults on a virtual node's GPUs keep its IMEX daemon from READY, per kind.

The daemon entry's status is its pod's readiness, whose probe passes only when ``nvidia-imex-ctl -q``
answers READY (kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-daemon/main.go`` ``check`` at
commit 0807eed); the XIDs that count are those NVIDIA's DRA driver does not skip
(``cmd/gpu-kubelet-plugin/device_health.go`` at the same commit: 13, 31, 43, 45, 68, 109 skipped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.dra.compute_domain.imex_readiness import imex_not_ready_reason
from fakegpu.sharing.gpu_faults import GpuFault, parse_fault_text
from tests.inventory_builders import inventory


@pytest.fixture
def gpus(tmp_path: Path):
    return inventory(tmp_path, "4xgb200").node.gpus


def faults(*texts: str, gpu: int = 1) -> dict[int, tuple[GpuFault, ...]]:
    return {gpu: tuple(parse_fault_text(t, "test") for t in texts)}


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("fabric", "GPU 1: NVLink fabric registration failed (status=ERROR_UNKNOWN)"),
        ("fabric status=ERROR_TIMEOUT", "GPU 1: NVLink fabric registration failed (status=ERROR_TIMEOUT)"),
        ("off-bus", "GPU 1: off the bus"),
        ("gpu-lost", "GPU 1: lost"),
        ("nvlink link=3", "GPU 1: NVLink 3 down"),
        ("xid xid=79", "GPU 1: XID 79"),
        ("ecc-uncorrectable", "GPU 1: XID 94, 63"),
        ("ecc-correctable", "GPU 1: XID 92"),
    ],
)
def test_faults_that_break_the_imex_domain(gpus, fault, reason):
    assert imex_not_ready_reason(faults(fault), gpus) == reason


@pytest.mark.parametrize("fault", ["thermal", "power", "xid xid=13", "xid xid=43", "fabric after_calls=3"])
def test_faults_that_leave_the_daemon_ready(gpus, fault):
    """Slowdowns, the XIDs NVIDIA skips as application errors, and a fault still waiting for RPC calls that
    a virtual node never serves."""
    assert imex_not_ready_reason(faults(fault), gpus) is None


def test_every_broken_gpu_is_named_and_unknown_gpus_are_ignored(gpus):
    record = {**faults("thermal", gpu=0), **faults("off-bus", gpu=2), **faults("fabric", gpu=3), 9: faults("fabric")[1]}
    assert imex_not_ready_reason(record, gpus) == (
        "GPU 2: off the bus; GPU 3: NVLink fabric registration failed (status=ERROR_UNKNOWN)"
    )
    assert imex_not_ready_reason({}, gpus) is None
