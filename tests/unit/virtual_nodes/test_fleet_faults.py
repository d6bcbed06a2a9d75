"""Fleet faults without a server: what a fault on a virtual node changes (allocatable, taints, labels), which
GPUs a plan targets, its schedule, recovery, and the one-line errors of ``fakegpu virtual-nodes --fault``."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.cli.main import main as cli_main
from fakegpu.cli.virtual_nodes_command import pools_from_args
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates
from fakegpu.dra.health_taints import TAINT_KEY_GPU_LOST, TAINT_KEY_XID
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.fault_record import FAULTS_ANNOTATION
from fakegpu.sharing.gpu_faults import GpuFault, parse_fault_text
from fakegpu.sharing.labels import CLIQUE_LABEL
from fakegpu.virtual_nodes.fleet_faults import FaultTargets, gate_warning, plan_fleet_faults
from fakegpu.virtual_nodes.names import DEFAULT_PREFIX
from fakegpu.virtual_nodes.node_faults import fault_taints, with_faults
from fakegpu.virtual_nodes.node_manifest import NodeShape, desired_node
from fakegpu.virtual_nodes.pools import VirtualNode, build_virtual_nodes
from tests.unit.virtual_nodes.conftest import build_parser

H100 = ("--gpus", "8xh100-80gb")
RACKS = ("--gpus", "4xgb200", "--racks", "3", "--nodes-per-rack", "2", "--gpu-mode", "dra")


def fleet(*argv: str) -> list[VirtualNode]:
    args = build_parser().parse_args(["virtual-nodes", *argv])
    nodes, _ = build_virtual_nodes(pools_from_args(args, env={}), DEFAULT_PREFIX, None)
    return nodes


def fault(text: str) -> GpuFault:
    return parse_fault_text(text, "--fault")


# What a fault on GPU 1 of an 8x H100 node leaves: the device plugin's allocatable nvidia.com/gpu (capacity stays
# 8) and the taint NVIDIA's DRA driver puts on that GPU's device. The XIDs are the fault model's
# (fakegpu.sharing.gpu_faults); the classes NVIDIA's: 13 is an application XID both plugins skip (the DRA driver
# taints it with effect None), every other XID here is critical.
KIND_EFFECTS = {
    "xid,xid=79": (7, {"key": TAINT_KEY_XID, "value": "79", "effect": "NoSchedule"}),
    "xid,xid=13": (8, {"key": TAINT_KEY_XID, "value": "13", "effect": "None"}),
    "off-bus": (7, {"key": TAINT_KEY_XID, "value": "79", "effect": "NoSchedule"}),
    "gpu-lost": (0, {"key": TAINT_KEY_GPU_LOST, "effect": "NoSchedule"}),
    "ecc-uncorrectable": (7, {"key": TAINT_KEY_XID, "value": "94", "effect": "NoSchedule"}),
    "ecc-correctable": (7, {"key": TAINT_KEY_XID, "value": "92", "effect": "NoSchedule"}),
    "thermal": (8, None),
    "power": (8, None),
    "nvlink": (7, {"key": TAINT_KEY_XID, "value": "74", "effect": "NoSchedule"}),
    "fabric": (8, None),
}


@pytest.mark.parametrize("text", list(KIND_EFFECTS))
def test_each_kind_changes_allocatable_and_taints_as_nvidia_plugins_do(text):
    """Follows kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go GetCapacity @ 7510f32 (capacity
    counts every device, allocatable the healthy ones) and kubernetes-sigs/dra-driver-nvidia-gpu
    cmd/gpu-kubelet-plugin/device_health.go @ v0.4.1 (the taint per event, as fakegpu.dra.health_taints)."""
    node = fleet("--count", "1", *H100)[0]
    faulted = with_faults(node, {1: (fault(text),)})
    allocatable, taint = KIND_EFFECTS[text]
    desired = desired_node(faulted, NodeShape())
    assert desired.capacity["nvidia.com/gpu"] == "8"
    assert desired.allocatable["nvidia.com/gpu"] == str(allocatable)
    gpu = node.inventory.node.gpus[1]
    taints = fault_taints(faulted)
    if taint is None:
        assert taints == {}
    elif taint["key"] == TAINT_KEY_GPU_LOST:
        assert set(taints) == {u for g in node.inventory.node.gpus for u in g.uuids}
        assert all(ts == (taint,) for ts in taints.values())
    else:
        assert taints == {gpu.uuid: (taint,)}
    assert desired.faults is not None and text.split(",")[0] in desired.faults


def test_a_node_without_faults_has_no_record_and_keeps_everything():
    node = fleet("--count", "1", *H100)[0]
    same = with_faults(node, {})
    desired = desired_node(same, NodeShape())
    assert desired.faults is None
    assert desired == desired_node(node, NodeShape())


def test_replicas_of_a_time_sliced_gpu_leave_allocatable_with_it(tmp_path: Path):
    """Follows NVIDIA/k8s-device-plugin internal/rm/health.go @ v0.20.0: an XID marks every device of the GPU
    unhealthy, its time-slicing replicas included."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    node = fleet("--count", "1", *H100, "--config-file", str(config))[0]
    desired = desired_node(with_faults(node, {1: (fault("ecc-uncorrectable"),)}), NodeShape())
    assert desired.capacity["nvidia.com/gpu"] == "32"
    assert desired.allocatable["nvidia.com/gpu"] == "28"


