"""The GPU catalog: real boards with the numbers NVML, nvidia-smi and DCGM report for them.

Each key names exactly one board, and its entry is the one home of every per-board number: identity and
capacity, the MIG table, and the running figures (``BoardFacts``: power, temperature, BAR1, reserved
framebuffer, PCIe link) that the fake nvidia-smi prints and the DCGM activity model starts from. Every
board carries all of them; there is no default board to fall back on.

Numbers come from real ``nvidia-smi`` / ``nvidia-smi mig -lgip`` output where a reading was found, otherwise
from NVIDIA's MIG guide, datasheets and mig-parted; anything not confirmed by a reading is listed in the
``unverified`` notes (the model's and its facts') and printed by ``fakegpu catalog -v``.

MIG memory is ``GiB x 1024`` from ``nvidia-smi mig -lgip``, which is what nvidia-smi shows for a MIG
device (e.g. 40192 MiB for an A100-80GB ``3g.40gb``). Placements are start slots in memory slices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType

_PSTATE = re.compile(r"P(?:[0-9]|1[0-5])")
_FAN = re.compile(r"N/A|[0-9]{1,3}%")
_PCIE_WIDTHS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of a MIG-capable board (compute instance = whole GI, C == G)."""

    name: str
    gi_profile: str
    """NVML GPU-instance profile constant without its prefix: ``1_SLICE_REV1`` for ``+me``, ``*_GFX`` for
    ``+gfx``, ``*_ALL_ME`` for ``+me.all``, ``*_NO_ME`` for ``-me`` (go-nvlib ``mig_profile.go``)."""
    compute_slices: int
    memory_slices: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg: int
    ofa: int
    max_instances: int
    placements: tuple[int, ...]
    """Allowed start slots; the instance occupies ``memory_slices`` slots from there."""


@dataclass(frozen=True)
class BoardFacts:
    """What a running board reports beyond its identity: nvidia-smi prints the idle figures, DCGM's activity
    model moves from them towards the loaded ones, so an idle board reads the same in both.

    Where each number comes from, unless the board's ``unverified`` notes say it is estimated: idle power,
    idle temperature, performance state, fan, BAR1 and reserved framebuffer from real ``nvidia-smi``
    readings on driver 570 (H100 SXM5: 68-70 W at P0, 328 MiB reserved; L4: 11 W at P8; A10: 9 W at P8;
    A100 SXM4: 42-46 W; where the nvidia-smi and DCGM models used to disagree, these readings won); the
    power limit (TDP) and PCIe generation from NVIDIA's published board specifications; the minimum power
    limit carried over from the former nvidia-smi table, which recorded no separate source for it; PCIe
    width x16 for every board; the loaded temperature is always fakegpu's estimate (see ``load_temp_c``).
    Every field is required: a board without one does not import.
    """

    power_limit_w: int
    """Default = enforced = max power limit, the board's TDP: nvidia-smi's ``Pwr:Usage/Cap`` cap and what
    DCGM reports for a fully loaded board."""
    power_min_w: int
    """``power.min_limit``."""
    idle_power_w: float
    """Draw of an idle board (before the small per-GPU difference ``fakegpu.telemetry`` adds)."""
    idle_temp_c: int
    """Temperature of an idle board (before the per-GPU difference)."""
    load_temp_c: int
    """Temperature at 100 % utilisation, used by DCGM's activity model only. Never a reading: fakegpu's
    estimate by cooling, 70 C on an SXM baseboard and 78 C for a PCIe card."""
    idle_pstate: str
    """Performance state of an idle board: P0 for data-centre boards that stay up, P8 for those that drop."""
    fan: str
    """``N/A`` for passively cooled boards, else a percentage such as ``0%``."""
    bar1_mib: int
    """BAR1 aperture (``BAR1 Memory Usage / Total``); MIG devices get their memory slices' share."""
    reserved_mib: int
    """Framebuffer the driver keeps (``FB Memory Usage / Reserved``); free = total - reserved - used."""
    pcie_gen: int
    """PCIe generation, current = max (an idle link is not shown downtrained)."""
    pcie_width: int
    """PCIe lanes, current = max."""
    unverified: tuple[str, ...]
    """Which of the numbers above are estimates; ``()`` when all but ``load_temp_c`` (always one) were read."""

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.power_min_w <= self.power_limit_w:
            problems.append(f"power limits {self.power_min_w}..{self.power_limit_w} W")
        if not 0 < self.idle_power_w < self.power_limit_w:
            problems.append(f"idle power {self.idle_power_w} W")
        if not 0 < self.idle_temp_c < self.load_temp_c < 100:
            problems.append(f"temperatures {self.idle_temp_c}..{self.load_temp_c} C")
        if not _PSTATE.fullmatch(self.idle_pstate):
            problems.append(f"pstate {self.idle_pstate!r}")
        if not _FAN.fullmatch(self.fan):
            problems.append(f"fan {self.fan!r}")
        if self.bar1_mib <= 0 or self.reserved_mib <= 0:
            problems.append(f"BAR1 {self.bar1_mib} MiB, reserved {self.reserved_mib} MiB")
        if not 1 <= self.pcie_gen <= 6 or self.pcie_width not in _PCIE_WIDTHS:
            problems.append(f"PCIe gen{self.pcie_gen} x{self.pcie_width}")
        if problems:
            raise ValueError(f"implausible board facts: {'; '.join(problems)}")


