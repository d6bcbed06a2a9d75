"""The fake DCGM exporter's exposition: dcgm-exporter's metric names, HELP/TYPE lines, label names and
label order for a whole GPU, a time-slicing replica and a MIG instance, pinned."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fakegpu.kubeletapi.podresources.v1 import api_pb2 as pr
from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.dcgm import metric_names as names
from fakegpu.telemetry.dcgm.attribution import (
    AnnotationLookup,
    CallableAttribution,
    DeviceHolder,
    DraDevice,
    FallbackAttribution,
    holders_from_list,
    pod_resources_socket,
    unix_target,
)
from fakegpu.telemetry.dcgm.exporter import DcgmExporter, dcgm_text
from fakegpu.telemetry.dcgm.gpu_activity import UTILIZATION_ANNOTATION
from fakegpu.telemetry.nvidia_smi.devices import from_inventory
from fakegpu.telemetry.nvidia_smi.query import gpu_values
from tests.inventory_builders import inventory, time_slicing

HELP_TYPE = [
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "gauge"),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge"),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "gauge"),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "gauge"),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "gauge"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gauge"),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "gauge"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", "counter"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", "counter"),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors.", "counter"),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", "counter"),
    ("DCGM_FI_DEV_RETIRED_SBE", "Total number of retired pages due to single-bit errors.", "counter"),
    ("DCGM_FI_DEV_RETIRED_DBE", "Total number of retired pages due to double-bit errors.", "counter"),
    ("DCGM_FI_DEV_RETIRED_PENDING", "Total number of pages pending retirement.", "counter"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "Total number of NVLink flow-control CRC errors.", "counter"),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "Total number of NVLink data CRC errors.", "counter"),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.", "counter"),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors.", "counter"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors", "counter"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors", "counter"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", "gauge"),
    (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
        "gauge",
    ),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "gauge"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", "gauge"),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "gauge",
    ),
]
"""NVIDIA/dcgm-exporter etc/dcp-metrics-included.csv @ 99a774bb93604fbc5cc509e68c8bbb205dbfb16c: names, types and
HELP texts, in its order (the ECC, retired-pages and NVLink lines are commented out there, enabled by a counters
file), and DCGM field 112 (go-dcgm's DCGM_FI_DEV_CLOCKS_EVENT_REASONS)."""
GPU_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
MIG_LABELS = [
    "gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "Hostname",
    "DCGM_FI_DRIVER_VERSION",
]  # fmt: skip
POD = ["container", "namespace", "pod"]
XID = ["err_code", "err_msg"]
SERIES = re.compile(r"^(?P<name>[A-Z_]+)\{(?P<labels>.*)\} (?P<value>\S+)$")
LABEL = re.compile(r'([A-Za-z_]+)="((?:[^"\\]|\\.)*)"')


def series(text: bytes) -> list[tuple[str, list[tuple[str, str]], str]]:
    """Every series line as (name, [(label, value)] in order, value text)."""
    out = []
    for line in text.decode().splitlines():
        if line.startswith("#"):
            continue
        match = SERIES.match(line)
        assert match, line
        out.append((match["name"], LABEL.findall(match["labels"]), match["value"]))
    return out


def of(text: bytes, name: str, **where: str) -> list[tuple[list[tuple[str, str]], str]]:
    return [(labels, value) for n, labels, value in series(text) if n == name and where.items() <= dict(labels).items()]


def make(
    tmp_path: Path,
    gpus: str = "2xh100-80gb",
    holders: Iterable[DeviceHolder | tuple[str, str, str, str]] = (),
    *,
    annotations: AnnotationLookup | None = None,
    virtual_gpus: bool = False,
    **kw: Any,
) -> tuple[LiveInventory, DcgmExporter]:
    live = LiveInventory(inventory(tmp_path, gpus, **kw))
    exporter = DcgmExporter(
        live,
        CallableAttribution(lambda: list(holders)),
        annotations=annotations,
        clock=lambda: 0.0,
        virtual_gpus=virtual_gpus,
    )
    return live, exporter


async def test_help_and_type_lines_are_dcgm_exporters(tmp_path):
    _, exporter = make(tmp_path)
    text = (await exporter.scrape()).decode()
    headers = [line for line in text.splitlines() if line.startswith("#")]
    expected = []
    for name, help_text, kind in HELP_TYPE:
        if "RETIRED" not in name:  # an H100 remaps rows
            expected += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    assert headers == expected
    assert [(c.name, c.help, c.type) for c in names.COUNTERS] == HELP_TYPE


async def test_idle_whole_gpu_labels_in_dcgm_exporter_order(tmp_path):
    live, exporter = make(tmp_path)
    text = await exporter.scrape()
    gpu0 = live.inventory.node.gpus[0]
    for name, labels, _ in series(text):
        expected = GPU_LABELS + (XID if name == "DCGM_FI_DEV_XID_ERRORS" else [])
        assert [k for k, _ in labels] == expected, name
    labels, value = of(text, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0]
    assert labels == [
        ("gpu", "0"),
        ("UUID", gpu0.uuid),
        ("pci_bus_id", "00000000:18:00.0"),
        ("device", "nvidia0"),
        ("modelName", "NVIDIA H100 80GB HBM3"),
        ("Hostname", "node-a"),
        ("DCGM_FI_DRIVER_VERSION", live.inventory.node.driver_version),
    ]
    assert value == "0"
    assert of(text, "DCGM_FI_DEV_FB_USED", gpu="0")[0][1] == "0"
    assert of(text, "DCGM_FI_DEV_FB_FREE", gpu="0")[0][1] == "81559"
    xid_labels, xid = of(text, "DCGM_FI_DEV_XID_ERRORS", gpu="1")[0]
    assert xid_labels[-2:] == [("err_code", "0"), ("err_msg", "No Error")] and xid == "0"
    # doubles as Go's %f, integers as %d
    assert re.fullmatch(r"\d+\.\d{6}", of(text, "DCGM_FI_DEV_POWER_USAGE", gpu="0")[0][1])
    assert of(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0")[0][1] == "0.000000"
    assert re.fullmatch(r"\d+", of(text, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0][1])


async def test_held_whole_gpu_gets_pod_attributes_last(tmp_path):
    live, _ = make(tmp_path)
    gpu0 = live.inventory.node.gpus[0].uuid
    _, exporter = make(tmp_path, holders=[(gpu0, "ml", "train-0", "main")])
    text = await exporter.scrape()
    for name, labels, _ in of_all(text, gpu="0"):
        expected = GPU_LABELS + (["container", *XID, "namespace", "pod"] if name.endswith("XID_ERRORS") else POD)
        assert [k for k, _ in labels] == expected, name
    labels, value = of(text, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0]
    assert labels[-3:] == [("container", "main"), ("namespace", "ml"), ("pod", "train-0")]
    assert 55 <= int(value) <= 85  # the default target, 70 +- 10, +- jitter
    assert of(text, "DCGM_FI_DEV_GPU_UTIL", gpu="1")[0][1] == "0"
    assert "pod" not in dict(of(text, "DCGM_FI_DEV_GPU_UTIL", gpu="1")[0][0])


def of_all(text: bytes, **where: str):
    return [(n, labels, v) for n, labels, v in series(text) if where.items() <= dict(labels).items()]


async def test_annotation_sets_the_target(tmp_path):
    live, _ = make(tmp_path)
    gpu0 = live.inventory.node.gpus[0].uuid
    annotations = {("ml", "infer"): {UTILIZATION_ANNOTATION: "25"}}
    _, exporter = make(
        tmp_path, holders=[(gpu0, "ml", "infer", "srv")], annotations=lambda ns, pod: annotations.get((ns, pod), {})
    )
    util = int(of(await exporter.scrape(), "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1])
    assert 24 <= util <= 26


async def test_time_slicing_replica_default_names_the_last_holder(tmp_path):
    live, _ = make(tmp_path, "1xh100-80gb", config=time_slicing(4))
    gpu0 = live.inventory.node.gpus[0].uuid
    holders = [(f"{gpu0}::1", "a", "pod-a", "c"), (f"{gpu0}::3", "b", "pod-b", "c")]
    annotations = {("a", "pod-a"): {UTILIZATION_ANNOTATION: "30"}, ("b", "pod-b"): {UTILIZATION_ANNOTATION: "20"}}
    _, exporter = make(
        tmp_path, "1xh100-80gb", holders, config=time_slicing(4), annotations=lambda ns, p: annotations[(ns, p)]
    )
    text = await exporter.scrape()
    rows = of(text, "DCGM_FI_DEV_GPU_UTIL")
    assert len(rows) == 1
    labels, value = rows[0]
    assert dict(labels)["UUID"] == gpu0  # the replica counts on its GPU
    assert [k for k, _ in labels] == GPU_LABELS + POD
    assert dict(labels)["pod"] == "pod-b"  # dcgm-exporter's device-to-pod map keeps the last writer
    assert 48 <= int(value) <= 52  # both workloads: 30 + 20
    # each replica may fill a quarter of the memory
    used = int(of(text, "DCGM_FI_DEV_FB_USED")[0][1])
    assert used == round(81559 // 4 * 0.45) + round(81559 // 4 * 0.4)


async def test_time_slicing_replica_virtual_gpus_one_series_per_pod(tmp_path):
    live, _ = make(tmp_path, "1xh100-80gb", config=time_slicing(4))
    gpu0 = live.inventory.node.gpus[0].uuid
    holders = [(f"{gpu0}::1", "a", "pod-a", "c"), (f"{gpu0}::3", "b", "pod-b", "c")]
    _, exporter = make(tmp_path, "1xh100-80gb", holders, config=time_slicing(4), virtual_gpus=True)
    text = await exporter.scrape()
    rows = of(text, "DCGM_FI_DEV_GPU_UTIL")
    assert [[k for k, _ in labels] for labels, _ in rows] == [GPU_LABELS + POD + ["vgpu"]] * 2
    assert [(dict(labels)["pod"], dict(labels)["vgpu"]) for labels, _ in rows] == [("pod-a", "1"), ("pod-b", "3")]
    assert rows[0][1] == rows[1][1]  # one GPU, one value
    xid_rows = of(text, "DCGM_FI_DEV_XID_ERRORS")
    assert [k for k, _ in xid_rows[0][0]] == [*GPU_LABELS, "container", *XID, "namespace", "pod", "vgpu"]


async def test_mig_instances_replace_their_gpu(tmp_path):
    kw: dict[str, Any] = {"layout": "all-3g.40gb", "cli": {"mig_strategy": "mixed"}}
    live, _ = make(tmp_path, "2xh100-80gb", **kw)
    gpu0 = live.inventory.node.gpus[0]
    mig = gpu0.mig_devices[1]
    _, exporter = make(tmp_path, "2xh100-80gb", [(mig.uuid, "ml", "p", "c")], **kw)
    text = await exporter.scrape()
    assert of(text, "DCGM_FI_DEV_GPU_UTIL") == []  # not measurable per MIG instance
    assert of(text, "DCGM_FI_DEV_MEM_COPY_UTIL") == []
    assert b"DCGM_FI_DEV_GPU_UTIL" not in text  # and no HELP line for an empty family
    fb = of(text, "DCGM_FI_DEV_FB_USED")
    assert len(fb) == 4  # 2 GPUs x 2 instances, no whole-GPU series
    labels, _ = of(text, "DCGM_FI_DEV_FB_USED", GPU_I_ID=str(mig.gi_id), gpu="0")[0]
    assert [k for k, _ in labels] == MIG_LABELS + POD
    assert dict(labels)["UUID"] == gpu0.uuid  # the parent's identity
    assert dict(labels)["GPU_I_PROFILE"] == "3g.40gb"
    assert dict(labels)["device"] == "nvidia0"
    idle_labels, idle = of(text, "DCGM_FI_DEV_FB_USED", GPU_I_ID=str(gpu0.mig_devices[0].gi_id), gpu="0")[0]
    assert [k for k, _ in idle_labels] == MIG_LABELS and idle == "10"
    free = of(text, "DCGM_FI_DEV_FB_FREE", GPU_I_ID=str(gpu0.mig_devices[0].gi_id), gpu="0")[0][1]
    assert int(free) == 40448 - 10
    busy = float(of(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_I_ID=str(mig.gi_id), gpu="0")[0][1])
    assert 0.5 < busy < 0.9
    # power and temperature are the board's: both instances of GPU 0 read the same
    powers = {v for _, v in of(text, "DCGM_FI_DEV_POWER_USAGE", gpu="0")}
    assert len(powers) == 1
    xid_labels = of(text, "DCGM_FI_DEV_XID_ERRORS", gpu="1")[0][0]
    assert [k for k, _ in xid_labels] == MIG_LABELS + XID


async def test_dra_holder_adds_dcgm_exporters_dra_attributes(tmp_path):
    live, _ = make(tmp_path)
    gpu1 = live.inventory.node.gpus[1].uuid
    dra = DraDevice("single-gpu", "gpu-test", "gpu.nvidia.com", "node-a", "gpu-1")
    _, exporter = make(tmp_path, holders=[DeviceHolder(gpu1, "gpu-test", "pod1", "ctr", dra)])
    labels, _ = of(await exporter.scrape(), "DCGM_FI_DEV_GPU_UTIL", gpu="1")[0]
    assert labels[len(GPU_LABELS) :] == [
        ("container", "ctr"),
        ("dra_claim_name", "single-gpu"),
        ("dra_claim_namespace", "gpu-test"),
        ("dra_device_name", "gpu-1"),
        ("dra_driver_name", "gpu.nvidia.com"),
        ("dra_pool_name", "node-a"),
        ("namespace", "gpu-test"),
        ("pod", "pod1"),
    ]


async def test_xid_is_the_last_one_and_stays_after_recovery(tmp_path):
    live, exporter = make(tmp_path)
    gpu0 = live.inventory.node.gpus[0].uuid
    live.inject_xid(gpu0, 79)
    text = await exporter.scrape()
    labels, value = of(text, "DCGM_FI_DEV_XID_ERRORS", gpu="0")[0]
    assert value == "79"
    assert labels[-2:] == [("err_code", "79"), ("err_msg", "GPU has fallen off the bus")]
    assert of(text, "DCGM_FI_DEV_XID_ERRORS", gpu="1")[0][1] == "0"
    live.set_health(gpu0, True)
    assert of(await exporter.scrape(), "DCGM_FI_DEV_XID_ERRORS", gpu="0")[0][1] == "79"
    live.inject_xid(gpu0, 48)
    labels, value = of(await exporter.scrape(), "DCGM_FI_DEV_XID_ERRORS", gpu="0")[0]
    assert value == "48" and dict(labels)["err_msg"] == "Double Bit ECC Error"
    assert names.xid_attributes(999) == {"err_code": "999", "err_msg": "Unknown Error"}


async def test_same_inputs_same_bytes_and_prometheus_parses_it(tmp_path):
    live, _ = make(tmp_path)
    gpu0 = live.inventory.node.gpus[0].uuid
    holders = [(gpu0, "ml", "p", "c")]
    _, one = make(tmp_path, holders=holders)
    _, two = make(tmp_path, holders=holders)
    first = await one.scrape()
    assert first == await two.scrape() == await one.scrape()
    families = {f.name: f for f in text_string_to_metric_families(first.decode())}
    assert set(families) == {name for name, _, _ in HELP_TYPE if "RETIRED" not in name}
    # the registry also works with prometheus_client's own encoder (sorted labels, same series)
    assert {f.name for f in text_string_to_metric_families(generate_latest(one.registry).decode())} == set(families)


async def test_unknown_ids_and_failing_sources_are_ignored(tmp_path):
    calls = []

    def source():
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("boom")
        return [("0", "ns", "p", "c"), ("NIC-1", "ns", "p", "c")]  # an index-strategy ID, another vendor's

    live = LiveInventory(inventory(tmp_path, "1xh100-80gb"))
    exporter = DcgmExporter(live, CallableAttribution(source), clock=lambda: 0.0)
    assert [k for k, _ in of(await exporter.scrape(), "DCGM_FI_DEV_GPU_UTIL")[0][0]] == GPU_LABELS
    assert len(exporter.holders) == 2
    await exporter.scrape()  # the source fails: the last answer stays
    assert len(exporter.holders) == 2


def test_nvml_bus_id_form():
    assert names.nvml_pci_bus_id("0000:18:00.0") == "00000000:18:00.0"
    assert names.nvml_pci_bus_id("0001:b8:00.0") == "00000001:B8:00.0"


def test_dcgm_text_of_nothing_is_empty():
    assert dcgm_text([]) == b""


def test_holders_from_list_maps_device_plugin_and_dra_allocations():
    gpu0 = pr.ClaimResource(driver_name="gpu.nvidia.com", pool_name="node", device_name="gpu-0")
    response = pr.ListPodResourcesResponse(
        pod_resources=[
            pr.PodResources(
                name="p",
                namespace="ns",
                containers=[
                    pr.ContainerResources(
                        name="c",
                        devices=[pr.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-a", "GPU-b::1"])],
                        dynamic_resources=[
                            pr.DynamicResource(
                                claim_name="claim",
                                claim_namespace="ns",
                                claim_resources=[
                                    gpu0,
                                    pr.ClaimResource(driver_name="other.example.com", pool_name="x", device_name="y"),
                                ],
                            )
                        ],
                    ),
                    pr.ContainerResources(name="sidecar"),
                ],
            )
        ]
    )

    def resolve(driver: str, pool: str, device: str) -> str | None:
        return "GPU-0" if (driver, pool, device) == ("gpu.nvidia.com", "node", "gpu-0") else None

    assert holders_from_list(response) == [
        DeviceHolder("GPU-a", "ns", "p", "c"),
        DeviceHolder("GPU-b::1", "ns", "p", "c"),
    ]
    assert holders_from_list(response, resolve)[-1] == DeviceHolder(
        "GPU-0", "ns", "p", "c", DraDevice("claim", "ns", "gpu.nvidia.com", "node", "gpu-0")
    )


@pytest.mark.parametrize("counter", names.COUNTERS)
def test_counter_types(counter):
    assert counter.type == (
        "counter" if "_TOTAL" in counter.name or "_ROWS" in counter.name or "RETIRED" in counter.name else "gauge"
    )
    assert counter.double == (counter.name.startswith("DCGM_FI_PROF_") or counter.name.endswith("POWER_USAGE"))


T4_GOLDEN = [
    "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).",
    "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
    "DCGM_FI_DEV_SM_CLOCK{{ID},{POD}} 1590",  # the T4's boost clock
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
    "DCGM_FI_DEV_GPU_TEMP{{ID},{POD}} 67",
    "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
    "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
    "DCGM_FI_DEV_POWER_USAGE{{ID},{POD}} 54.064000",  # from the T4's 9.42 W idle reading (was 10 W)
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
    "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    "DCGM_FI_DEV_GPU_UTIL{{ID},{POD}} 74",
    "# HELP DCGM_FI_DEV_MEM_COPY_UTIL Memory utilization (in %).",
    "# TYPE DCGM_FI_DEV_MEM_COPY_UTIL gauge",
    "DCGM_FI_DEV_MEM_COPY_UTIL{{ID},{POD}} 31",
    "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
    "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
    "DCGM_FI_DEV_XID_ERRORS{{ID},{XIDPOD}} 0",
    "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).",
    "# TYPE DCGM_FI_DEV_FB_FREE gauge",
    "DCGM_FI_DEV_FB_FREE{{ID},{POD}} 4870",
    "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
    "# TYPE DCGM_FI_DEV_FB_USED gauge",
    "DCGM_FI_DEV_FB_USED{{ID},{POD}} 10490",
    "# HELP DCGM_FI_DEV_ECC_SBE_VOL_TOTAL Total number of single-bit volatile ECC errors.",
    "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{ID},{POD}} 0",
    "# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.",
    "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{ID},{POD}} 0",
    "# HELP DCGM_FI_DEV_ECC_SBE_AGG_TOTAL Total number of single-bit persistent ECC errors.",
    "# TYPE DCGM_FI_DEV_ECC_SBE_AGG_TOTAL counter",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{{ID},{POD}} 0",
    "# HELP DCGM_FI_DEV_ECC_DBE_AGG_TOTAL Total number of double-bit persistent ECC errors.",
    "# TYPE DCGM_FI_DEV_ECC_DBE_AGG_TOTAL counter",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL{{ID},{POD}} 0",
    "# HELP DCGM_FI_DEV_RETIRED_SBE Total number of retired pages due to single-bit errors.",
    "# TYPE DCGM_FI_DEV_RETIRED_SBE counter",
    "DCGM_FI_DEV_RETIRED_SBE{{ID},{POD}} 0",  # a Turing board retires pages; it has no NVLink
    "# HELP DCGM_FI_DEV_RETIRED_DBE Total number of retired pages due to double-bit errors.",
    "# TYPE DCGM_FI_DEV_RETIRED_DBE counter",
    "DCGM_FI_DEV_RETIRED_DBE{{ID},{POD}} 0",
    "# HELP DCGM_FI_DEV_RETIRED_PENDING Total number of pages pending retirement.",
    "# TYPE DCGM_FI_DEV_RETIRED_PENDING counter",
    "DCGM_FI_DEV_RETIRED_PENDING{{ID},{POD}} 0",
    "# HELP DCGM_FI_DEV_CLOCKS_EVENT_REASONS Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
    "# TYPE DCGM_FI_DEV_CLOCKS_EVENT_REASONS gauge",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{ID},{POD}} 0",  # busy: not idle, nothing slows it
    "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.",
    "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE{{ID},{POD}} 0.746288",
    "# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.",
    "# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{ID},{POD}} 0.410459",
    "# HELP DCGM_FI_PROF_DRAM_ACTIVE Ratio of cycles the device memory interface is active sending or receiving data.",
    "# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge",
    "DCGM_FI_PROF_DRAM_ACTIVE{{ID},{POD}} 0.310000",
]


async def test_golden_exposition_of_a_held_t4(tmp_path):
    """The whole text for one T4 held by one container, byte for byte (values included: the model is
    deterministic, so any change to them is deliberate)."""
    live, _ = make(tmp_path, "1xt4")
    uuid = live.inventory.node.gpus[0].uuid
    _, exporter = make(tmp_path, "1xt4", [(uuid, "ml", "infer-0", "server")])
    ident = (
        f'gpu="0",UUID="{uuid}",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="Tesla T4",'
        f'Hostname="node-a",DCGM_FI_DRIVER_VERSION="{live.inventory.node.driver_version}"'
    )
    pod = 'container="server",namespace="ml",pod="infer-0"'
    xid_pod = 'container="server",err_code="0",err_msg="No Error",namespace="ml",pod="infer-0"'
    expected = "\n".join(T4_GOLDEN).replace("{XIDPOD}", xid_pod).replace("{POD}", pod).replace("{ID}", ident)
    assert (await exporter.scrape()).decode() == expected + "\n"


@pytest.mark.parametrize(("gpus", "layout"), [*((f"4x{key}", None) for key in CATALOG), ("2xh100-80gb", "all-3g.40gb")])
async def test_an_idle_gpu_reads_the_same_in_dcgm_and_nvidia_smi(tmp_path, gpus, layout):
    """Both read the board's catalog entry: at zero utilisation DCGM reports exactly the power draw and
    temperature nvidia-smi prints, GPU by GPU (MIG instances report their board's)."""
    kw: dict[str, Any] = {} if layout is None else {"layout": layout}
    live, exporter = make(tmp_path, gpus, **kw)
    text = await exporter.scrape()
    smi = from_inventory(live.inventory)
    for gpu in smi.gpus:
        printed = gpu_values(smi, gpu)
        powers = {float(v) for _, v in of(text, "DCGM_FI_DEV_POWER_USAGE", gpu=str(gpu.index))}
        temperatures = {int(v) for _, v in of(text, "DCGM_FI_DEV_GPU_TEMP", gpu=str(gpu.index))}
        assert powers == {float(printed["power.draw"][1])}
        assert temperatures == {int(printed["temperature.gpu"][1])}


# --- seed, MIG strategy none, log noise, the attribution fallback -------------------------------------------


def seeded(tmp_path: Path, seed: str | int, gpus: str = "2xh100-80gb") -> DcgmExporter:
    live = LiveInventory(inventory(tmp_path, gpus))
    held = [(live.inventory.node.gpus[0].uuid, "ml", "p", "c")]
    return DcgmExporter(live, CallableAttribution(lambda: held), clock=lambda: 0.0, seed=seed)


async def test_the_seed_picks_the_values(tmp_path):
    first = await seeded(tmp_path, "node-a").scrape()
    assert first == await seeded(tmp_path, "node-a").scrape()  # same seed: same bytes
    other = await seeded(tmp_path, "node-b").scrape()
    assert other != first
    util = [float(of(t, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[0][1]) for t in (first, other)]
    temp = [float(of(t, "DCGM_FI_DEV_GPU_TEMP", gpu="1")[0][1]) for t in (first, other)]
    assert util[0] != util[1] or temp[0] != temp[1]


async def test_a_whole_mig_enabled_gpu_spreads_its_load_over_the_instances(tmp_path):
    """MIG strategy none hands out the MIG-enabled GPU itself; DCGM sees only its instances, which all carry
    the holder and its load (none of it is dropped)."""
    kw: dict[str, Any] = {"layout": "all-3g.40gb", "cli": {"mig_strategy": "none"}}
    live, _ = make(tmp_path, "1xh100-80gb", **kw)
    gpu = live.inventory.node.gpus[0]
    annotations = {("ml", "p"): {UTILIZATION_ANNOTATION: "40"}}
    _, exporter = make(
        tmp_path,
        "1xh100-80gb",
        [(gpu.uuid, "ml", "p", "c")],
        annotations=lambda ns, pod: annotations.get((ns, pod), {}),
        **kw,
    )
    _, idle_exporter = make(tmp_path, "1xh100-80gb", **kw)
    text, idle = await exporter.scrape(), await idle_exporter.scrape()
    active = of(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert len(active) == len(gpu.mig_devices) == 2
    for labels, value in active:
        assert dict(labels)["pod"] == "p" and dict(labels)["container"] == "c"
        assert 0.38 <= float(value) <= 0.42
    busy_power = float(of(text, "DCGM_FI_DEV_POWER_USAGE")[0][1])
    assert busy_power > float(of(idle, "DCGM_FI_DEV_POWER_USAGE")[0][1])


async def test_a_failing_source_is_logged_once_per_distinct_error(tmp_path, caplog):
    errors: list[Exception | None] = [RuntimeError("boom"), RuntimeError("boom"), RuntimeError("boom"), KeyError("x")]
    errors += [None, RuntimeError("boom")]

    def source():
        error = errors.pop(0)
        if error is not None:
            raise error
        return []

    live = LiveInventory(inventory(tmp_path, "1xh100-80gb"))
    exporter = DcgmExporter(live, CallableAttribution(source), clock=lambda: 0.0)
    caplog.set_level(logging.DEBUG, logger="fakegpu.telemetry.dcgm.exporter")
    for _ in range(6):
        await exporter.scrape()  # never raises
    logged = [r for r in caplog.records if r.name == "fakegpu.telemetry.dcgm.exporter"]
    # boom once (not three times), the KeyError once, and boom again after the source recovered
    assert [repr(r.exc_info[1]) for r in logged if r.exc_info] == [
        "RuntimeError('boom')",
        "KeyError('x')",
        "RuntimeError('boom')",
    ]
    assert len(logged) == 3


async def test_a_failing_annotation_lookup_is_logged_once(tmp_path, caplog):
    live, _ = make(tmp_path)
    gpu0 = live.inventory.node.gpus[0].uuid

    def broken(namespace: str, pod: str) -> dict[str, str]:
        raise RuntimeError("lookup down")

    _, exporter = make(tmp_path, holders=[(gpu0, "ml", "p", "c")], annotations=broken)
    caplog.set_level(logging.DEBUG, logger="fakegpu.telemetry.dcgm.exporter")
    for _ in range(3):
        assert of(await exporter.scrape(), "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert len([r for r in caplog.records if r.name == "fakegpu.telemetry.dcgm.exporter"]) == 1


async def test_the_fallback_adds_what_the_primary_source_missed(tmp_path, caplog):
    dra = DraDevice("claim", "ns", "gpu.nvidia.com", "node-a", "gpu-0")
    listed = [DeviceHolder("GPU-a", "ns", "p", "c")]
    seen: list[list[DeviceHolder]] = []
    failing = [False]

    async def fallback(holders: list[DeviceHolder]) -> list[DeviceHolder]:
        seen.append(holders)
        if failing[0]:
            raise OSError()
        return [DeviceHolder("GPU-b", "ns", "q", "", dra)]

    attribution = FallbackAttribution(CallableAttribution(lambda: listed), fallback)
    assert await attribution.holders() == [*listed, DeviceHolder("GPU-b", "ns", "q", "", dra)]
    assert seen == [listed]
    failing[0] = True
    caplog.set_level(logging.WARNING, logger="fakegpu.telemetry.dcgm.attribution")
    assert await attribution.holders() == listed
    assert await attribution.holders() == listed
    (warning,) = caplog.records
    assert "OSError" in warning.getMessage()


def test_a_relative_socket_is_an_absolute_grpc_target(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    socket = pod_resources_socket(Path("kubelet"))
    assert unix_target(socket) == f"unix://{tmp_path}/kubelet/pod-resources/kubelet.sock"
    assert unix_target(tmp_path / "x.sock") == f"unix://{tmp_path}/x.sock"