def test_the_clique_label_goes_only_when_no_gpu_of_the_node_is_fabric_attached():
    """Follows NVIDIA/k8s-device-plugin internal/lm/imex.go @ v0.20.0 (GPUs not fabric-attached are skipped, no
    attached GPU: no label) and NVIDIA/go-nvlib pkg/nvlib/device/device.go IsFabricAttached @ 2442aa7 (a
    registration status other than SUCCESS is not attached)."""
    node = fleet(*RACKS)[0]
    assert CLIQUE_LABEL in node.gfd_labels
    one = with_faults(node, {0: (fault("fabric"),)})
    assert one.gfd_labels[CLIQUE_LABEL] == node.gfd_labels[CLIQUE_LABEL]
    every = with_faults(node, {i: (fault("fabric"),) for i in range(4)})
    assert CLIQUE_LABEL not in every.gfd_labels
    assert CLIQUE_LABEL not in desired_node(every, NodeShape()).labels
    assert with_faults(node, {}).gfd_labels == node.gfd_labels


def test_a_gpu_off_the_bus_changes_no_gfd_label():
    """Follows NVIDIA/k8s-device-plugin cmd/gpu-feature-discovery/main.go run @ b9fe486: labelling fails on the
    device handle and GFD exits without writing; its NodeFeature (the default output since v0.19) stays."""
    node = fleet(*RACKS)[0]
    for text in ("off-bus", "gpu-lost"):
        assert with_faults(node, {i: (fault(text),) for i in range(4)}).gfd_labels == node.gfd_labels


# -- plans --------------------------------------------------------------------------------------------------
def test_node_targets_take_every_gpu_unless_gpus_are_named():
    nodes = fleet("--count", "4", *H100)
    plan = plan_fleet_faults(nodes, FaultTargets(nodes=("fakegpu-virtual-0002",)), fault=fault("thermal"))
    assert [(h.node, h.gpus, h.at) for h in plan.hits] == [("fakegpu-virtual-0002", tuple(range(8)), 0.0)]
    plan = plan_fleet_faults(
        nodes, FaultTargets(nodes=("fakegpu-virtual-0003", "fakegpu-virtual-0001"), gpus=(5, 2)), fault=fault("power")
    )
    assert [(h.node, h.gpus) for h in plan.hits] == [("fakegpu-virtual-0003", (2, 5)), ("fakegpu-virtual-0001", (2, 5))]


def test_racks_and_cliques_target_their_nodes():
    nodes = fleet(*RACKS)
    by_rack = plan_fleet_faults(nodes, FaultTargets(racks=("1",)), fault=fault("fabric"))
    assert [h.node for h in by_rack.hits] == ["fakegpu-virtual-0002", "fakegpu-virtual-0003"]
    assert by_rack.hits == plan_fleet_faults(nodes, FaultTargets(racks=("rack-1",)), fault=fault("fabric")).hits
    clique = nodes[4].gfd_labels[CLIQUE_LABEL]
    by_clique = plan_fleet_faults(nodes, FaultTargets(cliques=(clique,)), recover="fabric")
    assert [h.node for h in by_clique.hits] == ["fakegpu-virtual-0004", "fakegpu-virtual-0005"]