@dataclass(frozen=True)
class GpuModel:
    """A board: identity and capacity as NVML reports them, plus its MIG table if it has one."""

    key: str
    board: str
    product_name: str
    memory_mib: int
    multiprocessors: int
    compute_capability: tuple[int, int]
    architecture: str
    pci_device_id: int
    brand: str
    sxm: bool
    """SXM boards sit on an NVLink/NVSwitch baseboard: multi-GPU node specs default to full NVLink."""
    facts: BoardFacts
    memory_slices: int = 0
    compute_slices: int = 0
    mig_profiles: tuple[MigProfile, ...] = ()
    balanced_layout: tuple[tuple[str, int], ...] = ()
    """mig-parted's ``all-balanced`` layout for this board."""
    unverified: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.facts.reserved_mib >= self.memory_mib:
            raise ValueError(f"{self.key}: reserved framebuffer {self.facts.reserved_mib} MiB is the whole board")

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def profile(self, name: str) -> MigProfile | None:
        for p in self.mig_profiles:
            if p.name == name:
                return p
        return None

    def profile_id(self, profile: MigProfile) -> int:
        """The GI profile ID ``nvidia-smi mig -lgip`` shows (NVML ``profileInfo.Id``), which NVIDIA's DRA
        driver puts in MIG device names. It depends on how many compute slices the board has (readings:
        A100/H100/H200 with 7; A30 and RTX PRO 6000 Blackwell with 4, the suffixed profiles from the
        latter)."""
        table = _PROFILE_IDS_FOUR_SLICES if self.compute_slices == 4 else _PROFILE_IDS_EIGHT_SLICES
        return table[profile.gi_profile]

    @property
    def pci_device_id_hex(self) -> str:
        return f"0x{self.pci_device_id:08X}"


_PROFILE_IDS_EIGHT_SLICES = {
    "7_SLICE": 0,
    "4_SLICE": 5,
    "3_SLICE": 9,
    "2_SLICE": 14,
    "1_SLICE_REV2": 15,
    "1_SLICE": 19,
    "1_SLICE_REV1": 20,
}
_PROFILE_IDS_FOUR_SLICES = {
    "4_SLICE": 0,
    "2_SLICE": 5,
    "2_SLICE_REV1": 6,
    "1_SLICE": 14,
    "1_SLICE_REV1": 21,
    "4_SLICE_GFX": 32,
    "2_SLICE_GFX": 35,
    "1_SLICE_GFX": 47,
    "2_SLICE_ALL_ME": 64,
    "1_SLICE_ALL_ME": 65,
    "2_SLICE_NO_ME": 66,
    "1_SLICE_NO_ME": 67,
}


def _p(
    name: str,
    gi: str,
    g: int,
    mem_slices: int,
    mib: int,
    sm: int,
    engines: tuple[int, int, int, int, int],
    inst: int,
    placements: tuple[int, ...],
) -> MigProfile:
    ce, dec, enc, jpg, ofa = engines
    return MigProfile(name, gi, g, mem_slices, mib, sm, ce, dec, enc, jpg, ofa, inst, placements)


_EIGHT_SINGLE = (0, 1, 2, 3, 4, 5, 6)
_EIGHT_DOUBLE = (0, 2, 4, 6)
_EIGHT_TWO_G = (0, 2, 4)
_EIGHT_THREE_G = (0, 4)


