"""The catalog's numbers are consistent with how real hardware names and places MIG profiles."""

from __future__ import annotations

import pytest

from fakegpu.sharing.catalog import CATALOG, lookup_model
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
    assert capable == {"a100-40gb", "a100-80gb", "a30", "h100-80gb", "h100-94gb", "h200", "b200"}


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