def test_a_seeded_fraction_reproduces_and_another_seed_picks_other_gpus():
    nodes = fleet("--count", "125", *H100)
    picks = {
        seed: plan_fleet_faults(nodes, FaultTargets(fraction=0.05, seed=seed), fault=fault("xid,xid=79")).hits
        for seed in (7, 8)
    }
    assert picks[7] == plan_fleet_faults(nodes, FaultTargets(fraction=0.05, seed=7), fault=fault("xid,xid=79")).hits
    assert sum(len(h.gpus) for h in picks[7]) == 50, "5 % of 1000 GPUs"
    assert picks[7] != picks[8]
    assert len({h.node for h in picks[7]}) == len(picks[7]), "at once: one write per node"


def test_a_fraction_of_named_racks_stays_in_them():
    nodes = fleet(*RACKS)
    plan = plan_fleet_faults(nodes, FaultTargets(racks=("2",), fraction=0.5, seed=1), fault=fault("nvlink"))
    assert plan.gpu_count == 4
    assert {h.node for h in plan.hits} <= {"fakegpu-virtual-0004", "fakegpu-virtual-0005"}


def test_a_schedule_over_time_has_the_planned_count_evenly_spread():
    nodes = fleet("--count", "125", *H100)
    plan = plan_fleet_faults(nodes, FaultTargets(fraction=0.05, seed=3), fault=fault("gpu-lost"), over=600)
    assert len(plan.hits) == 50
    assert [h.at for h in plan.hits] == [i * 12.0 for i in range(50)]
    assert all(len(h.gpus) == 1 for h in plan.hits)
    once = plan_fleet_faults(nodes, FaultTargets(fraction=0.05, seed=3), fault=fault("gpu-lost"))
    assert sorted((h.node, g) for h in plan.hits for g in h.gpus) == sorted(
        (h.node, g) for h in once.hits for g in h.gpus
    ), "the same GPUs, one at a time"
    assert "50 GPU(s)" in plan.describe() and "one every 12 s" in plan.describe()


@pytest.mark.parametrize(
    ("recover", "left"),
    [
        ("thermal", {"power", "xid", "off-bus"}),
        ("fabric", {"thermal", "power", "xid", "off-bus"}),
        ("reset", {"thermal", "power", "off-bus"}),
        ("all", set()),
    ],
)
def test_recovery_removes_what_the_real_device_recovers_from(recover, left):
    """Follows fakegpu.sharing.gpu_faults.FAULT_KINDS: a reset ends XID, ECC and NVLink faults; off the bus
    only a reboot (``all``)."""
    nodes = fleet("--count", "1", *H100)
    plan = plan_fleet_faults(nodes, FaultTargets(nodes=(nodes[0].name,), gpus=(0,)), recover=recover)
    record = {0: tuple(fault(t) for t in ("thermal", "power", "xid,xid=48", "off-bus")), 1: (fault("thermal"),)}
    after = plan.change(plan.hits[0].gpus)(record)
    assert {f.kind for f in after.get(0, ())} == left
    assert after[1] == (fault("thermal"),), "GPUs not targeted keep their faults"


