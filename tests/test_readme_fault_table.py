"""README.md's GPU fault table against the code: one row per kind of ``FAULT_KINDS`` in its order, the XIDs and
the recovery as the model states them, and the device plugin and DRA cells worked out here by striking a GPU
of a live inventory, as the daemons do. The nvidia-smi, DCGM, node event and ComputeDomain cells are text."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.dra.health_taints import device_health, published_taints, taint_text
from fakegpu.sharing.gpu_faults import FAULT_KINDS, KINDS, GpuFault
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.live_inventory import LiveInventory
from tests.inventory_builders import inventory

README = Path(__file__).resolve().parents[1] / "README.md"
HEADER = (
    "| kind | XIDs | device plugin (ListAndWatch) | DRA taint / health stream | nvidia-smi | DCGM | node events "
    "| ComputeDomain | recovery |"
)
TIME_SLICED = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}


def table_rows() -> list[list[str]]:
    lines = README.read_text().splitlines()
    start = lines.index(HEADER)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def _struck(tmp_path: Path, kind: str, policy: XidPolicy, xid: int | None = None) -> tuple[LiveInventory, list[str]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    live = LiveInventory(inventory(tmp_path, "2xh100-80gb", config=TIME_SLICED), policy)
    fault = GpuFault(kind=kind, xid=xid)  # type: ignore[arg-type]
    return live, live.strike_gpu(live.inventory.node.gpus[1].uuid, fault)


def device_plugin_cell(tmp_path: Path, kind: str, xid: int | None = None) -> str:
    """What ListAndWatch shows after the kind strikes GPU 1 of a time-sliced node, in the table's words."""
    live, changed = _struck(tmp_path, kind, XidPolicy(), xid)
    every = {d.id for r in live.inventory.resources for d in r.devices}
    of_gpu = {d.id for r in live.inventory.resources for d in r.devices if d.parent_index == 1}
    if not changed:
        return "stays Healthy"
    if set(changed) == every:
        return "every device of the node Unhealthy"
    assert set(changed) == of_gpu, changed
    return "the GPU's devices (every replica, MIG device: NVIDIA's fix of #1929) Unhealthy"


def dra_cell(tmp_path: Path, kind: str, xid: int | None = None) -> str:
    """The taints the DRA driver publishes and the health it streams after the kind strikes GPU 1."""
    live, _ = _struck(tmp_path, kind, XidPolicy.for_dra_driver({}), xid)
    gpu0, gpu1 = (g.uuid for g in live.inventory.node.gpus)
    taints = published_taints(live)
    health, message = device_health(live.health_events().get(gpu1, ()), live.xid_policy)
    shown = ", ".join(f"`{taint_text(t)}`" for t in taints.get(gpu1, ())) or "no taint"
    where = " on every device" if taints.get(gpu0) else ""
    return f"{shown}{where}; {health}" + (f" ({message})" if message else "")


def expected_faces(tmp_path: Path, kind: str) -> tuple[str, str]:
    if kind != "xid":
        return device_plugin_cell(tmp_path / "dp", kind), dra_cell(tmp_path / "dra", kind)
    fatal_dp, app_dp = device_plugin_cell(tmp_path / "f", kind, 79), device_plugin_cell(tmp_path / "a", kind, 13)
    fatal_dra, app_dra = dra_cell(tmp_path / "g", kind, 79), dra_cell(tmp_path / "b", kind, 13)
    return (
        f"fatal: {fatal_dp}; application or ignored by config: {app_dp}",
        f"fatal: {fatal_dra}; application or ignored by config: {app_dra}".replace("79", "<XID>").replace(
            "13", "<XID>"
        ),
    )


def test_the_table_has_one_row_per_kind_in_the_models_order() -> None:
    assert [row[0] for row in table_rows()] == [f"`{k}`" for k in KINDS]
    assert all(len(row) == len(HEADER.strip("|").split(" | ")) for row in table_rows())


@pytest.mark.parametrize("kind", KINDS)
def test_each_row_says_what_the_code_does(tmp_path: Path, kind: str) -> None:
    """The device plugin cell follows NVIDIA/k8s-device-plugin ``internal/rm/health.go`` @ 02597b9 with the fix
    of #1929 (PR #1930, after v0.20.1: every device of the GPU, not one per ``parentToDeviceMap``), the DRA cell
    kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/device_health.go`` @ 15a116f, as the
    daemons implement them; a change to either (or to a kind's XIDs) makes the README's row untrue here."""
    row = dict(zip(HEADER.strip("| ").split(" | "), next(r for r in table_rows() if r[0] == f"`{kind}`"), strict=True))
    facts = FAULT_KINDS[kind]
    dp, dra = expected_faces(tmp_path, kind)
    assert row["XIDs"] == facts.xids
    assert row["device plugin (ListAndWatch)"] == dp
    assert row["DRA taint / health stream"] == dra
    assert row["recovery"] == f"{facts.recovery}: {facts.recovery_text}"
    assert all(row[c] for c in ("nvidia-smi", "DCGM", "node events", "ComputeDomain"))


@pytest.mark.parametrize("kind", ["off-bus", "gpu-lost"])
def test_the_nvidia_smi_cell_of_an_unreachable_gpu_says_the_error_line_is_the_whole_output(kind: str) -> None:
    """fakegpu's nvidia-smi prints only the error line when a GPU is unreachable, the other GPUs not reported
    (tests/unit/nvidia_smi/test_faults.py, after real multi-GPU hosts); the README must not say the line
    stands in place of one GPU's report."""
    row = dict(zip(HEADER.strip("| ").split(" | "), next(r for r in table_rows() if r[0] == f"`{kind}`"), strict=True))
    cell = row["nvidia-smi"]
    assert "in place of the GPU" not in cell
    assert "only NVIDIA's error line" in cell or "the whole output" in cell
