"""``nvidia-smi topo -m``: the node's NVLinks and NUMA nodes, as the real tool lays them out.

Layout from readings of the real tool (NVIDIA's source for it is closed): the tab layout with NICs on 8x
RTX 4090 (NVIDIA/go-gpuallocator#17) and ``topo -m -i 0`` (cfregly/ai-performance-engineering#8); the
legend is the one the tool prints. ``H100_READING`` is an 8x H100 80GB HBM3 matrix in that layout with
fakegpu's own values for such a board: every pair ``NV18`` (18 NVLinks per H100 SXM5, NVIDIA's H100 Tensor
Core GPU datasheet), one NUMA node, CPUs 0-63 (which fakegpu leaves empty, as the tool does for GPUs whose
NUMA-local CPUs the caller may not use).
"""

from __future__ import annotations

from typing import Any

from fakegpu.sharing.node import build_node
from fakegpu.sharing.node_spec import parse_node_spec
from fakegpu.telemetry.nvidia_smi.devices import SmiNode, from_node
from fakegpu.telemetry.nvidia_smi.topology import LEGEND
from tests.unit.nvidia_smi.helpers import out, smi, smi_node, spec_node

H100_READING = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t0-63\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t0-63\t0\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tNV18\tNV18\t0-63\t0\t\tN/A\n"
    "GPU3\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tNV18\t0-63\t0\t\tN/A\n"
    "GPU4\tNV18\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\t0-63\t0\t\tN/A\n"
    "GPU5\tNV18\tNV18\tNV18\tNV18\tNV18\t X \tNV18\tNV18\t0-63\t0\t\tN/A\n"
    "GPU6\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t X \tNV18\t0-63\t0\t\tN/A\n"
    "GPU7\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\t X \t0-63\t0\t\tN/A\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
)
"""An 8x H100 board as the tool lays it out: one NUMA node, every pair on the NVSwitch fabric."""


def _node(spec: dict[str, Any]) -> SmiNode:
    return from_node(build_node(parse_node_spec(spec, "test"), "node-a", source="test"))


def test_an_hgx_h100_node_prints_the_reading_but_its_cpus():
    """fakegpu prints no CPU Affinity (a fake NUMA node has no CPUs in the container); the rest is
    ``H100_READING`` byte for byte."""
    assert out(smi_node("8xh100-80gb"), "topo", "-m") == H100_READING.replace("\t0-63\t", "\t\t")
    assert out(smi_node("8xh100-80gb"), "topo", "--matrix") == H100_READING.replace("\t0-63\t", "\t\t")


def test_nvlink_groups_and_numa_nodes_decide_the_cells():
    """Linked pairs show NV# (A100: NV12 as on DGX A100, NVIDIA/nccl#1505), others NODE on one NUMA node
    and SYS across; NUMA Affinity is the GPU's node."""
    node = from_node(
        spec_node(
            {"model": "a100-80gb", "count": 2, "numa": [0, 0]}, {"model": "a100-80gb", "count": 2, "numa": [1, 1]}
        )
    )
    text = out(node, "topo", "-m")
    assert text.splitlines()[:5] == [
        "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
        "GPU0\t X \tNV12\tNV12\tNV12\t\t0\t\tN/A",
        "GPU1\tNV12\t X \tNV12\tNV12\t\t0\t\tN/A",
        "GPU2\tNV12\tNV12\t X \tNV12\t\t1\t\tN/A",
        "GPU3\tNV12\tNV12\tNV12\t X \t\t1\t\tN/A",
    ]
    groups = {"nvlink": [[0, 1], [2, 3]], "gpus": [{"model": "h100-80gb", "count": 4}]}
    assert out(_node({"numaNodes": 2, **groups}), "topo", "-m").splitlines()[1:5] == [
        "GPU0\t X \tNV18\tSYS\tSYS\t\t0\t\tN/A",
        "GPU1\tNV18\t X \tSYS\tSYS\t\t0\t\tN/A",
        "GPU2\tSYS\tSYS\t X \tNV18\t\t1\t\tN/A",
        "GPU3\tSYS\tSYS\tNV18\t X \t\t1\t\tN/A",
    ]
    assert out(_node(groups), "topo", "-m").splitlines()[1] == "GPU0\t X \tNV18\tNODE\tNODE\t\t0\t\tN/A"


def test_pcie_boards_without_nvlink_and_across_numa_nodes():
    node = from_node(spec_node({"model": "l4", "count": 2, "numa": [0, 1]}))
    assert out(node, "topo", "-m").splitlines()[1:3] == ["GPU0\t X \tSYS\t\t0\t\tN/A", "GPU1\tSYS\t X \t\t1\t\tN/A"]
    unknown = from_node(spec_node({"model": "t4", "count": 2, "numa": -1}))
    assert out(unknown, "topo", "-m").splitlines()[1] == "GPU0\t X \tNODE\t\tN/A\t\tN/A"


def test_a_container_sees_its_gpus_renumbered():
    """NVIDIA_VISIBLE_DEVICES=5,2 on an 8-GPU node: GPU0 is node GPU 2, GPU1 node GPU 5."""
    node = _node({"numaNodes": 2, "nvlink": "none", "gpus": [{"model": "h100-80gb", "count": 8}]})
    assert out(node, "topo", "-m", visible="5,2").splitlines()[:3] == [
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
        "GPU0\t X \tSYS\t\t0\t\tN/A",
        "GPU1\tSYS\t X \t\t1\t\tN/A",
    ]
    assert out(node, "topo", "-m", visible="5").endswith("".join(line + "\n" for line in LEGEND))


def test_invalid_uses_of_topo():
    node = smi_node("2xh100-80gb")
    reading = "The -i command line argument must be used in conjunction with -n or -p.\n"
    assert (smi(node, "topo", "-m", "-i", "0").stdout, smi(node, "topo", "-m", "-i", "0").status) == (reading, 2)
    assert smi(node, "topo").status == 2
    assert smi(node, "topo").stdout.startswith("Invalid combination of input arguments.")
    assert (
        smi(node, "topo", "-L").stdout == "ERROR: Option -L is not recognized. Please run 'nvidia-smi -h' for help.\n\n"
    )
    assert smi(node, "-L", "topo").stdout.startswith("ERROR: Option topo is not recognized.")
    assert smi(node, "topo", "-m", visible="none").stdout == "No devices were found\n"