def test_a_fault_on_dra_nodes_without_the_health_gate_is_warned_about():
    nodes = fleet("--count", "2", *H100, "--gpu-mode", "dra")
    plan = plan_fleet_faults(nodes, FaultTargets(nodes=(nodes[0].name,)), fault=fault("xid,xid=79"))
    warning = gate_warning(plan, nodes, FeatureGates())
    assert warning is not None and "NVMLDeviceHealthCheck" in warning
    assert gate_warning(plan, nodes, parse_feature_gates("NVMLDeviceHealthCheck=true")) is None
    thermal = plan_fleet_faults(nodes, FaultTargets(nodes=(nodes[0].name,)), fault=fault("thermal"))
    assert gate_warning(thermal, nodes, FeatureGates()) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--fault", "meltdown", "--fault-nodes", "fakegpu-virtual-0000"), "--fault: unknown fault kind 'meltdown'"),
        (("--fault", "thermal,watts=3", "--fault-nodes", "fakegpu-virtual-0000"), "watts does not apply"),
        (
            ("--fault", "xid,xid=79", "--fault-nodes", "fakegpu-virtual-0000", "--fault-gpus", "8"),
            "--fault-gpus: GPU 8 is out of range",
        ),
        (("--fault", "xid,xid=79", "--fault-fraction", "0"), "--fault-fraction: must be above 0 and at most 1"),
        (("--fault", "xid,xid=79", "--fault-fraction", "1.5"), "--fault-fraction: must be above 0 and at most 1"),
        (("--fault", "xid,xid=79", "--fault-fraction", "0.1", "--fault-over", "0s"), "--fault-over: must be above 0"),
        (
            ("--fault", "xid,xid=79", "--fault-fraction", "0.1", "--fault-over", "8d"),
            "--fault-over: expected a duration",
        ),
        (("--fault", "xid,xid=79", "--fault-fraction", "0.1", "--fault-over", "200h"), "at most 604800 seconds"),
        (("--fault", "xid,xid=79", "--fault-fraction", "0.1", "--fault-over", "-5s"), "must be above 0"),
        (("--fault", "xid,xid=79", "--fault-fraction", "0.1", "--fault-over=-5s"), "must be above 0"),
        (("--fault", "ecc-uncorrectable,uncontained=yes", "--fault-fraction", "0.1"), "uncontained: expected true"),
        (
            ("--fault", "xid,xid=79", "--fault-fraction", "0.1", "--fault-over", "1m", "--time-scale", "0"),
            "--time-scale: must be from 1",
        ),
        (("--fault", "xid,xid=79", "--fault-nodes", "nobody"), "--fault-nodes: no virtual node 'nobody'"),
        (("--fault", "xid,xid=79", "--fault-racks", "1"), "--fault-racks: the fleet has no racks"),
        (("--fault", "xid,xid=79"), "no target"),
        (("--fault", "xid,xid=79,after_calls=3", "--fault-fraction", "0.1"), "after_calls counts a daemon's RPC"),
        (("--fault-nodes", "fakegpu-virtual-0000"), "--fault-nodes: only applies with --fault or --recover"),
        (("--recover", "all", "--fault-nodes", "fakegpu-virtual-0000", "--watch"), "cannot be combined with --watch"),
    ],
)
def test_bad_fault_flags_are_one_line_and_exit_2(capsys, extra, message):
    code = cli_main(["virtual-nodes", "--count", "2", *H100, *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("fakegpu: error: ") and message in err, err


def test_a_rack_that_is_not_in_the_fleet_is_named():
    with pytest.raises(SpecError, match=r"--fault-racks: no rack 'rack-9' in this fleet \(3 of them"):
        plan_fleet_faults(fleet(*RACKS), FaultTargets(racks=("9",)), fault=fault("fabric"))


def test_the_record_annotation_is_the_shared_one():
    """The virtual IMEX daemons and the scenario steps read the same annotation."""
    node = with_faults(fleet("--count", "1", *H100)[0], {2: (fault("fabric"),)})
    assert FAULTS_ANNOTATION == "fakegpu.io/gpu-faults"
    assert desired_node(node, NodeShape()).faults == '{"2":["fabric"]}'


@pytest.mark.parametrize("text", ["ecc-uncorrectable,uncontained=true", "ecc-uncorrectable uncontained=true"])
def test_uncontained_is_a_key_as_ctl_has_the_flag_and_round_trips(text):
    """ctl's --uncontained in --fault's KIND,key=value form: the uncontained ECC error, XID 95 (NVIDIA's XID
    catalogue, as fakegpu.sharing.gpu_faults.FAULT_KINDS records it); describe() reads back the same fault."""
    parsed = parse_fault_text(text, "--fault")
    assert parsed.contained is False
    assert parse_fault_text(parsed.describe(), "--fault") == parsed
    assert parse_fault_text("ecc-uncorrectable,uncontained=false", "--fault").contained is True