def _eight_slice_table(
    sizes: tuple[str, str, str, str, str, str, str],
    mib: tuple[int, int, int, int, int, int, int],
    sm: tuple[int, int, int, int, int, int, int],
    engines: tuple[tuple[int, int, int, int, int], ...],
) -> tuple[MigProfile, ...]:
    """The seven-profile table shared by A100-80GB, H100, H200, B200, GB200 and GB300 (8 memory slices, 7
    compute)."""
    one, one_me, one_double, two, three, four, seven = sizes
    return (
        _p(one, "1_SLICE", 1, 1, mib[0], sm[0], engines[0], 7, _EIGHT_SINGLE),
        _p(one_me, "1_SLICE_REV1", 1, 1, mib[1], sm[1], engines[1], 1, _EIGHT_SINGLE),
        _p(one_double, "1_SLICE_REV2", 1, 2, mib[2], sm[2], engines[2], 4, _EIGHT_DOUBLE),
        _p(two, "2_SLICE", 2, 2, mib[3], sm[3], engines[3], 3, _EIGHT_TWO_G),
        _p(three, "3_SLICE", 3, 4, mib[4], sm[4], engines[4], 2, _EIGHT_THREE_G),
        _p(four, "4_SLICE", 4, 4, mib[5], sm[5], engines[5], 1, (0,)),
        _p(seven, "7_SLICE", 7, 8, mib[6], sm[6], engines[6], 1, (0,)),
    )


_HOPPER_ENGINES = (
    (1, 1, 0, 1, 0),
    (1, 1, 0, 1, 1),
    (1, 1, 0, 1, 0),
    (2, 2, 0, 2, 0),
    (3, 3, 0, 3, 0),
    (4, 4, 0, 4, 0),
    (8, 7, 0, 7, 1),
)
_HOPPER_SM = (16, 16, 26, 32, 60, 64, 132)
_BLACKWELL_ENGINES = (
    (2, 1, 0, 1, 0),
    (2, 1, 0, 1, 1),
    (2, 1, 0, 1, 0),
    (4, 2, 0, 2, 0),
    (6, 3, 0, 3, 0),
    (8, 4, 0, 4, 0),
    (16, 7, 0, 7, 1),
)

