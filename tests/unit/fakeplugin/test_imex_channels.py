"""Which IMEX channels the plugin selects, as NVIDIA v0.17 ``internal/imex/imex.go`` ``GetChannels`` and
``cmd/nvidia-device-plugin/plugin-manager.go`` (``error querying IMEX channels: %w``)."""

from __future__ import annotations

import logging

import pytest

from fakegpu.fakeplugin.imex_channels import ImexChannel, check_imex_channels, imex_channels, select_imex_channels
from fakegpu.sharing.errors import SpecError
from tests.inventory_builders import inventory

UUID = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"


def node(**fabric: int) -> dict[str, object]:
    return {"gpus": [{"model": "b200", "count": 4}], "fabric": {"clusterUUID": UUID, "cliqueID": 1, **fabric}}


def test_channel_names_and_paths():
    channel = ImexChannel("0")
    assert (channel.name, channel.path) == ("channel0", "/dev/nvidia-caps-imex-channels/channel0")


def test_a_fabric_node_has_channel_0_and_it_is_selected(tmp_path, caplog):
    inv = inventory(tmp_path, config={"version": "v1", "imex": {"channelIDs": [0], "required": True}}, node_spec=node())
    with caplog.at_level(logging.INFO, "fakegpu.fakeplugin.imex_channels"):
        assert select_imex_channels(inv) == (ImexChannel("0"),)
    assert [r.getMessage() for r in caplog.records] == ["Selecting IMEX channel channel0"]


@pytest.mark.parametrize(
    ("node_spec", "why"),
    [
        (None, "node node-a has no NVLink fabric; give it one with 'fabric:' in its node spec"),
        (node(imexChannels=0), "node node-a's NVLink fabric has 0 IMEX channels (fabric.imexChannels)"),
    ],
)
def test_optional_and_missing_warns_and_selects_nothing(tmp_path, caplog, node_spec, why):
    inv = inventory(tmp_path, "4xb200", config={"version": "v1", "imex": {"channelIDs": [0]}}, node_spec=node_spec)
    with caplog.at_level(logging.INFO, "fakegpu.fakeplugin.imex_channels"):
        assert select_imex_channels(inv) == ()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"Ignoring requested IMEX channel channel0 (<nil>); nothing injected: {why}")
    ]
    assert imex_channels(inv) == ()


@pytest.mark.parametrize(
    ("config", "cli", "origin"),
    [
        ({"version": "v1", "imex": {"channelIDs": [0], "required": True}}, {}, "config.yaml: imex.required"),
        (None, {"imex_channel_ids": "0", "imex_required": True}, "--imex-required"),
    ],
)
def test_required_and_missing_is_nvidias_start_error_naming_where_required_came_from(tmp_path, config, cli, origin):
    inv = inventory(tmp_path, "4xb200", config=config, cli=cli)
    with pytest.raises(SpecError) as err:
        check_imex_channels(inv)
    source = f"{tmp_path}/{origin}" if origin.startswith("config") else origin
    assert str(err.value) == (
        f"{source}: error querying IMEX channels: requested IMEX channel channel0 does not exist "
        "(node node-a has no NVLink fabric; give it one with 'fabric:' in its node spec)"
    )


def test_required_without_channel_ids_asks_for_nothing(tmp_path):
    inv = inventory(tmp_path, "4xb200", cli={"imex_required": True})
    check_imex_channels(inv)
    assert select_imex_channels(inv) == ()
