"""Nodes and runners shared by the fake nvidia-smi tests."""

from __future__ import annotations

from typing import Any

from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.gpu_condition import HEALTHY_CONDITION, GpuCondition, strike
from fakegpu.sharing.gpu_faults import parse_fault_text
from fakegpu.sharing.mig_parted import choose_generated
from fakegpu.sharing.node import Node, build_node
from fakegpu.sharing.node_spec import parse_gpus_shorthand, parse_node_spec
from fakegpu.telemetry.nvidia_smi.command import Result, run
from fakegpu.telemetry.nvidia_smi.devices import SmiNode, from_node

NODE = "node-a"
TS = "Wed Feb  4 10:17:25 2026"
QTS = "2026/02/04 10:17:25.123"


def node(gpus: str = "8xh100-80gb", layout: str | None = None) -> Node:
    spec = parse_gpus_shorthand([gpus])
    choices = None
    if layout:
        choices = choose_generated(layout, [CATALOG[g.model] for g in spec.gpus for _ in range(g.count)])
    return build_node(spec, NODE, source="test", mig_choices=choices)


def spec_node(*gpus: dict[str, Any], **spec: Any) -> Node:
    return build_node(parse_node_spec({"gpus": list(gpus), **spec}, "test"), NODE, source="test")


def smi_node(gpus: str = "8xh100-80gb", layout: str | None = None) -> SmiNode:
    return from_node(node(gpus, layout))


MIXED = (
    {
        "model": "h100-80gb",
        "migEnabled": True,
        "migDevices": [
            {"profile": "3g.40gb", "start": 0},
            {"profile": "2g.20gb", "start": 4},
            {"profile": "1g.10gb", "start": 6},
        ],
    },
    {"model": "h100-80gb"},
)
"""GPU 0: one 3g.40gb, one 2g.20gb and one 1g.10gb; GPU 1: a whole GPU."""


def mixed() -> SmiNode:
    return from_node(spec_node(*MIXED))


def smi(node: SmiNode, *argv: str, visible: str | None = None) -> Result:
    return run(list(argv), node, visible, TS, QTS)


def out(node: SmiNode, *argv: str, visible: str | None = None) -> str:
    result = smi(node, *argv, visible=visible)
    assert result.status == 0, result
    return result.stdout


def struck(node_: Node, *faults: tuple[int, str]) -> SmiNode:
    """``node_`` as nvidia-smi shows it after ``faults`` (GPU index, ``gpu-fault`` text), struck in order."""
    conditions: dict[str, GpuCondition] = {}
    for index, text in faults:
        gpu = node_.gpus[index]
        before = conditions.get(gpu.uuid, HEALTHY_CONDITION)
        conditions[gpu.uuid], _ = strike(before, parse_fault_text(text, "test"), gpu.model)
    return from_node(node_, conditions=conditions)
