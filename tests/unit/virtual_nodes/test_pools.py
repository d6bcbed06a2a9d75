"""Pool parsing: ``--count`` or ``--pool FILE=COUNT``, and every bad value named by its flag."""

from __future__ import annotations

import pytest
import yaml

from fakegpu.cli.virtual_nodes_command import pools_from_args
from fakegpu.sharing.errors import SpecError
from fakegpu.virtual_nodes.names import (
    check_node_name,
    node_name,
    pool_name_from_stem,
    prefix_label_value,
    prefix_label_values,
)
from fakegpu.virtual_nodes.pools import build_virtual_nodes, parse_pool_value


def write_spec(path, model: str, count: int) -> str:
    path.write_text(yaml.safe_dump({"version": "v1", "gpus": [{"model": model, "count": count}]}))
    return str(path)


def test_single_pool_names_are_zero_padded_and_stable(parse):
    pools = pools_from_args(parse("--count", "3", "--gpus", "2xa100-40gb"), env={})
    nodes, warnings = build_virtual_nodes(pools, "fakegpu-virtual-")
    assert [n.name for n in nodes] == ["fakegpu-virtual-0000", "fakegpu-virtual-0001", "fakegpu-virtual-0002"]
    assert {n.pool for n in nodes} == {"default"}
    assert warnings == []
    # Every node has its own devices: UUIDs derive from the node name.
    uuids = [g.uuid for n in nodes for g in n.inventory.node.gpus]
    assert len(uuids) == len(set(uuids)) == 6


def test_count_defaults_to_one(parse):
    (pool,) = pools_from_args(parse(), env={})
    assert pool.count == 1


def test_pools_from_files_get_their_own_names_and_gpus(parse, tmp_path):
    h100 = write_spec(tmp_path / "H100 Nodes.yaml", "h100-80gb", 8)
    t4 = write_spec(tmp_path / "t4.yaml", "t4", 2)
    pools = pools_from_args(parse("--pool", f"{h100}=2", "--pool", f"{t4}=1"), env={})
    nodes, _ = build_virtual_nodes(pools, "vn-")
    assert [(n.name, n.pool) for n in nodes] == [
        ("vn-h100-nodes-0000", "h100-nodes"),
        ("vn-h100-nodes-0001", "h100-nodes"),
        ("vn-t4-0000", "t4"),
    ]
    assert [len(n.inventory.node.gpus) for n in nodes] == [8, 8, 2]
    assert nodes[2].gfd_labels["nvidia.com/gpu.product"] == "Tesla-T4"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("nodes.yaml", "expected FILE=COUNT"),
        ("=3", "expected FILE=COUNT"),
        ("nodes.yaml=", "COUNT must be an integer"),
        ("nodes.yaml=three", "COUNT must be an integer"),
        ("nodes.yaml=0", "COUNT must be an integer"),
        ("nodes.yaml=-2", "COUNT must be an integer"),
        ("nodes.yaml=1.5", "COUNT must be an integer"),
        ("nodes.yaml=+3", "COUNT must be an integer"),
        ("nodes.yaml= 3", "COUNT must be an integer"),
        ("nodes.yaml=1_0", "COUNT must be an integer"),
        ("nodes.yaml=\u0663", "COUNT must be an integer"),  # ARABIC-INDIC DIGIT THREE: int() takes it
        ("nodes.yaml=3:", "MODE must be one of device-plugin, dra, dra-extended, found ''"),
        ("nodes.yaml=3:DRA", "MODE must be one of device-plugin, dra, dra-extended, found 'DRA'"),
        ("nodes.yaml=3:dra:dra", "MODE must be one of"),
        ("nodes.yaml=:dra", "COUNT must be an integer"),
    ],
)
def test_bad_pool_values_name_the_flag(value, expected):
    with pytest.raises(SpecError) as info:
        parse_pool_value(value)
    assert info.value.source == "--pool"
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("h100.yaml=3", ("h100.yaml", 3, None)),
        ("h100.yaml=3:dra", ("h100.yaml", 3, "dra")),
        ("h100.yaml=3:dra-extended", ("h100.yaml", 3, "dra-extended")),
        ("h100.yaml=3:device-plugin", ("h100.yaml", 3, "device-plugin")),
        ("c:/nodes/a=b.yaml=2:dra", ("c:/nodes/a=b.yaml", 2, "dra")),  # ':' and '=' in the path are kept
    ],
)
def test_pool_values_with_a_gpu_mode(value, expected):
    assert parse_pool_value(value) == expected


