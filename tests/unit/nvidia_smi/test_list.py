"""``nvidia-smi -L``: GPU lines and MIG lines as real nvidia-smi prints them."""

from __future__ import annotations

from tests.unit.nvidia_smi.helpers import mixed, out, smi_node


def test_whole_gpus():
    node = smi_node("2xa100-40gb")
    assert out(node, "-L") == (
        f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {node.gpus[0].uuid})\n"
        f"GPU 1: NVIDIA A100-SXM4-40GB (UUID: {node.gpus[1].uuid})\n"
    )


def test_all_1g_10gb_h100():
    node = smi_node("1xh100-80gb", "all-1g.10gb")
    lines = out(node, "--list-gpus").splitlines()
    assert lines[0] == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {node.gpus[0].uuid})"
    assert lines[1:] == [f"  MIG 1g.10gb     Device {n:>2}: (UUID: {m.uuid})" for n, m in enumerate(node.gpus[0].migs)]


def test_mixed_layout_and_a_whole_gpu():
    node = mixed()
    g0, g1 = node.gpus
    assert out(node, "-L") == (
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {g0.uuid})\n"
        f"  MIG 3g.40gb     Device  0: (UUID: {g0.migs[0].uuid})\n"
        f"  MIG 2g.20gb     Device  1: (UUID: {g0.migs[1].uuid})\n"
        f"  MIG 1g.10gb     Device  2: (UUID: {g0.migs[2].uuid})\n"
        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {g1.uuid})\n"
    )


def test_container_numbering_starts_at_zero():
    node = mixed()
    g0, g1 = node.gpus
    assert out(node, "-L", visible=f"{g1.uuid},{g0.migs[2].uuid}") == (
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {g0.uuid})\n"
        f"  MIG 1g.10gb     Device  0: (UUID: {g0.migs[2].uuid})\n"
        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {g1.uuid})\n"
    )


def test_t4_has_no_mig_lines():
    assert out(smi_node("1xt4"), "-L").count("\n") == 1
