"""The deterministic GPU activity model behind the fake DCGM exporter."""

from __future__ import annotations

import pytest

from fakegpu.sharing.catalog import CATALOG
from fakegpu.telemetry.dcgm import gpu_activity as ga
from fakegpu.telemetry.idle_reading import idle_reading

DEV = "GPU-00000000-0000-0000-0000-000000000000"
H100 = CATALOG["h100-80gb"]
H100_MIB = H100.memory_mib


def act(
    workloads: list[ga.Workload],
    *,
    seed: str = "s",
    step: int = 0,
    memory_mib: int = H100_MIB,
    budget_mib: int | None = None,
    idle_fb_mib: int = ga.IDLE_FB_USED_MIB,
) -> ga.Activity:
    return ga.activity(
        workloads,
        memory_mib=memory_mib,
        seed=seed,
        device=DEV,
        step=step,
        budget_mib=budget_mib,
        idle_fb_mib=idle_fb_mib,
    )


def test_idle_device_reads_idle():
    a = act([])
    assert a == ga.Activity(0, 0, ga.IDLE_FB_USED_MIB, H100_MIB - ga.IDLE_FB_USED_MIB, 0.0, 0.0, 0.0)
    mig = act([], memory_mib=9984, idle_fb_mib=ga.IDLE_FB_USED_MIG_MIB)
    assert (mig.util, mig.fb_used_mib, mig.fb_free_mib) == (0, 10, 9974)


def test_same_inputs_same_outputs():
    workloads = [ga.Workload("ns/p/c"), ga.Workload("ns/q/c", 40)]
    assert act(workloads, step=7) == act(list(workloads), step=7)
    assert ga.thermals(H100, 55, index=0, seed="s", gpu=DEV, step=7) == ga.thermals(
        H100, 55, index=0, seed="s", gpu=DEV, step=7
    )
    assert ga.noise("s", 1, "x") == ga.noise("s", 1, "x")
    assert -1.0 <= ga.noise("anything") < 1.0


def test_pinned_values_do_not_drift():
    """Byte-for-byte stability across processes and Python versions (SHA-256 based, not ``random``): a
    change here changes every fake dashboard, so it must be deliberate."""
    assert ga.noise("fakegpu", "util", DEV, 0) == 0.32984459229006413
    assert ga.noise(0, "x") == ga.noise("0", "x")  # the seed's text is what counts
    assert ga.activity(
        [ga.Workload("default/train/main")], memory_mib=H100_MIB, seed="fakegpu", device=DEV, step=3
    ) == ga.Activity(68, 29, 53133, 28426, 0.684774, 0.376626, 0.29)
    # From the catalog's H100 SXM5 reading (idle 69.21 W, 30 C) towards 700 W and the estimated 70 C.
    assert ga.thermals(H100, 42, index=0, seed="fakegpu", gpu=DEV, step=3) == ga.Thermals(47, 334.81)


def test_seed_and_step_change_the_jitter_only():
    workloads = [ga.Workload("ns/p/c")]
    utils = {act(workloads, step=s).util for s in range(40)}
    assert len(utils) > 1  # moves over time
    target = ga.workload_target(workloads[0], "s")
    assert all(abs(u - target) <= ga.JITTER_DEFAULT + 0.5 for u in utils)
    assert {act(workloads, seed=f"x{i}").util for i in range(40)} != {act(workloads).util}


def test_default_target_is_stable_per_workload_and_near_70():
    targets = [ga.workload_target(ga.Workload(f"ns/pod-{i}/c"), "seed") for i in range(200)]
    low, high = ga.DEFAULT_TARGET - ga.DEFAULT_TARGET_SPREAD, ga.DEFAULT_TARGET + ga.DEFAULT_TARGET_SPREAD
    assert all(low <= t < high for t in targets)
    assert len(set(targets)) == 200
    assert abs(sum(targets) / len(targets) - ga.DEFAULT_TARGET) < 2.0
    assert ga.workload_target(ga.Workload("ns/pod-1/c"), "seed") == targets[1]


@pytest.mark.parametrize("target", [0, 1, 25, 50, 99, 100])
def test_annotated_target_is_met_within_one_point(target):
    for step in range(30):
        util = act([ga.Workload("ns/p/c", target)], step=step).util
        if target == 0:
            assert util == 0
        else:
            assert abs(util - target) <= ga.JITTER_ANNOTATED + 0.5, (target, step, util)
            assert 1 <= util <= 100