def test_each_pool_gets_the_gpu_mode_flag_unless_it_names_its_own(parse, tmp_path):
    h100 = write_spec(tmp_path / "h100.yaml", "h100-80gb", 8)
    t4 = write_spec(tmp_path / "t4.yaml", "t4", 2)
    pools = pools_from_args(parse("--pool", f"{h100}=2:dra-extended", "--pool", f"{t4}=1"), env={})
    assert [(p.name, p.mode) for p in pools] == [("h100", "dra-extended"), ("t4", "device-plugin")]
    pools = pools_from_args(
        parse("--gpu-mode", "dra", "--pool", f"{h100}=2:device-plugin", "--pool", f"{t4}=1"), env={}
    )
    assert [(p.name, p.mode) for p in pools] == [("h100", "device-plugin"), ("t4", "dra")]
    nodes, _ = build_virtual_nodes(pools, "vn-")
    assert [(n.name, n.mode, n.has_gpu_capacity, n.publishes_slices) for n in nodes] == [
        ("vn-h100-0000", "device-plugin", True, False),
        ("vn-h100-0001", "device-plugin", True, False),
        ("vn-t4-0000", "dra", False, True),
    ]


@pytest.mark.parametrize(("flags", "mode"), [([], "device-plugin"), (["--gpu-mode", "dra"], "dra")])
def test_the_single_pool_takes_the_gpu_mode_flag(parse, flags, mode):
    (pool,) = pools_from_args(parse("--count", "2", *flags), env={})
    assert pool.mode == mode
    nodes, _ = build_virtual_nodes([pool], "vn-")
    assert {n.mode for n in nodes} == {mode}


def test_dynamic_mig_without_a_pool_that_publishes_slices_is_refused(parse, tmp_path):
    with pytest.raises(SpecError, match="add --gpu-mode dra") as info:
        pools_from_args(parse("--gpus", "8xh100-80gb", "--mig-mode", "dynamic"), env={})
    assert info.value.source == "--mig-mode"
    t4 = write_spec(tmp_path / "t4.yaml", "t4", 2)
    with pytest.raises(SpecError):
        pools_from_args(parse("--mig-mode", "dynamic", "--pool", f"{t4}=1:device-plugin"), env={})
    (pool,) = pools_from_args(parse("--gpus", "8xh100-80gb", "--mig-mode", "dynamic", "--gpu-mode", "dra"), env={})
    assert pool.mode == "dra"
    h100 = write_spec(tmp_path / "h100.yaml", "h100-80gb", 8)
    pools = pools_from_args(parse("--mig-mode", "dynamic", "--pool", f"{t4}=1", "--pool", f"{h100}=1:dra"), env={})
    assert [p.mode for p in pools] == ["device-plugin", "dra"], "applies to the pools that publish slices"


def test_pool_file_may_contain_equals_signs():
    assert parse_pool_value("a=b.yaml=4") == ("a=b.yaml", 4, None)


def test_unreadable_pool_file_names_the_flag_and_the_file(parse, tmp_path):
    missing = tmp_path / "missing.yaml"
    pools = pools_from_args(parse("--pool", f"{missing}=2"), env={})
    with pytest.raises(SpecError) as info:
        build_virtual_nodes(pools, "vn-")
    message = str(info.value)
    assert message.startswith("--pool: ")
    assert str(missing) in message
    assert "not found" in message


def test_invalid_pool_file_names_the_field(parse, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"gpus": [{"model": "no-such-gpu"}]}))
    with pytest.raises(SpecError, match=r"^--pool: .*bad\.yaml: gpus\[0\]\.model"):
        build_virtual_nodes(pools_from_args(parse("--pool", f"{bad}=1"), env={}), "vn-")


@pytest.mark.parametrize(
    ("extra", "named"),
    [(["--count", "2"], "--count"), (["--gpus", "1xt4"], "--gpus"), (["--node-spec", "x.yaml"], "--node-spec")],
)
def test_pool_excludes_the_single_pool_flags(parse, tmp_path, extra, named):
    spec = write_spec(tmp_path / "a.yaml", "t4", 1)
    with pytest.raises(SpecError) as info:
        pools_from_args(parse("--pool", f"{spec}=1", *extra), env={})
    assert info.value.source == "--pool"
    assert named in str(info.value)


