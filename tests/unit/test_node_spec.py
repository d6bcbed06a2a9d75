"""Node specs and mig-parted files: valid ones resolve, bad ones say which file, field and why."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs, load_node
from fakegpu.sharing.node_spec import parse_gpus_shorthand


def node_from(tmp_path, spec: Any, **kw: Any):
    path = tmp_path / "node.yaml"
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec))
    return load_node(InventoryInputs(node_name="n1", node_spec=str(path), **kw)), str(path)


def test_full_spec(tmp_path):
    node, _ = node_from(
        tmp_path,
        {
            "numaNodes": 2,
            "nvlink": [[0, 1], [2, 3]],
            "gpus": [
                {
                    "model": "a100-80gb",
                    "count": 2,
                    "migEnabled": True,
                    "migDevices": [{"profile": "3g.40gb", "start": 4}, {"profile": "4g.40gb", "start": 0}],
                },
                {"model": "a100-80gb", "count": 2, "numa": [1, -1]},
            ],
        },
    )
    assert [g.numa for g in node.gpus] == [0, 0, 1, None]
    assert [(m.profile.name, m.start, m.gi_id) for m in node.gpus[0].mig_devices] == [
        ("4g.40gb", 0, 1),
        ("3g.40gb", 4, 2),
    ]
    assert node.nvlinked(0, 1) and node.nvlinked(3, 2) and not node.nvlinked(1, 2)


def test_nvlink_defaults(tmp_path):
    sxm, _ = node_from(tmp_path, {"gpus": [{"model": "h100-80gb", "count": 4}]})
    assert len(sxm.nvlinks) == 6
    pcie, _ = node_from(tmp_path, {"gpus": [{"model": "l4", "count": 4}]})
    assert pcie.nvlinks == frozenset()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"gpus": [{"model": "rtx-9090"}]}, "gpus[0].model: unknown GPU model 'rtx-9090'; expected one of: a100-40gb"),
        ({"gpus": [{"model": "h100-80gb", "count": "eight"}]}, "gpus[0].count: Input should be a valid integer"),
        ({"gpus": [{"model": "h100-80gb", "count": 0}]}, "gpus[0].count: Input should be greater than or equal to 1"),
        ({"gpus": [{"model": "h100-80gb", "colour": "green"}]}, "gpus[0].colour: unknown field"),
        ({"gpus": []}, "gpus: List should have at least 1 item"),
        ({"gpu": [{"model": "t4"}]}, "unknown field"),
        ({"gpus": [{"model": "t4", "count": 2, "numa": [0]}]}, "gpus[0].numa: lists 1 NUMA nodes for 2 GPUs"),
        ({"gpus": [{"model": "t4", "migEnabled": True}]}, "gpus[0].migEnabled: Tesla T4 is not MIG capable"),
        (
            {"gpus": [{"model": "h100-80gb", "migDevices": {"1g.10gb": 1}}]},
            "gpus[0].migDevices: MIG devices given but migEnabled is false",
        ),
        (
            {"gpus": [{"model": "h100-80gb", "migEnabled": True, "migDevices": {"1g.10gb": 8}}]},
            "gpus[0].migDevices: GPU 0: profile 1g.10gb: at most 7 instance(s) fit on NVIDIA H100 80GB HBM3",
        ),
        (
            {
                "gpus": [
                    {
                        "model": "h100-80gb",
                        "migEnabled": True,
                        "migDevices": [{"profile": "3g.40gb", "start": 0}, {"profile": "2g.20gb", "start": 2}],
                    }
                ]
            },
            "2g.20gb at memory slice 2 overlaps 3g.40gb at memory slice 0",
        ),
        (
            {"gpus": [{"model": "h100-80gb", "migEnabled": True, "migDevices": {"2g.10gb": 1}}]},
            "profile 2g.10gb is not supported by NVIDIA H100 80GB HBM3",
        ),
        ({"driverVersion": "latest", "gpus": [{"model": "t4"}]}, "driverVersion: expected a dotted version"),
        (
            {"cudaDriverVersion": 12.8, "gpus": [{"model": "t4"}]},
            'cudaDriverVersion: write the version as a quoted string such as "12.8"',
        ),
        ({"gpus": [{"model": "t4", "count": "2"}]}, "gpus[0].count: Input should be a valid integer (found '2')"),
        (
            {"gpus": [{"model": "h100-80gb", "migEnabled": "yes"}]},
            "gpus[0].migEnabled: Input should be a valid boolean",
        ),
        ({"gpus": [{"model": "h100-80gb", "count": 2.0}]}, "gpus[0].count: Input should be a valid integer"),
        ({"nvlink": [[0, 5]], "gpus": [{"model": "t4"}]}, "nvlink[0]: GPU 5 does not exist"),
        ({"gpus": [{"model": "t4", "count": 40}, {"model": "t4", "count": 40}]}, "80 GPUs in total; at most 64"),
        ("gpus: [model: t4\n", "invalid YAML"),
        ("- just\n- a list\n", "expected a mapping at the top level of the node spec, found list"),
        ("", "node spec is empty"),
    ],
)
def test_bad_node_specs(tmp_path, spec, message):
    with pytest.raises(SpecError) as err:
        node_from(tmp_path, spec)
    text = str(err.value)
    assert message in text
    assert text.startswith(str(tmp_path / "node.yaml"))
    assert "\n" not in text


def test_yaml_error_names_the_line(tmp_path):
    with pytest.raises(SpecError, match=r"node.yaml: line 3, column 12: invalid YAML: found character"):
        node_from(tmp_path, "gpus:\n  - model: t4\n  - model: @t4\n")


def test_unreadable_and_binary_files(tmp_path):
    with pytest.raises(SpecError, match="node spec not found"):
        load_node(InventoryInputs(node_name="n", node_spec=str(tmp_path / "missing.yaml")))
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SpecError, match="is not UTF-8 text"):
        load_node(InventoryInputs(node_name="n", node_spec=str(binary)))
    with pytest.raises(SpecError, match="is a directory"):
        load_node(InventoryInputs(node_name="n", node_spec=str(tmp_path)))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["8xfoo"], "unknown GPU model 'foo'"),
        (["0xt4"], "GPU count must be between 1 and 64"),
        (["eight t4"], "expected COUNTxMODEL"),
        (["65xt4"], "GPU count must be between 1 and 64"),
    ],
)
def test_bad_shorthand(values, message):
    with pytest.raises(SpecError, match=message):
        parse_gpus_shorthand(values)


def test_shorthand_forms():
    spec = parse_gpus_shorthand(["8xh100-80gb", "2xT4,l4"])
    assert [(g.model, g.count) for g in spec.gpus] == [("h100-80gb", 8), ("t4", 2), ("l4", 1)]


MIG_PARTED = {
    "version": "v1",
    "mig-configs": {
        "custom": [
            {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
            {"devices": [2], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        ],
        "by-filter": [
            {"device-filter": "0x233010DE", "devices": "all", "mig-enabled": True, "mig-devices": {"2g.20gb": 3}},
            {"device-filter": ["0x20B210DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
        ],
        "overlap": [
            {"devices": "all", "mig-enabled": False},
            {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 1}},
        ],
        "too-many": [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 2}}],
        "out-of-range": [{"devices": [9], "mig-enabled": False}],
    },
}


def with_parted(tmp_path, layout: str, gpus: tuple[str, ...] = ("4xh100-80gb",)):
    path = tmp_path / "parted.yaml"
    path.write_text(yaml.safe_dump(MIG_PARTED))
    return load_node(InventoryInputs(node_name="n", gpus=gpus, mig_config=str(path), mig_layout=layout))


def test_mig_parted_layouts(tmp_path):
    node = with_parted(tmp_path, "custom")
    assert [len(g.mig_devices) for g in node.gpus] == [7, 7, 2, 0]
    assert [g.mig_enabled for g in node.gpus] == [True, True, True, False]
    mixed = with_parted(tmp_path, "by-filter", ("2xh100-80gb", "1xa100-80gb", "1xt4"))
    assert [[m.profile.name for m in g.mig_devices] for g in mixed.gpus] == [
        ["2g.20gb"] * 3,
        ["2g.20gb"] * 3,
        ["7g.80gb"],
        [],
    ]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("overlap", "GPU 1 is selected by both"),
        ("too-many", "mig-configs.too-many[0]: GPU 0: profile 4g.40gb: at most 1 instance(s)"),
        ("out-of-range", "mig-configs.out-of-range[0].devices: selects GPU 9 but the node has 4 GPU(s)"),
        ("nope", "no layout named 'nope' in mig-configs; available: by-filter, custom"),
    ],
)
def test_mig_parted_errors(tmp_path, layout, message):
    with pytest.raises(SpecError) as err:
        with_parted(tmp_path, layout)
    assert message in str(err.value)
    assert "parted.yaml" in str(err.value)


def test_generated_layout_errors():
    with pytest.raises(SpecError, match=r"unknown MIG layout 'all-9g\.99gb'; available for this node: all-disabled"):
        load_node(InventoryInputs(node_name="n", gpus=("1xh100-80gb",), mig_layout="all-9g.99gb"))
    with pytest.raises(SpecError, match=r"GPU 1 \(NVIDIA A100-SXM4-40GB\) has no MIG profile 1g.20gb"):
        load_node(InventoryInputs(node_name="n", gpus=("1xh100-80gb", "1xa100-40gb"), mig_layout="all-1g.20gb"))
    with pytest.raises(SpecError, match="--mig-config: needs --mig-layout"):
        load_node(InventoryInputs(node_name="n", gpus=("1xh100-80gb",), mig_config="x.yaml"))
    with pytest.raises(SpecError, match="--gpus: cannot be combined with --node-spec"):
        load_node(InventoryInputs(node_name="n", gpus=("1xt4",), node_spec="x.yaml"))


def test_generated_layouts_skip_gpus_without_mig():
    node = load_node(InventoryInputs(node_name="n", gpus=("1xh100-80gb", "1xt4"), mig_layout="all-1g.10gb"))
    assert [len(g.mig_devices) for g in node.gpus] == [7, 0]