_MODELS: tuple[GpuModel, ...] = (
    GpuModel(
        key="a100-40gb",
        board="A100 SXM4 40GB (HGX A100 baseboard)",
        product_name="NVIDIA A100-SXM4-40GB",
        memory_mib=40960,
        multiprocessors=108,
        compute_capability=(8, 0),
        architecture="Ampere",
        pci_device_id=0x20B010DE,
        brand="Nvidia",
        sxm=True,
        facts=BoardFacts(
            power_limit_w=400,
            power_min_w=100,
            idle_power_w=44.31,
            idle_temp_c=31,
            load_temp_c=70,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=65536,
            reserved_mib=423,
            pcie_gen=4,
            pcie_width=16,
            unverified=("reserved MiB inferred from older drivers' 40537 MiB total",),
        ),
        memory_slices=8,
        compute_slices=7,
        mig_profiles=(
            _p("1g.5gb", "1_SLICE", 1, 1, 4864, 14, (1, 0, 0, 0, 0), 7, _EIGHT_SINGLE),
            _p("1g.5gb+me", "1_SLICE_REV1", 1, 1, 4864, 14, (1, 1, 0, 1, 1), 1, _EIGHT_SINGLE),
            _p("1g.10gb", "1_SLICE_REV2", 1, 2, 9856, 14, (1, 1, 0, 0, 0), 4, _EIGHT_DOUBLE),
            _p("2g.10gb", "2_SLICE", 2, 2, 9856, 28, (2, 1, 0, 0, 0), 3, _EIGHT_TWO_G),
            _p("3g.20gb", "3_SLICE", 3, 4, 19968, 42, (3, 2, 0, 0, 0), 2, _EIGHT_THREE_G),
            _p("4g.20gb", "4_SLICE", 4, 4, 19968, 56, (4, 2, 0, 0, 0), 1, (0,)),
            _p("7g.40gb", "7_SLICE", 7, 8, 40192, 98, (7, 5, 0, 1, 1), 1, (0,)),
        ),
        balanced_layout=(("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)),
        unverified=("MIG memory and engines from go-nvml's A100 mock (reported to match real A100s)",),
    ),
    GpuModel(
        key="a100-80gb",
        board="A100 SXM4 80GB (HGX A100 baseboard)",
        product_name="NVIDIA A100-SXM4-80GB",
        memory_mib=81920,
        multiprocessors=108,
        compute_capability=(8, 0),
        architecture="Ampere",
        pci_device_id=0x20B210DE,
        brand="Nvidia",
        sxm=True,
        facts=BoardFacts(
            power_limit_w=400,
            power_min_w=100,
            idle_power_w=58.42,
            idle_temp_c=32,
            load_temp_c=70,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=131072,
            reserved_mib=669,
            pcie_gen=4,
            pcie_width=16,
            unverified=("reserved MiB inferred from older drivers' 81251 MiB",),
        ),
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_table(
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            (9728, 9728, 19968, 19968, 40192, 40192, 80896),
            (14, 14, 14, 28, 42, 56, 98),
            (
                (1, 0, 0, 0, 0),
                (1, 1, 0, 1, 1),
                (1, 1, 0, 0, 0),
                (2, 1, 0, 0, 0),
                (3, 2, 0, 0, 0),
                (4, 2, 0, 0, 0),
                (7, 5, 0, 1, 1),
            ),
        ),
        balanced_layout=(("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)),
        unverified=(
            "1g.20gb placements {0,2,4,6}:2 not seen in a reading",
            "MIG memory from a real lgip reading (9.50/19.50/39.25/79.00 GiB); the reference table lists go-nvml's "
            "9856/19968/40192/80384 MiB",
        ),
    ),
    GpuModel(
        key="a30",
        board="A30 24GB PCIe",
        product_name="NVIDIA A30",
        memory_mib=24576,
        multiprocessors=56,
        compute_capability=(8, 0),
        architecture="Ampere",
        pci_device_id=0x20B710DE,
        brand="Nvidia",
        sxm=False,
        facts=BoardFacts(
            power_limit_w=165,
            power_min_w=100,
            idle_power_w=32.14,
            idle_temp_c=29,
            load_temp_c=78,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=32768,
            reserved_mib=318,
            pcie_gen=4,
            pcie_width=16,
            unverified=("reserved MiB inferred from 24258 MiB",),
        ),
        memory_slices=4,
        compute_slices=4,
        mig_profiles=(
            _p("1g.6gb", "1_SLICE", 1, 1, 5952, 14, (1, 0, 0, 0, 0), 4, (0, 1, 2, 3)),
            _p("1g.6gb+me", "1_SLICE_REV1", 1, 1, 5952, 14, (1, 1, 0, 1, 1), 1, (0, 1, 2, 3)),
            _p("2g.12gb", "2_SLICE", 2, 2, 11968, 28, (2, 2, 0, 0, 0), 2, (0, 2)),
            _p("2g.12gb+me", "2_SLICE_REV1", 2, 2, 11968, 28, (2, 2, 0, 1, 1), 1, (0, 2)),
            _p("4g.24gb", "4_SLICE", 4, 4, 24000, 56, (4, 4, 0, 1, 1), 1, (0,)),
        ),
        balanced_layout=(("1g.6gb", 2), ("2g.12gb", 1)),
        unverified=(
            "MIG memory from a real lgip reading (5.81/11.69/23.44 GiB); "
            "the reference table lists 5836/11672/23344 MiB",
        ),
    ),
    GpuModel(
        key="h100-80gb",
        board="H100 SXM5 80GB HBM3 (HGX H100 baseboard)",
        product_name="NVIDIA H100 80GB HBM3",
        memory_mib=81559,
        multiprocessors=132,
        compute_capability=(9, 0),
        architecture="Hopper",
        pci_device_id=0x233010DE,
        brand="Nvidia",
        sxm=True,
        facts=BoardFacts(
            power_limit_w=700,
            power_min_w=200,
            idle_power_w=69.21,
            idle_temp_c=30,
            load_temp_c=70,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=131072,
            reserved_mib=328,
            pcie_gen=5,
            pcie_width=16,
            unverified=(),
        ),
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_table(
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            (9984, 9984, 20096, 20096, 40448, 40448, 81152),
            _HOPPER_SM,
            _HOPPER_ENGINES,
        ),
        balanced_layout=(("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)),
        unverified=("placements assumed equal to A100's 8-slice geometry (not in the lgip reading)",),
    ),
    GpuModel(
        key="h100-94gb",
        board="H100 NVL 94GB PCIe",
        product_name="NVIDIA H100 NVL",
        memory_mib=95830,
        multiprocessors=132,
        compute_capability=(9, 0),
        architecture="Hopper",
        pci_device_id=0x232110DE,
        brand="Nvidia",
        sxm=False,
        facts=BoardFacts(
            power_limit_w=400,
            power_min_w=200,
            idle_power_w=61.37,
            idle_temp_c=34,
            load_temp_c=78,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=131072,
            reserved_mib=360,
            pcie_gen=5,
            pcie_width=16,
            unverified=("idle power, temperature and reserved MiB estimated",),
        ),
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_table(
            ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
            (11776, 11776, 23808, 23808, 47616, 47616, 95232),
            _HOPPER_SM,
            _HOPPER_ENGINES,
        ),
        balanced_layout=(("1g.12gb", 1), ("2g.24gb", 1), ("3g.47gb", 1)),
        unverified=(
            "MIG memory sizes scaled from H100 80GB (names and counts from mig-parted)",
            "MIG SMs and engines assumed equal to H100 80GB",
        ),
    ),
    GpuModel(
        key="h200",
        board="H200 SXM 141GB (HGX H200 baseboard)",
        product_name="NVIDIA H200",
        memory_mib=143771,
        multiprocessors=132,
        compute_capability=(9, 0),
        architecture="Hopper",
        pci_device_id=0x233510DE,
        brand="Nvidia",
        sxm=True,
        facts=BoardFacts(
            power_limit_w=700,
            power_min_w=200,
            idle_power_w=76.18,
            idle_temp_c=31,
            load_temp_c=70,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=262144,
            reserved_mib=573,
            pcie_gen=5,
            pcie_width=16,
            unverified=("idle power, BAR1 and reserved MiB estimated",),
        ),
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_table(
            ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
            (16384, 16384, 33024, 33024, 71168, 71168, 143104),
            _HOPPER_SM,
            _HOPPER_ENGINES,
        ),
        balanced_layout=(("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)),
        unverified=(
            "placements and engines assumed equal to H100 80GB",
            "MIG memory and SMs from a real lgip reading (16.00/32.25/69.50/139.75 GiB; SMs 16/26/32/60/64/132); "
            "the reference lists go-nvml's 18432/35840/72704/144384 MiB and marks H100-like SMs unverified",
        ),
    ),
    GpuModel(
        key="b200",
        board="B200 SXM 180GB (HGX B200 baseboard)",
        product_name="NVIDIA B200",
        memory_mib=183359,
        multiprocessors=148,
        compute_capability=(10, 0),
        architecture="Blackwell",
        pci_device_id=0x290110DE,
        brand="Nvidia",
        sxm=True,
        facts=BoardFacts(
            power_limit_w=1000,
            power_min_w=200,
            idle_power_w=140.36,
            idle_temp_c=30,
            load_temp_c=70,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=262144,
            reserved_mib=700,
            pcie_gen=6,
            pcie_width=16,
            unverified=("idle power, BAR1, reserved MiB and PCIe gen estimated",),
        ),
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_table(
            ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
            (20992, 20992, 45312, 45312, 90624, 90624, 181248),
            (18, 18, 30, 36, 60, 72, 144),
            _BLACKWELL_ENGINES,
        ),
        balanced_layout=(("1g.23gb", 2), ("2g.45gb", 1), ("3g.90gb", 1)),
        unverified=(
            "3g.90gb, 4g.90gb and 7g.180gb memory and SMs estimated (only 1g/2g rows were read)",
            "decoder/JPEG/OFA counts assumed; placements assumed equal to H100",
        ),
    ),
    # GB200 / GB300: product name, memory, BAR1, reserved framebuffer, PCI device ID and power limits from real
    # ``nvidia-smi -q -x`` captures of NVL72 compute trays (NVIDIA/k8s-test-infra
    # tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-gb200.xml, qx-gb300.xml; driver 580.173.02);
    # compute capability 10.0 / 10.3 from developer.nvidia.com/cuda-gpus; MIG names from mig-parted.
    GpuModel(
        key="gb200",
        board="GB200 NVL72 compute tray GPU (Grace Blackwell superchip, 4 GPUs per tray)",
        product_name="NVIDIA GB200",
        memory_mib=189471,
        multiprocessors=148,
        compute_capability=(10, 0),
        architecture="Blackwell",
        pci_device_id=0x294110DE,
        brand="Nvidia",
        sxm=True,
        facts=BoardFacts(
            power_limit_w=1200,
            power_min_w=200,
            idle_power_w=152.47,
            idle_temp_c=30,
            load_temp_c=70,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=262144,
            reserved_mib=742,
            pcie_gen=6,
            pcie_width=16,
            unverified=("idle power, idle temperature and PCIe gen estimated",),
        ),
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_table(
            ("1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
            (21760, 21760, 46848, 46848, 93696, 93696, 187392),
            (18, 18, 30, 36, 60, 72, 144),
            _BLACKWELL_ENGINES,
        ),
        balanced_layout=(("1g.23gb", 2), ("2g.47gb", 1), ("3g.93gb", 1)),
        unverified=(
            "multiprocessors (148, as B200) not read on a GB200",
            "MIG memory sizes scaled from B200 (names from mig-parted for 0x294110DE); SMs, engines and "
            "placements assumed equal to B200",
            "1g.23gb+me and 1g.47gb by analogy with B200 (mig-parted lists 1g.23gb, 2g.47gb, 3g.93gb, 4g.93gb, "
            "7g.186gb for GB200)",
        ),
    ),
    GpuModel(
        key="gb300",
        board="GB300 NVL72 compute tray GPU (Grace Blackwell Ultra, 4 GPUs per tray)",
        product_name="NVIDIA GB300",
        memory_mib=284208,
        multiprocessors=160,
        compute_capability=(10, 3),
        architecture="Blackwell",
        pci_device_id=0x31C210DE,
        brand="Nvidia",
        sxm=True,
        facts=BoardFacts(
            power_limit_w=1400,
            power_min_w=200,
            idle_power_w=168.93,
            idle_temp_c=30,
            load_temp_c=70,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=524288,
            reserved_mib=947,
            pcie_gen=6,
            pcie_width=16,
            unverified=("idle power, idle temperature and PCIe gen estimated",),
        ),
        memory_slices=8,
        compute_slices=7,
        mig_profiles=_eight_slice_table(
            ("1g.35gb", "1g.35gb+me", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb"),
            (32768, 32768, 70144, 70144, 140288, 140288, 280832),
            (20, 20, 32, 40, 64, 80, 156),
            _BLACKWELL_ENGINES,
        ),
        balanced_layout=(("1g.35gb", 2), ("2g.70gb", 1), ("3g.139gb", 1)),
        unverified=(
            "multiprocessors (160) from a third-party source only",
            "MIG memory sizes scaled from B200 (names and counts from mig-parted for 0x31C210DE); SMs scaled "
            "from B200 by 160/148; engines and placements assumed equal to B200",
            "1g.35gb+me by analogy with B200 (mig-parted lists no +me profile for GB300)",
        ),
    ),
    # RTX PRO 6000 Blackwell Server Edition: the board NVIDIA's MIG guide lists with the suffixed profiles
    # (``+gfx``, ``+me.all``, ``-me``; supported-mig-profiles.html, driver 580). Every MIG number below is a
    # real ``nvidia-smi mig -lgip`` / ``-lgipp`` reading of this board (profile IDs, SMs, engines, GiB,
    # placements on its 12-unit grid); 1g.24gb's 24192 MiB was read by CUDA inside the instance. Product
    # name, PCI device ID 0x2BB510DE, 97887 MiB and the 600 W limit from real ``nvidia-smi`` queries;
    # compute capability 12.0 from the MIG guide; all-balanced from mig-parted's config for 0x2BB510DE.
    GpuModel(
        key="rtx-pro-6000",
        board="RTX PRO 6000 Blackwell Server Edition 96GB PCIe",
        product_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        memory_mib=97887,
        multiprocessors=188,
        compute_capability=(12, 0),
        architecture="Blackwell",
        pci_device_id=0x2BB510DE,
        brand="Nvidia",
        sxm=False,
        facts=BoardFacts(
            power_limit_w=600,
            power_min_w=150,
            idle_power_w=35.0,
            idle_temp_c=30,
            load_temp_c=78,
            idle_pstate="P8",
            fan="N/A",
            bar1_mib=131072,
            reserved_mib=600,
            pcie_gen=5,
            pcie_width=16,
            unverified=("minimum power limit, idle power, idle temperature, BAR1 and reserved MiB estimated",),
        ),
        memory_slices=12,
        compute_slices=4,
        mig_profiles=(
            _p("1g.24gb", "1_SLICE", 1, 3, 24192, 46, (1, 1, 1, 1, 0), 4, (0, 3, 6, 9)),
            _p("1g.24gb+me", "1_SLICE_REV1", 1, 3, 24192, 46, (1, 1, 1, 1, 1), 1, (0, 3, 6, 9)),
            _p("1g.24gb+gfx", "1_SLICE_GFX", 1, 3, 24192, 46, (1, 1, 1, 1, 0), 4, (0, 3, 6, 9)),
            _p("1g.24gb+me.all", "1_SLICE_ALL_ME", 1, 3, 24192, 46, (1, 4, 4, 4, 1), 1, (0, 3, 6, 9)),
            _p("1g.24gb-me", "1_SLICE_NO_ME", 1, 3, 24192, 46, (1, 0, 0, 0, 0), 4, (0, 3, 6, 9)),
            _p("2g.48gb", "2_SLICE", 2, 6, 48512, 94, (2, 2, 2, 2, 0), 2, (0, 6)),
            _p("2g.48gb+gfx", "2_SLICE_GFX", 2, 6, 48512, 94, (2, 2, 2, 2, 0), 2, (0, 6)),
            _p("2g.48gb+me.all", "2_SLICE_ALL_ME", 2, 6, 48512, 94, (2, 4, 4, 4, 1), 1, (0, 6)),
            _p("2g.48gb-me", "2_SLICE_NO_ME", 2, 6, 48512, 94, (2, 0, 0, 0, 0), 2, (0, 6)),
            _p("4g.96gb", "4_SLICE", 4, 12, 97408, 188, (4, 4, 4, 4, 1), 1, (0,)),
            _p("4g.96gb+gfx", "4_SLICE_GFX", 4, 12, 97408, 188, (4, 4, 4, 4, 1), 1, (0,)),
        ),
        balanced_layout=(("1g.24gb", 2), ("2g.48gb", 1)),
        unverified=(
            "2g.48gb and 4g.96gb memory (48512 / 97408 MiB) from lgip's 47.38 / 95.12 GiB, taken as 47.375 / "
            "95.125 GiB as 1g.24gb's 23.62 GiB is 23.625",
        ),
    ),
    # VR200 (Rubin): every number NVIDIA publishes for it comes from one real ``nvidia-smi -q -x`` capture of
    # a 4-GPU Vera Rubin tray on driver 615.23 / CUDA 13.4 (NVIDIA/k8s-test-infra
    # tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-vr200.xml, read through its nvml-mock profile
    # deployments/nvml-mock/helm/nvml-mock/profiles/vr200.yaml @ bb9c07b): product name (the driver's
    # generic one for a board its table lacks), memory, reserved framebuffer, BAR1, PCI device ID, power
    # ceiling and floor, idle power, temperature and P-state, PCIe gen6 x16. The capture has MIG disabled
    # and lists no profiles, so the board has no MIG table here.
    GpuModel(
        key="vr200",
        board="VR200 compute tray GPU (Vera Rubin superchip, 4 GPUs per tray)",
        product_name="NVIDIA Graphics Device",
        memory_mib=286524,
        multiprocessors=224,
        compute_capability=(10, 7),
        architecture="Rubin",
        pci_device_id=0x307F10DE,
        brand="Nvidia",
        sxm=True,
        facts=BoardFacts(
            power_limit_w=2300,
            power_min_w=200,
            idle_power_w=400.0,
            idle_temp_c=30,
            load_temp_c=70,
            idle_pstate="P5",
            fan="N/A",
            bar1_mib=524288,
            reserved_mib=1277,
            pcie_gen=6,
            pcie_width=16,
            unverified=(),
        ),
        unverified=(
            "multiprocessors (224) not in the capture nor any NVIDIA source found; a third-party figure",
            "compute capability 10.7 from the CUDA 13.4 developer preview (sm_107), not from the capture; GFD "
            "maps compute capability major 10 to the blackwell family and only 13 to rubin",
            "MIG: the capture reports it disabled and no profiles, so none are modelled",
        ),
    ),
    GpuModel(
        key="t4",
        board="Tesla T4 16GB PCIe",
        product_name="Tesla T4",
        memory_mib=15360,
        multiprocessors=40,
        compute_capability=(7, 5),
        architecture="Turing",
        pci_device_id=0x1EB810DE,
        brand="Tesla",
        sxm=False,
        facts=BoardFacts(
            power_limit_w=70,
            power_min_w=60,
            idle_power_w=9.42,
            idle_temp_c=35,
            load_temp_c=78,
            idle_pstate="P8",
            fan="N/A",
            bar1_mib=256,
            reserved_mib=251,
            pcie_gen=3,
            pcie_width=16,
            unverified=("reserved MiB inferred from 15109 MiB",),
        ),
        unverified=("memory is 15360 MiB on drivers 535+, 15109 MiB on 450-470",),
    ),
    GpuModel(
        key="l4",
        board="L4 24GB PCIe",
        product_name="NVIDIA L4",
        memory_mib=23034,
        multiprocessors=58,
        compute_capability=(8, 9),
        architecture="Ada Lovelace",
        pci_device_id=0x27B810DE,
        brand="Nvidia",
        sxm=False,
        facts=BoardFacts(
            power_limit_w=72,
            power_min_w=40,
            idle_power_w=11.27,
            idle_temp_c=29,
            load_temp_c=78,
            idle_pstate="P8",
            fan="N/A",
            bar1_mib=32768,
            reserved_mib=434,
            pcie_gen=4,
            pcie_width=16,
            unverified=("reserved MiB estimated",),
        ),
    ),
    GpuModel(
        key="l40s",
        board="L40S 48GB PCIe",
        product_name="NVIDIA L40S",
        memory_mib=46068,
        multiprocessors=142,
        compute_capability=(8, 9),
        architecture="Ada Lovelace",
        pci_device_id=0x26B910DE,
        brand="Nvidia",
        sxm=False,
        facts=BoardFacts(
            power_limit_w=350,
            power_min_w=100,
            idle_power_w=33.46,
            idle_temp_c=27,
            load_temp_c=78,
            idle_pstate="P8",
            fan="N/A",
            bar1_mib=65536,
            reserved_mib=565,
            pcie_gen=4,
            pcie_width=16,
            unverified=("idle power, fan and reserved MiB estimated",),
        ),
    ),
    GpuModel(
        key="a10",
        board="A10 24GB PCIe",
        product_name="NVIDIA A10",
        memory_mib=23028,
        multiprocessors=72,
        compute_capability=(8, 6),
        architecture="Ampere",
        pci_device_id=0x223610DE,
        brand="Nvidia",
        sxm=False,
        facts=BoardFacts(
            power_limit_w=150,
            power_min_w=100,
            idle_power_w=9.31,
            idle_temp_c=30,
            load_temp_c=78,
            idle_pstate="P8",
            fan="0%",
            bar1_mib=32768,
            reserved_mib=297,
            pcie_gen=4,
            pcie_width=16,
            unverified=("reserved MiB inferred from 22731 MiB",),
        ),
        unverified=("PCI device ID from a single MLPerf system table",),
    ),
    GpuModel(
        key="v100-32gb",
        board="Tesla V100 SXM2 32GB",
        product_name="Tesla V100-SXM2-32GB",
        memory_mib=32768,
        multiprocessors=80,
        compute_capability=(7, 0),
        architecture="Volta",
        pci_device_id=0x1DB510DE,
        brand="Tesla",
        sxm=True,
        facts=BoardFacts(
            power_limit_w=300,
            power_min_w=150,
            idle_power_w=43.07,
            idle_temp_c=33,
            load_temp_c=70,
            idle_pstate="P0",
            fan="N/A",
            bar1_mib=32768,
            reserved_mib=258,
            pcie_gen=3,
            pcie_width=16,
            unverified=("idle power and reserved MiB estimated",),
        ),
        unverified=("memory is 32768 MiB on current drivers, 32480 MiB on driver 418",),
    ),
)

CATALOG: MappingProxyType[str, GpuModel] = MappingProxyType({m.key: m for m in _MODELS})


def lookup_model(key: str) -> GpuModel | None:
    """Find a model by key, case-insensitively."""
    return CATALOG.get(key.strip().lower())
