"""GetPreferredAllocation hints, pinned as concrete GPU indices / replica picks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import fakegpu.fakeplugin.preferred_allocation as pa
from fakegpu.fakeplugin.allocation_error import AllocationError
from fakegpu.fakeplugin.preferred_allocation import preferred_allocation
from fakegpu.sharing.inventory import Inventory, Resource
from tests.inventory_builders import inventory, time_slicing

H100_NVLINK_GROUPS = {"nvlink": [[0, 1, 2, 3], [4, 5, 6, 7]], "gpus": [{"model": "h100-80gb", "count": 8}]}


def only(inv: Inventory) -> Resource:
    assert len(inv.resources) == 1
    return inv.resources[0]


def ids(res: Resource, *index_ids: str | int) -> list[str]:
    """Device IDs by NVIDIA index form (``3``, ``0:1``); replicas as ``"<index>::<n>"``."""
    by_key: dict[str, str] = {}
    for d in res.devices:
        key = d.index_id if d.replica is None else f"{d.index_id}::{d.replica}"
        by_key[key] = d.id
    return [by_key[str(i)] for i in index_ids]


def keys(res: Resource, got: list[str]) -> list[str]:
    """The reverse of ``ids``: readable assertions and readable failures."""
    names = {}
    for d in res.devices:
        names[d.id] = d.index_id if d.replica is None else f"{d.index_id}::{d.replica}"
    return [names[i] for i in got]


def ask(inv: Inventory, available: list[str], size: int, must: list[str] | None = None, policy: str = "distributed"):
    return preferred_allocation(only(inv), inv.node, available, must or [], size, policy)


@pytest.fixture
def h100(tmp_path: Path) -> Inventory:
    return inventory(tmp_path, node_spec=H100_NVLINK_GROUPS)


@pytest.fixture
def sliced(tmp_path: Path) -> Inventory:
    """2 H100 x 4 time-slicing replicas."""
    return inventory(tmp_path, "2xh100-80gb", config=time_slicing(4))


@pytest.fixture
def mig(tmp_path: Path) -> Inventory:
    return inventory(tmp_path, "2xh100-80gb", layout="all-1g.10gb", cli={"mig_strategy": "mixed"})


# --- aligned (whole GPUs) ------------------------------------------------------------------------------------


def test_nvlink_four_of_all_is_first_group(h100: Inventory) -> None:
    res = only(h100)
    got = ask(h100, [d.id for d in res.devices], 4)
    assert keys(res, got) == ["0", "1", "2", "3"]


def test_nvlink_prefers_whole_group_over_lowest_indices(h100: Inventory) -> None:
    res = only(h100)
    got = ask(h100, ids(res, 0, 1, 4, 5, 6, 7), 4)
    assert keys(res, got) == ["4", "5", "6", "7"]


def test_nvlink_gpu1_unavailable_three(h100: Inventory) -> None:
    res = only(h100)
    got = ask(h100, ids(res, 0, 2, 3, 4, 5, 6, 7), 3)
    assert keys(res, got) == ["0", "2", "3"]


def test_nvlink_gpu1_unavailable_four_moves_to_intact_group(h100: Inventory) -> None:
    res = only(h100)
    got = ask(h100, ids(res, 0, 2, 3, 4, 5, 6, 7), 4)
    assert keys(res, got) == ["4", "5", "6", "7"]


def test_nvlink_must_include_pulls_its_group(h100: Inventory) -> None:
    res = only(h100)
    got = ask(h100, [d.id for d in res.devices], 2, must=ids(res, 5))
    assert keys(res, got) == ["5", "4"]


def test_must_include_first_then_sorted_by_index(h100: Inventory) -> None:
    res = only(h100)
    available = list(reversed([d.id for d in res.devices]))
    got = ask(h100, available, 3, must=ids(res, 7))
    assert keys(res, got) == ["7", "4", "5"]


def test_whole_gpus_ignore_policy(h100: Inventory) -> None:
    res = only(h100)
    got = ask(h100, ids(res, 0, 1, 4, 5, 6, 7), 2, must=ids(res, 6), policy="packed")
    assert keys(res, got) == ["6", "4"]


def test_pcie_same_numa(tmp_path: Path) -> None:
    inv = inventory(tmp_path, node_spec={"numaNodes": 2, "nvlink": "none", "gpus": [{"model": "l4", "count": 4}]})
    res = only(inv)
    assert [d.numa for d in res.devices] == [0, 0, 1, 1]
    got = ask(inv, [d.id for d in res.devices], 2, must=ids(res, 3))
    assert keys(res, got) == ["3", "2"]


def test_nvlink_outweighs_numa(tmp_path: Path) -> None:
    spec: dict[str, Any] = {
        "numaNodes": 2,
        "nvlink": [[0, 2], [1, 3]],
        "gpus": [{"model": "h100-80gb", "count": 4}],
    }
    inv = inventory(tmp_path, node_spec=spec)
    res = only(inv)
    got = ask(inv, [d.id for d in res.devices], 2, must=ids(res, 0))
    assert keys(res, got) == ["0", "2"]  # GPU 1 shares NUMA 0 with GPU 0, but GPU 2 has the NVLink


def test_greedy_fallback_follows_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {
        "numaNodes": 2,  # GPUs 0-7 on NUMA 0, 8-15 on NUMA 1
        "nvlink": [list(range(0, 16, 2)), list(range(1, 16, 2))],
        "gpus": [{"model": "h100-80gb", "count": 16}],
    }
    inv = inventory(tmp_path, node_spec=spec)
    res = only(inv)

    def no_exhaustive(*_: object) -> None:
        raise AssertionError("C(16, 8) = 12870 should take the greedy path")

    monkeypatch.setattr(pa, "_best_combination", no_exhaustive)
    got = ask(inv, [d.id for d in res.devices], 8)
    assert keys(res, got) == [str(i) for i in range(0, 16, 2)]
    got = ask(inv, [d.id for d in res.devices], 8, must=ids(res, 3))
    assert keys(res, got) == ["3", *[str(i) for i in (1, 5, 7, 9, 11, 13, 15)]]
    # Greedy takes 11, 13, 15 (NVLink + NUMA 1) before 1, 3, 5, 7, but the answer is in index order.
    got = ask(inv, [d.id for d in res.devices], 8, must=ids(res, 9))
    assert keys(res, got) == ["9", *[str(i) for i in (1, 3, 5, 7, 11, 13, 15)]]


# --- shared (replicas, MIG) ----------------------------------------------------------------------------------


def test_replicas_distributed_spreads(sliced: Inventory) -> None:
    res = only(sliced)
    got = ask(sliced, [d.id for d in res.devices], 2)
    assert keys(res, got) == ["0::0", "1::0"]


def test_replicas_packed_fills_one_gpu(sliced: Inventory) -> None:
    res = only(sliced)
    got = ask(sliced, [d.id for d in res.devices], 2, policy="packed")
    assert keys(res, got) == ["0::0", "0::1"]


def test_replicas_distributed_avoids_busy_gpu(sliced: Inventory) -> None:
    res = only(sliced)
    available = ids(res, "0::3", "1::0", "1::1", "1::2", "1::3")
    assert keys(res, ask(sliced, available, 1)) == ["1::0"]
    assert keys(res, ask(sliced, available, 2)) == ["1::0", "1::1"]


def test_replicas_packed_prefers_busy_gpu(sliced: Inventory) -> None:
    res = only(sliced)
    available = ids(res, "0::3", "1::0", "1::1", "1::2", "1::3")
    assert keys(res, ask(sliced, available, 2, policy="packed")) == ["0::3", "1::0"]


def test_replicas_must_include_counts_as_picked(sliced: Inventory) -> None:
    res = only(sliced)
    got = ask(sliced, [d.id for d in res.devices], 2, must=ids(res, "0::2"))
    assert keys(res, got) == ["0::2", "1::0"]
    got = ask(sliced, [d.id for d in res.devices], 2, must=ids(res, "1::2"), policy="packed")
    assert keys(res, got) == ["1::2", "1::0"]


def test_distributed_tie_goes_to_gpu_least_picked_in_this_call(sliced: Inventory) -> None:
    """Follows NVIDIA/k8s-device-plugin internal/rm/allocate.go @ v0.20.0 (#1788, the case its PR describes):
    one replica of GPU 1 is held by another pod and a pod asks for two. GPU 0 goes first (0 allocated
    against 1); then both have one allocated, and the tie goes to the GPU not yet picked in this call,
    GPU 1, instead of a second replica of GPU 0."""
    res = only(sliced)
    available = [d.id for d in res.devices if keys(res, [d.id]) != ["1::0"]]
    assert keys(res, ask(sliced, available, 2)) == ["0::0", "1::1"]
    # Four GPUs' worth of ties: a pod asking for as many replicas as there are GPUs gets one of each.
    assert keys(res, ask(sliced, available, 4)) == ["0::0", "1::1", "0::1", "1::2"]


def test_distributed_ties_rotate_over_four_gpus(tmp_path: Path) -> None:
    """Follows NVIDIA/k8s-device-plugin internal/rm/allocate.go @ v0.20.0: distributed ranks GPUs by their
    allocated count, which each pick raises, so six replicas over four idle GPUs take one from each before
    a second from any (the ties among still-idle GPUs go to the resource's order)."""
    inv = inventory(tmp_path, "4xh100-80gb", config=time_slicing(4))
    res = only(inv)
    got = keys(res, ask(inv, [d.id for d in res.devices], 6))
    assert got == ["0::0", "1::0", "2::0", "3::0", "0::1", "1::1"]


def test_packed_ties_go_to_least_picked_then_order(tmp_path: Path) -> None:
    """Follows NVIDIA/k8s-device-plugin internal/rm/allocate.go @ v0.20.0: packed fills the most-allocated
    GPU; once it runs out of replicas the next pick is a tie among the others (none picked), broken by
    the resource's order where NVIDIA's is Go map order."""
    inv = inventory(tmp_path, "3xh100-80gb", config=time_slicing(2))
    res = only(inv)
    available = [d.id for d in res.devices if keys(res, [d.id]) != ["2::0"]]
    assert keys(res, ask(inv, available, 3, policy="packed")) == ["2::1", "0::0", "0::1"]


def test_must_include_is_not_a_pick_but_breaks_remaining_ties(sliced: Inventory) -> None:
    """Follows NVIDIA/k8s-device-plugin internal/rm/allocate.go @ v0.20.0: a must-include replica counts
    as allocated, not as picked in this call. Here both GPUs have one allocated (GPU 0 the must-include
    one, GPU 1 another pod's) and neither was picked: v0.20.0 chooses by Go map order; fakegpu takes the
    GPU without must-include devices, GPU 1, as NVIDIA's later main (which seeds the count) does."""
    res = only(sliced)
    available = [d.id for d in res.devices if keys(res, [d.id]) != ["1::0"]]
    assert keys(res, ask(sliced, available, 2, must=ids(res, "0::0"))) == ["0::0", "1::1"]


def test_mig_distributed(mig: Inventory) -> None:
    """Plain MIG devices are groups of one (NVIDIA groups by the ID without ``::n``): in order."""
    res = only(mig)
    assert res.name == "nvidia.com/mig-1g.10gb"
    got = ask(mig, [d.id for d in res.devices], 3)
    assert keys(res, got) == ["0:0", "0:1", "0:2"]


def test_time_sliced_mig_groups_by_mig_device(tmp_path: Path) -> None:
    inv = inventory(
        tmp_path,
        "1xh100-80gb",
        layout="all-3g.40gb",
        cli={"mig_strategy": "mixed"},
        config=time_slicing(2, "nvidia.com/mig-3g.40gb"),
    )
    res = only(inv)
    every = [d.id for d in res.devices]
    assert keys(res, ask(inv, every, 2)) == ["0:0::0", "0:1::0"]
    assert keys(res, ask(inv, every, 2, policy="packed")) == ["0:0::0", "0:0::1"]
    # With a replica of 0:1 already taken, packed fills 0:1 and distributed moves to 0:0.
    rest = [i for i in every if keys(res, [i]) != ["0:1::0"]]
    assert keys(res, ask(inv, rest, 1, policy="packed")) == ["0:1::1"]
    assert keys(res, ask(inv, rest, 1)) == ["0:0::0"]


def test_mig_packed(mig: Inventory) -> None:
    res = only(mig)
    got = ask(mig, [d.id for d in res.devices], 3, policy="packed")
    assert keys(res, got) == ["0:0", "0:1", "0:2"]


def test_mig_packed_does_not_group_plain_mig_devices_by_gpu(mig: Inventory) -> None:
    res = only(mig)
    available = [d.id for d in res.devices if d.index_id != "1:0"]
    got = ask(mig, available, 2, policy="packed")
    assert keys(res, got) == ["0:0", "0:1"]


def test_kubelet_sequence_two_gpus_two_replicas(tmp_path: Path) -> None:
    """Two containers in a row, as kubelet asks: the sorted free set, minus what the first one took."""
    inv = inventory(tmp_path, "2xh100-80gb", config=time_slicing(2))
    res = only(inv)
    available = sorted(d.id for d in res.devices)
    first = ask(inv, available, 1)
    assert keys(res, first) == ["0::0"]
    rest = [i for i in available if i not in first]
    second = ask(inv, rest, 2)
    # GPU 1 has nothing allocated, GPU 0 has one: GPU 1 goes first, then GPU 0's last replica.
    assert keys(res, second) == ["1::0", "0::1"]


# --- validation ----------------------------------------------------------------------------------------------


def test_size_larger_than_available(h100: Inventory) -> None:
    res = only(h100)
    with pytest.raises(AllocationError) as err:
        ask(h100, ids(res, 0, 1), 3)
    assert str(err.value) == "not enough available devices to satisfy allocation"


def test_size_smaller_than_must_include_whole_gpus(h100: Inventory) -> None:
    res = only(h100)
    with pytest.raises(AllocationError) as err:
        ask(h100, [d.id for d in res.devices], 1, must=ids(res, 0, 1))
    assert str(err.value) == "not enough available devices to satisfy allocation"


def test_size_smaller_than_must_include_shared_returns_must_include(sliced: Inventory) -> None:
    """Follows NVIDIA/k8s-device-plugin internal/rm/allocate.go @ v0.20.0: ``needed`` is negative, the
    greedy loop picks nothing and the must-include devices come back unchanged, with no error."""
    res = only(sliced)
    got = ask(sliced, [d.id for d in res.devices], 1, must=ids(res, "0::0", "1::0"))
    assert keys(res, got) == ["0::0", "1::0"]


def test_shared_not_enough_candidates_text(sliced: Inventory) -> None:
    """Follows NVIDIA/k8s-device-plugin internal/rm/allocate.go @ v0.20.0 (prepareCandidates): fewer
    candidates than needed is refused with NVIDIA's text."""
    res = only(sliced)
    assert keys(res, ask(sliced, ids(res, "0::0", "0::1", "1::0"), 3, must=ids(res, "0::0"))) == [
        "0::0",
        "1::0",
        "0::1",
    ]
    with pytest.raises(AllocationError) as err:
        ask(sliced, ids(res, "0::0", "0::1", "1::0"), 4, must=ids(res, "0::0"))
    assert str(err.value) == "not enough available devices to satisfy allocation"


def test_duplicates_in_available_are_ignored(h100: Inventory) -> None:
    res = only(h100)
    dup = ids(res, 4, 4, 5, 5)
    assert keys(res, ask(h100, dup, 2)) == ["4", "5"]
    with pytest.raises(AllocationError, match="not enough available devices"):
        ask(h100, dup, 3)


def test_unknown_id(h100: Inventory) -> None:
    res = only(h100)
    with pytest.raises(AllocationError, match="unknown device: GPU-nope"):
        ask(h100, [*ids(res, 0, 1), "GPU-nope"], 1)


def test_unknown_must_include(h100: Inventory) -> None:
    res = only(h100)
    with pytest.raises(AllocationError, match="unknown device: GPU-nope"):
        ask(h100, ids(res, 0, 1), 1, must=["GPU-nope"])


def test_must_include_not_available(h100: Inventory) -> None:
    res = only(h100)
    missing = ids(res, 2)[0]
    with pytest.raises(AllocationError, match=f"must-include device {missing} is not among the available"):
        ask(h100, ids(res, 0, 1), 2, must=[missing])


@pytest.mark.parametrize("size", [0, -1])
def test_non_positive_size(h100: Inventory, size: int) -> None:
    res = only(h100)
    with pytest.raises(AllocationError, match=f"allocation size must be positive, found {size}"):
        ask(h100, ids(res, 0, 1), size)


def test_bad_policy(sliced: Inventory) -> None:
    res = only(sliced)
    with pytest.raises(AllocationError, match="unknown allocation policy 'random'"):
        ask(sliced, [d.id for d in res.devices], 1, policy="random")