def test_two_pools_with_the_same_name_are_refused(parse, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = write_spec(tmp_path / "a" / "gpu.yaml", "t4", 1)
    two = write_spec(tmp_path / "b" / "gpu.yaml", "l4", 1)
    with pytest.raises(SpecError, match="two pools are named 'gpu'"):
        pools_from_args(parse("--pool", f"{one}=1", "--pool", f"{two}=1"), env={})


def test_node_name_flag_is_refused(parse):
    with pytest.raises(SpecError) as info:
        pools_from_args(parse("--node-name", "x"), env={})
    assert info.value.source == "--node-name"


@pytest.mark.parametrize("count", ["0", "-1", "100001"])
def test_count_out_of_range(parse, count):
    with pytest.raises(SpecError) as info:
        pools_from_args(parse("--count", count), env={})
    assert info.value.source == "--count"


def test_names():
    assert node_name("p-", 7) == "p-0007"
    assert node_name("p-", 12345, "h100") == "p-h100-12345"
    assert pool_name_from_stem("My_GPU.Nodes", "--pool") == "my-gpu-nodes"
    with pytest.raises(SpecError, match="cannot make a node name part"):
        pool_name_from_stem("__", "--pool")


@pytest.mark.parametrize(
    ("name", "problem"),
    [("Upper-0000", "not a DNS-1123 label"), ("-x-0000", "not a DNS-1123 label"), ("a" * 60 + "-0000", "at most 63")],
)
def test_bad_prefixes_are_refused(name, problem):
    with pytest.raises(SpecError) as info:
        check_node_name(name)
    assert info.value.source == "--name-prefix"
    assert problem in str(info.value)


def test_bad_prefix_is_caught_before_any_node_is_built(parse):
    with pytest.raises(SpecError, match="--name-prefix"):
        build_virtual_nodes(pools_from_args(parse("--count", "2"), env={}), "Bad_")


def test_a_name_too_long_because_of_the_pool_file_blames_the_file(parse, tmp_path):
    spec = write_spec(tmp_path / ("h100-" + "x" * 50 + ".yaml"), "h100-80gb", 1)
    pools = pools_from_args(parse("--pool", f"{spec}=2"), env={})
    with pytest.raises(SpecError) as info:
        build_virtual_nodes(pools, "team-a-")
    assert info.value.source == f"--pool {spec}"
    assert "at most 63" in str(info.value)


def test_a_prefix_too_long_by_itself_is_still_the_prefixs_fault(parse, tmp_path):
    spec = write_spec(tmp_path / "t4.yaml", "t4", 1)
    with pytest.raises(SpecError) as info:
        build_virtual_nodes(pools_from_args(parse("--pool", f"{spec}=1"), env={}), "p" * 60 + "-")
    assert info.value.source == "--name-prefix"


def test_the_prefix_label_value_is_valid_and_tells_prefixes_apart():
    prefixes = ["fakegpu-virtual-", "fakegpu-virtual-team2-", "fakegpu-virtual", "fakegpu-virtual--", "x", "0-", ""]
    values = [prefix_label_value(p) for p in prefixes]
    # The common case (one trailing dash) reads as the prefix; the others stay one to one.
    assert values[:4] == ["fakegpu-virtual", "fakegpu-virtual-team2", "fakegpu-virtual.0", "fakegpu-virtual.2"]
    assert prefix_label_value("kw-gpu-") == "kw-gpu"
    assert len(set(values)) == len(values)
    long_prefix = "a" * 59 + "-" * 4
    odd = ["Has_Upper.dots-", long_prefix, "-starts-with-dash", "-"]
    odd_values = [prefix_label_value(p) for p in odd]
    for value in values + odd_values:
        assert 0 < len(value) <= 63
        assert value[0].isalnum() and value[-1].isalnum()
    assert [v.startswith("sha256-") for v in odd_values] == [True, False, True, True]
    assert len(set(values + odd_values)) == len(values + odd_values)
    assert prefix_label_value("a.b-") != prefix_label_value("a.b")


def test_the_prefix_label_values_add_the_previous_versions_value_for_delete():
    assert prefix_label_values("kw-gpu-") == ["kw-gpu", "kw-gpu.1"]
    # Without a trailing dash the old value (the bare stem) is now kw-gpu-'s: it must not be selected.
    assert prefix_label_values("kw-gpu") == ["kw-gpu.0"]
    assert prefix_label_values("kw-gpu--") == ["kw-gpu.2"]  # unchanged from the previous version
    assert prefix_label_values("a.b-") == [prefix_label_value("a.b-")]  # a digest, then and now
    # No legacy value is any prefix's current value.
    prefixes = ["a-", "a", "a--", "a-b-", "a-1-", "a.1-", "a-1"]
    current = {prefix_label_value(p) for p in prefixes}
    legacy = {v for p in prefixes for v in prefix_label_values(p)[1:]}
    assert legacy == {"a.1", "a-b.1", "a-1.1"} and not legacy & current