def test_time_sliced_replicas_add_up_capped_at_100():
    two = act([ga.Workload("a/p/c", 30), ga.Workload("a/q/c", 25)])
    assert abs(two.util - 55) <= 2
    full = act([ga.Workload("a/p/c", 70), ga.Workload("a/q/c", 60)])
    assert full.util >= 99
    assert act([ga.Workload(f"a/p{i}/c") for i in range(4)]).util >= 99


def test_memory_follows_workloads_and_budget():
    one = act([ga.Workload("a/p/c", 50)])
    assert one.fb_used_mib == round(H100_MIB * (ga.FB_BASE_FILL + ga.FB_LOAD_FILL * 0.5))
    assert one.fb_used_mib + one.fb_free_mib == H100_MIB
    shared = act([ga.Workload("a/p/c", 50), ga.Workload("a/q/c", 50)], budget_mib=H100_MIB // 4)
    assert shared.fb_used_mib == 2 * round((H100_MIB // 4) * 0.55)
    crowded = act([ga.Workload(f"a/p{i}/c", 100) for i in range(3)])
    assert crowded.fb_used_mib == H100_MIB and crowded.fb_free_mib == 0
    assert act([ga.Workload("a/p/c", 10)]).fb_used_mib < act([ga.Workload("a/p/c", 90)]).fb_used_mib


def test_ratios_follow_utilization():
    a = act([ga.Workload("a/p/c", 80)], step=2)
    assert abs(a.gr_engine_active - a.util / 100) <= 0.011
    assert 0.0 <= a.gr_engine_active <= 1.0
    assert a.tensor_active == round(a.gr_engine_active * ga.TENSOR_RATIO, 6)
    assert abs(a.mem_copy_util - a.util * ga.MEM_COPY_RATIO) <= 2.5
    assert a.dram_active == round(a.mem_copy_util / 100, 6)
    assert len(str(a.gr_engine_active).split(".")[1]) <= 6


@pytest.mark.parametrize("key", sorted(CATALOG))
def test_every_board_moves_from_its_idle_reading_to_its_loaded_figures(key):
    model = CATALOG[key]
    facts = model.facts
    for index in range(4):
        idle = ga.thermals(model, 0, index=index, seed="s", gpu=DEV, step=index)
        busy = ga.thermals(model, 100, index=index, seed="s", gpu=DEV, step=index)
        reading = idle_reading(model, index)
        assert idle == ga.Thermals(reading.temperature_c, reading.power_w)
        assert idle.power_w < busy.power_w <= facts.power_limit_w
        assert busy.power_w >= facts.power_limit_w * 0.985 - 0.001
        assert idle.temperature_c < busy.temperature_c
        assert abs(busy.temperature_c - facts.load_temp_c) <= 1.5
        assert busy.power_w == round(busy.power_w, 3)


def test_idle_does_not_jitter_and_work_does():
    idle = {ga.thermals(H100, 0, index=1, seed="s", gpu=DEV, step=s) for s in range(20)}
    assert idle == {ga.Thermals(33, 70.08)}  # H100 SXM5 reading (69.21 W, 30 C), GPU 1's difference
    busy = {ga.thermals(H100, 50, index=1, seed="s", gpu=DEV, step=s) for s in range(20)}
    assert len(busy) > 1


def test_published_board_power():
    assert CATALOG["h100-80gb"].facts.power_limit_w == 700
    assert CATALOG["a100-40gb"].facts.power_limit_w == 400
    assert CATALOG["t4"].facts.power_limit_w == 70
    assert CATALOG["l4"].facts.power_limit_w == 72
    assert ga.thermals(CATALOG["t4"], 100, index=0, seed="s", gpu=DEV, step=0).power_w <= 70


def test_board_load_of_mig_instances():
    assert ga.board_load([(100, 7)], 7) == 100
    assert ga.board_load([(100, 1), (0, 3), (50, 2)], 7) == pytest.approx(200 / 7)
    assert ga.board_load([], 7) == 0
    assert ga.board_load([(100, 1)], 0) == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("25", 25.0),
        (" 25.5 ", 25.5),
        ("25%", 25.0),
        ("0", 0.0),
        ("150", 100.0),
        ("-3", 0.0),
        ("", None),
        ("busy", None),
        ("nan", None),
        (None, None),
    ],
)
def test_parse_target(text, expected):
    assert ga.parse_target(text) == expected
