"""The catalog's numbers are consistent with how real hardware names and places MIG profiles."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fakegpu.sharing.catalog import CATALOG, BoardFacts, GpuModel, lookup_model
from fakegpu.sharing.labels import gpu_family, sanitize_product
from fakegpu.sharing.mig_geometry import max_instances
from fakegpu.sharing.mig_naming import profile_memory_gb, profile_name, resource_suffix

REQUIRED = [
    "a100-40gb",
    "a100-80gb",
    "a30",
    "h100-80gb",
    "h100-94gb",
    "h200",
    "b200",
    "gb200",
    "gb300",
    "t4",
    "l4",
    "l40s",
    "a10",
    "v100-32gb",
]


def test_required_models_present():
    assert set(REQUIRED) <= set(CATALOG)


@pytest.mark.parametrize(
    ("key", "product", "label", "memory"),
    [
        ("a100-40gb", "NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", 40960),
        ("h100-80gb", "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", 81559),
        ("t4", "Tesla T4", "Tesla-T4", 15360),
        ("b200", "NVIDIA B200", "NVIDIA-B200", 183359),
        ("gb200", "NVIDIA GB200", "NVIDIA-GB200", 189471),
        ("gb300", "NVIDIA GB300", "NVIDIA-GB300", 284208),
        (
            "rtx-pro-6000",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
            97887,
        ),
    ],
)
def test_board_identity(key, product, label, memory):
    model = CATALOG[key]
    assert model.product_name == product
    assert sanitize_product(model.product_name) == label
    assert model.memory_mib == memory


@pytest.mark.parametrize("key", sorted(CATALOG))
def test_every_field_is_plausible(key):
    m = CATALOG[key]
    assert m.board and m.multiprocessors > 0 and m.memory_mib > 1000
    assert m.pci_device_id & 0xFFFF == 0x10DE, "NVIDIA's PCI vendor ID is the low half"
    assert gpu_family(m.compute_capability) != "undefined"
    assert lookup_model(key.upper()) is m


@pytest.mark.parametrize(("key", "profile"), [(k, p.name) for k, m in CATALOG.items() for p in m.mig_profiles])
def test_profile_names_follow_go_nvlib_rounding(key, profile):
    model = CATALOG[key]
    p = model.profile(profile)
    assert p is not None
    suffix = profile[profile.index("gb") + 2 :]
    assert profile_name(p.compute_slices, p.memory_mib, model.memory_mib, suffix) == profile


@pytest.mark.parametrize(("key", "profile"), [(k, p.name) for k, m in CATALOG.items() for p in m.mig_profiles])
def test_max_instances_are_placeable(key, profile):
    """The table's instance limit is reachable with its own placements, and placements fit the board."""
    model = CATALOG[key]
    p = model.profile(profile)
    assert p is not None
    assert max_instances(model, p) == p.max_instances
    assert all(s + p.memory_slices <= model.memory_slices for s in p.placements)
    assert p.compute_slices <= model.compute_slices


def test_rounding_is_half_away_from_zero():
    # 2 of 8 slices of a 94 GiB card is 23.5 GB -> 24, and 1 of 8 of a 180 GiB card is 22.5 -> 23.
    assert profile_memory_gb(23808, 95830) == 24
    assert profile_memory_gb(20992, 183359) == 23
    assert profile_memory_gb(4864, 40960) == 5


def test_resource_suffix():
    assert resource_suffix("1g.10gb+me") == "1g.10gb.me"
    assert resource_suffix("1g.10gb+me.all") == "1g.10gb.me.all"
    assert resource_suffix("1g.10gb-me") == "1g.10gb-me"


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ((7, 0), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 9), "ada-lovelace"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((6, 1), "pascal"),
        ((4, 0), "undefined"),
    ],
)
def test_gpu_family(cc, family):
    assert gpu_family(cc) == family


def test_only_a100_a30_hopper_blackwell_are_mig_capable():
    capable = {k for k, m in CATALOG.items() if m.mig_capable}
    assert capable == {
        "a100-40gb",
        "a100-80gb",
        "a30",
        "h100-80gb",
        "h100-94gb",
        "h200",
        "b200",
        "gb200",
        "gb300",
        "rtx-pro-6000",
    }


@pytest.mark.parametrize(
    ("key", "profile", "smi_id"),
    [
        ("h100-80gb", "1g.10gb", 19),
        ("h100-80gb", "1g.10gb+me", 20),
        ("h100-80gb", "1g.20gb", 15),
        ("h100-80gb", "2g.20gb", 14),
        ("h100-80gb", "3g.40gb", 9),
        ("h100-80gb", "4g.40gb", 5),
        ("h100-80gb", "7g.80gb", 0),
        ("a30", "1g.6gb", 14),
        ("a30", "1g.6gb+me", 21),
        ("a30", "2g.12gb", 5),
        ("a30", "2g.12gb+me", 6),
        ("a30", "4g.24gb", 0),
        ("h200", "1g.35gb", 15),
        # A real `nvidia-smi mig -lgip` of an RTX PRO 6000 Blackwell Server Edition (driver 580).
        ("rtx-pro-6000", "1g.24gb", 14),
        ("rtx-pro-6000", "1g.24gb+me", 21),
        ("rtx-pro-6000", "1g.24gb+gfx", 47),
        ("rtx-pro-6000", "1g.24gb+me.all", 65),
        ("rtx-pro-6000", "1g.24gb-me", 67),
        ("rtx-pro-6000", "2g.48gb", 5),
        ("rtx-pro-6000", "2g.48gb+gfx", 35),
        ("rtx-pro-6000", "2g.48gb+me.all", 64),
        ("rtx-pro-6000", "2g.48gb-me", 66),
        ("rtx-pro-6000", "4g.96gb", 0),
        ("rtx-pro-6000", "4g.96gb+gfx", 32),
    ],
)
def test_profile_ids_as_nvidia_smi_lgip_shows_them(key, profile, smi_id):
    model = CATALOG[key]
    p = model.profile(profile)
    assert p is not None
    assert model.profile_id(p) == smi_id


