"""A node's NVLink fabric: the clique string NVIDIA writes, and the node spec's ``fabric`` field."""

from __future__ import annotations

import pytest

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.node import build_node
from fakegpu.sharing.node_spec import parse_node_spec
from fakegpu.sharing.nvlink_fabric import fabric_cluster_uuid, imex_channel_path, parse_clique

UUID = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"


def test_the_clique_is_cluster_uuid_dot_decimal_clique_id_as_gfd_writes_it():
    spec = parse_node_spec(
        {"gpus": [{"model": "b200", "count": 4}], "fabric": {"clusterUUID": UUID.upper(), "cliqueID": 32766}}, "s"
    )
    node = build_node(spec, "n1", source="s")
    assert node.fabric is not None
    assert node.fabric.clique == f"{UUID}.32766"
    assert node.fabric.imex_channels == 2048
    assert imex_channel_path(0) == "/dev/nvidia-caps-imex-channels/channel0"


def test_a_node_without_a_fabric_has_none():
    node = build_node(parse_node_spec({"gpus": [{"model": "h100-80gb"}]}, "s"), "n1", source="s")
    assert node.fabric is None


@pytest.mark.parametrize(
    ("fabric", "field", "expected"),
    [
        ({"clusterUUID": "rack-1", "cliqueID": 1}, "fabric.clusterUUID", "expected a UUID"),
        ({"clusterUUID": UUID, "cliqueID": -1}, "fabric.cliqueID", "greater than or equal to 0"),
        (
            {"clusterUUID": UUID, "cliqueID": 1, "imexChannels": 4096},
            "fabric.imexChannels",
            "less than or equal to 2048",
        ),
        ({"clusterUUID": UUID}, "fabric.cliqueID", "Field required"),
    ],
)
def test_a_bad_fabric_names_the_file_and_field(fabric, field, expected):
    with pytest.raises(SpecError) as caught:
        parse_node_spec({"gpus": [{"model": "b200"}], "fabric": fabric}, "node.yaml")
    text = str(caught.value)
    assert text.startswith("node.yaml: ") and field in text and expected in text


def test_parse_clique_round_trips_and_refuses_other_shapes():
    assert parse_clique(f"{UUID}.7", "--clique") == (UUID, 7)
    with pytest.raises(ValueError, match=r"--clique: expected <cluster UUID>\.<clique ID>"):
        parse_clique("7", "--clique")


def test_cluster_uuids_of_named_domains_are_stable_and_distinct():
    assert fabric_cluster_uuid("rack-0") == fabric_cluster_uuid("rack-0") != fabric_cluster_uuid("rack-1")
