"""``nvidia-smi mig -lgip``, ``-lgi`` and ``-lci``: the GPU-instance profiles, GPU instances and compute
instances of the GPUs a container sees, in the real tool's boxes.

Layouts follow real readings: ``-lgip``/``-lgi``/``-lci`` on an H100 80GB HBM3 with driver 580.173.02
(starkdrift/prickle-exporter ``internal/collector/gpu/testdata/h100-*-20260729/nvidia/mig-*.txt``), whose
``-lgip`` and ``-lgi`` name columns are two characters wider than before 580 (H100 SXM5 ``-lgip`` in
stackhpc's slurm appliance docs, B200 in NVIDIA/mig-parted#166, ``-lgi`` in NVIDIA/DCGM#138); ``-lci``
kept its width. Which release widened them is not known from readings: fakegpu switches at 580.

What the tables hold, from the same readings: ``-lgip`` lists every profile of every MIG-capable GPU, MIG
mode on or off, with how many more instances still fit (``Free``); ``-lgi`` and ``-lci`` list the instances
of the GPUs in MIG mode in NVML's profile order (``1_SLICE`` first, ``+me`` after the plain sizes), then by
GPU-instance ID; a compute instance is named after its profile without ``+me`` and placed at ``0:<compute
slices>`` with NVML's compute-instance profile of that size. Rows carry index tokens (``tokens``): the GPU's
index in the container, the GPU-instance ID and start slot are filled in when printing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from fakegpu.telemetry.nvidia_smi import tokens
from fakegpu.telemetry.nvidia_smi.devices import SmiGpu, SmiMig, SmiMigProfile, SmiNode, VisibleGpu

NO_MIG_DEVICES: Final = "No MIG-enabled devices found.\n"
"""Readings: ``-lgi``/``-lci`` on an H100 with MIG off (prickle-exporter h100-default-20260729), ``-lgip``
on a Tesla T4 (driver 530)."""
NO_GPU_INSTANCES: Final = "No GPU instances found: Not Found\n"
"""``-lgi`` with MIG on and no instance (reading on an A30)."""
NO_COMPUTE_INSTANCES: Final = "No compute instances found: Not Found\n"
"""No reading of ``-lci`` without instances; ``-dci`` prints ``No compute instances found`` since 2025
(GoogleCloudPlatform/container-engine-accelerators#444), with NVML's reason as ``-lgi`` prints it."""
WIDE_FROM_DRIVER: Final = 580

_CI_PROFILE_BY_SLICES: Final = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
"""NVML's compute-instance profile constant of a compute instance spanning that many compute slices
(readings: ``1g`` -> 0, ``4g.40gb`` -> 3)."""


def wide(node: SmiNode) -> bool:
    major = node.driver_version.split(".", 1)[0]
    return major.isdigit() and int(major) >= WIDE_FROM_DRIVER


def _extra(node: SmiNode) -> str:
    return "  " if wide(node) else ""


def _rule(width: int) -> str:
    return "+" + "-" * (width - 2) + "+"


def _boxed(text: str, width: int) -> str:
    return f"{text:<{width - 1}}|"


def _head(title: str, width: int, *columns: str) -> tuple[str, ...]:
    """Rule, title, column titles, double rule: the top of every ``mig`` box."""
    return (_rule(width), _boxed(f"| {title}", width), *columns, "|" + "=" * (width - 2) + "|")


def profiles_head(node: SmiNode) -> tuple[str, ...]:
    x = _extra(node)
    return _head(
        "GPU instance profiles:",
        79 + len(x),
        f"| GPU   Name             {x}ID    Instances   Memory     P2P    SM    DEC   ENC  |",
        f"|                              {x}Free/Total   GiB              CE    JPEG  OFA  |",
    )


def free_instances(gpu: SmiGpu, profile: SmiMigProfile) -> int:
    """How many more instances of ``profile`` fit beside the GPU's instances: free aligned placements,
    taken greedily (placements of one profile are aligned, so greedy is best), within the profile's total."""
    sizes = {p.name: p.memory_slices for p in gpu.mig_profiles}
    taken = {slot for m in gpu.migs for slot in range(m.start, m.start + sizes.get(m.profile, 1))}
    fits = 0
    for start in profile.placements:
        slots = set(range(start, start + profile.memory_slices))
        if not slots & taken:
            taken |= slots
            fits += 1
    return min(fits, profile.instances - sum(m.profile == profile.name for m in gpu.migs))


def profile_rows(node: SmiNode, gpu: SmiGpu) -> tuple[str, ...]:
    """Every profile of the GPU: two rows and a rule each, the GPU index a token."""
    x = _extra(node)
    rule = _rule(79 + len(x))
    out: list[str] = []
    for p in gpu.mig_profiles:
        name = f"MIG {p.name}"
        counts = f"{free_instances(gpu, p)}/{p.instances}"
        out += [
            f"|{tokens.GPU_4}  {name:<{18 + len(x)}}{p.profile_id:>2}     {counts:<11}{p.memory_mib / 1024:<11.2f}"
            f"{'No':<7}{p.multiprocessors:<7}{p.decoders:<6}{p.encoders:<4}|",
            f"|{' ' * (60 + len(x))}{p.copy_engines:>2}     {p.jpeg:<6}{p.ofa:<4}|",
            rule,
        ]
    return tuple(out)


def instances_head(node: SmiNode) -> tuple[str, ...]:
    x = _extra(node)
    return _head(
        "GPU instances:",
        57 + len(x),
        f"| GPU   Name             {x}Profile  Instance   Placement  |",
        f"|                          {x}ID       ID       Start:Size |",
    )


COMPUTE_HEAD: Final = _head(
    "Compute instances:",
    70,
    "| GPU     GPU       Name             Profile   Instance   Placement  |",
    "|       Instance                       ID        ID       Start:Size |",
    _boxed("|         ID", 70),
)


def profile_of(gpu: SmiGpu, mig: SmiMig) -> SmiMigProfile | None:
    """The MIG device's profile; None for a devices.json that lists none (fakegpu before ``mig``)."""
    return next((p for p in gpu.mig_profiles if p.name == mig.profile), None)


def instance_rows(node: SmiNode, gpu: SmiGpu, mig: SmiMig) -> tuple[str, ...]:
    """``-lgi``: the row and its rule, shared by every instance of the profile (GPU index, GI ID and start
    slot are tokens)."""
    p = profile_of(gpu, mig)
    if p is None:
        return ()
    x = _extra(node)
    placement = f"{tokens.START}:{p.memory_slices}"
    width = 8 + len(tokens.START) - 1
    # the start slot is one digit: a GPU has at most 8 memory slices
    return (
        f"|{tokens.GPU_4}  {'MIG ' + p.name:<{20 + len(x)}}{p.profile_id:>2}     {tokens.GI_4}          "
        f"{placement:<{width}}|",
        _rule(57 + len(x)),
    )


def compute_rows(gpu: SmiGpu, mig: SmiMig) -> tuple[str, ...]:
    """``-lci``: the one full-size compute instance (ID 0) of the GPU instance, and its rule."""
    p = profile_of(gpu, mig)
    if p is None:
        return ()
    name = "MIG " + p.name.split("+", 1)[0]
    placement = f"0:{p.compute_slices}"
    ci_profile = _CI_PROFILE_BY_SLICES[p.compute_slices]
    return (
        f"|{tokens.GPU_4}   {tokens.GI_4}       {name:<20}{ci_profile:>2}{mig.ci_id:>10}          {placement:<8}|",
        _rule(70),
    )


def listing_order(gpu: SmiGpu, migs: Sequence[SmiMig]) -> list[SmiMig]:
    """NVML's profile order, then GPU-instance ID; devices without a known profile are left out."""
    known = [(p.nvml_index, m.gi_id, n, m) for n, m in enumerate(migs) if (p := profile_of(gpu, m))]
    return [m for *_, m in sorted(known, key=lambda k: k[:3])]


def in_mig_mode(v: VisibleGpu) -> bool:
    """A GPU seen through some of its MIG devices is in MIG mode for the container, whatever the node says
    (a dynamic MIG device is created by switching MIG on)."""
    return v.gpu.mig_enabled or not v.whole


def assemble_profiles(node: SmiNode, gpus: Sequence[VisibleGpu]) -> str:
    lines = list(profiles_head(node))
    for v in gpus:
        lines += [tokens.fill(line, gpu=v.index) for line in profile_rows(node, v.gpu)]
    return "".join(line + "\n" for line in lines)


def assemble_instances(node: SmiNode, gpus: Sequence[VisibleGpu], *, compute: bool) -> str:
    """``-lgi`` (``compute`` False) or ``-lci``; empty when the GPUs have no instance."""
    lines: list[str] = []
    for v in gpus:
        for m in listing_order(v.gpu, v.migs):
            rows = compute_rows(v.gpu, m) if compute else instance_rows(node, v.gpu, m)
            lines += [tokens.fill(line, gpu=v.index, gi=m.gi_id, start=m.start) for line in rows]
    if not lines:
        return ""
    head = COMPUTE_HEAD if compute else instances_head(node)
    return "".join(line + "\n" for line in (*head, *lines))