def test_every_profile_has_an_id():
    for model in CATALOG.values():
        ids = [model.profile_id(p) for p in model.mig_profiles]
        assert len(set(ids)) == len(ids)


def test_board_facts_have_no_defaults():
    """A board added without one of its running figures must not import: no field may fall back."""
    missing = [f.name for f in dataclasses.fields(BoardFacts) if f.default is not dataclasses.MISSING]
    assert missing == []
    assert next(f for f in dataclasses.fields(GpuModel) if f.name == "facts").default is dataclasses.MISSING
    with pytest.raises(TypeError, match="facts"):
        GpuModel(  # type: ignore[call-arg]
            key="x", board="x", product_name="x", memory_mib=1, multiprocessors=1, compute_capability=(9, 0),
            architecture="x", pci_device_id=0x10DE, brand="Nvidia", sxm=False,
        )  # fmt: skip


@pytest.mark.parametrize("key", sorted(CATALOG))
def test_every_board_carries_plausible_running_figures(key):
    model = CATALOG[key]
    f = model.facts
    assert 0 < f.power_min_w <= f.power_limit_w and 0 < f.idle_power_w < f.power_limit_w
    assert 0 < f.idle_temp_c < f.load_temp_c < 100
    assert f.load_temp_c == (70 if model.sxm else 78), "the loaded temperature is the estimate by cooling"
    assert 0 < f.reserved_mib < model.memory_mib and f.bar1_mib > 0
    assert f.pcie_width == 16 and 3 <= f.pcie_gen <= 6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"idle_power_w": 800.0}, "idle power 800.0 W"),
        ({"power_min_w": 900}, "power limits 900..700 W"),
        ({"idle_temp_c": 75}, "temperatures 75..70 C"),
        ({"idle_pstate": "P16"}, "pstate 'P16'"),
        ({"fan": "fast"}, "fan 'fast'"),
        ({"reserved_mib": 0}, "BAR1 131072 MiB, reserved 0 MiB"),
        ({"pcie_width": 12}, "PCIe gen5 x12"),
    ],
)
def test_implausible_board_facts_do_not_import(change, message):
    with pytest.raises(ValueError, match=f"^implausible board facts: {re.escape(message)}$"):
        dataclasses.replace(CATALOG["h100-80gb"].facts, **change)


def test_reserved_framebuffer_must_leave_memory():
    with pytest.raises(ValueError, match="t4: reserved framebuffer 251 MiB is the whole board"):
        dataclasses.replace(CATALOG["t4"], memory_mib=251)


def test_readings_win_over_the_old_dcgm_approximations():
    """The A10 read 9 W idle at P8 on driver 570 (DCGM's model used to say 20 W)."""
    a10 = CATALOG["a10"].facts
    assert (a10.idle_power_w, a10.idle_temp_c, a10.idle_pstate, a10.fan) == (9.31, 30, "P8", "0%")
    assert CATALOG["h100-80gb"].facts.unverified == ()


@pytest.mark.parametrize(
    ("key", "pci", "cc", "power", "bar1", "reserved", "top"),
    [
        ("gb200", 0x294110DE, (10, 0), 1200, 262144, 742, "7g.186gb"),
        ("gb300", 0x31C210DE, (10, 3), 1400, 524288, 947, "7g.278gb"),
    ],
)
def test_grace_blackwell_boards_as_real_nvl72_trays_report_them(key, pci, cc, power, bar1, reserved, top):
    """Numbers from real ``nvidia-smi -q -x`` captures of NVL72 compute trays (NVIDIA/k8s-test-infra
    tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-gb200.xml, qx-gb300.xml): PCI device ID, power
    limit (default = max, min 200 W), BAR1 and reserved framebuffer; compute capability from
    developer.nvidia.com/cuda-gpus; the full-GPU MIG profile from mig-parted."""
    model = CATALOG[key]
    assert (model.pci_device_id, model.compute_capability, model.sxm) == (pci, cc, True)
    assert (model.facts.power_limit_w, model.facts.power_min_w) == (power, 200)
    assert (model.facts.bar1_mib, model.facts.reserved_mib) == (bar1, reserved)
    assert gpu_family(model.compute_capability) == "blackwell"
    assert model.mig_profiles[-1].name == top
    assert model.unverified, "estimated numbers (SMs, MIG memory) must be marked"


def test_gb300_single_slice_profile_fits_seven_times():
    """mig-parted: GB300's ``1g.35gb`` is a single-slice profile x7 (on H200 the same name is x4)."""
    gb300 = CATALOG["gb300"]
    p = gb300.profile("1g.35gb")
    assert p is not None and (p.memory_slices, p.max_instances) == (1, 7)
    assert [q.name for q in gb300.mig_profiles if q.name.startswith("1g.70gb")] == ["1g.70gb"]
