"""IMEX channels through the device plugin, over real sockets with the emulated kubelet.

Follows NVIDIA/k8s-device-plugin v0.17: ``api/config/v1/imex.go`` (``imex: {channelIDs, required}``),
``cmd/nvidia-device-plugin/main.go`` (``--imex-channel-ids`` / ``IMEX_CHANNEL_IDS``, ``--imex-required`` /
``IMEX_REQUIRED``), ``internal/imex/imex.go`` (``GetChannels``: ``Selecting IMEX channel channel0``,
``Ignoring requested IMEX channel channel0 (<nil>)``, ``requested IMEX channel channel0 does not exist``),
``cmd/nvidia-device-plugin/plugin-manager.go`` (``error querying IMEX channels: %w``; one channel list for
every plugin), ``internal/plugin/server.go`` (``getAllocateResponse``) and ``internal/cdi/imex.go`` (the
``imex-channel`` spec). On a fake node the channel exists when the node spec gives it an NVLink fabric.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.main import full_parser, main
from fakegpu.fakeplugin.daemon import run_plugin_daemon
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.errors import SpecError
from fakegpu.testing.node_factory import FakeNodeFactory
from tests.cdi_runtime import resolve
from tests.daemon_tasks import stop_and_wait
from tests.eventually import eventually

GPU = "nvidia.com/gpu"
CDI = "k8s.device-plugin.nvidia.com"
VM = "/var/run/nvidia-container-devices"
CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"
CLUSTER = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"
MISSING = "error querying IMEX channels: requested IMEX channel channel0 does not exist"


def fabric_node(**fabric: int) -> dict[str, Any]:
    """One GB200-style compute tray: 4 B200 GPUs on an NVLink fabric, clique 1."""
    return {
        "version": "v1",
        "gpus": [{"model": "b200", "count": 4}],
        "fabric": {"clusterUUID": CLUSTER, "cliqueID": 1, **fabric},
    }


def imex_config(strategy: str, *, required: bool = True, **plugin: Any) -> dict[str, Any]:
    return {
        "version": "v1",
        "flags": {"plugin": {"deviceListStrategy": strategy, **plugin}},
        "imex": {"channelIDs": [0], "required": required},
    }


def imex_parts(response: api_pb2.ContainerAllocateResponse) -> dict[str, Any]:
    """What of a response concerns IMEX, in NVIDIA's field order."""
    return {
        "env": response.envs.get("NVIDIA_IMEX_CHANNELS"),
        "mounts": [m.container_path for m in response.mounts if "/imex/" in m.container_path],
        "devices": [(d.container_path, d.host_path, d.permissions) for d in response.devices if "imex" in d.host_path],
        "annotations": [n for v in response.annotations.values() for n in v.split(",") if "imex" in n],
        "cdi": [c.name for c in response.cdi_devices if "imex" in c.name],
    }


NOTHING: dict[str, Any] = {"env": None, "mounts": [], "devices": [], "annotations": [], "cdi": []}


@pytest.mark.parametrize(
    ("strategy", "plugin", "expected"),
    [
        ("envvar", {}, {**NOTHING, "env": "0"}),
        ("volume-mounts", {}, {**NOTHING, "mounts": [f"{VM}/imex/0"]}),
        ("envvar", {"passDeviceSpecs": True}, {**NOTHING, "env": "0", "devices": [(CHANNEL0, CHANNEL0, "rw")]}),
        ("cdi-annotations", {}, {**NOTHING, "annotations": [f"{CDI}/imex-channel=0"]}),
        ("cdi-cri", {}, {**NOTHING, "cdi": [f"{CDI}/imex-channel=0"]}),
    ],
)
async def test_every_container_of_every_pod_gets_the_channel(
    fakegpu_node: FakeNodeFactory, strategy: str, plugin: dict[str, Any], expected: dict[str, Any]
) -> None:
    node = await fakegpu_node(node_spec=fabric_node(), config=imex_config(strategy, **plugin))
    assert node.allocatable() == {GPU: 4}
    first = await node.run_pod("p1", {"a": {GPU: 1}, "b": {GPU: 2}})
    second = await node.run_pod("p2", {"c": {GPU: 1}})
    assert first.admitted and second.admitted
    responses = [first.responses["a"][GPU], first.responses["b"][GPU], second.responses["c"][GPU]]
    assert [imex_parts(r) for r in responses] == [expected] * 3
    if strategy == "envvar":
        assert responses[1].envs["NVIDIA_VISIBLE_DEVICES"].count("GPU-") == 2  # the GPUs are still there


async def test_every_resource_gets_the_channel(fakegpu_node: FakeNodeFactory) -> None:
    """One channel list for every plugin instance (plugin-manager.go): a renamed shared resource too."""
    config = {
        **imex_config("envvar"),
        "sharing": {"timeSlicing": {"renameByDefault": True, "resources": [{"name": GPU, "replicas": 2}]}},
    }
    node = await fakegpu_node(node_spec=fabric_node(), config=config)
    (name,) = node.allocatable()
    assert name == "nvidia.com/gpu.shared"
    pod = await node.run_pod("p", {"c": {name: 1}})
    assert pod.admitted
    assert pod.responses["c"][name].envs["NVIDIA_IMEX_CHANNELS"] == "0"


@pytest.mark.parametrize("strategy", ["envvar", "volume-mounts", "cdi-cri", "cdi-annotations"])
@pytest.mark.parametrize(
    ("node_spec", "imex"),
    [
        (fabric_node(), {}),  # a fabric node without IMEX configured: unchanged
        (None, {"channelIDs": [0]}),  # optional, no fabric: nothing injected
    ],
)
async def test_nothing_injected_without_a_configured_or_existing_channel(
    fakegpu_node: FakeNodeFactory, strategy: str, node_spec: dict[str, Any] | None, imex: dict[str, Any]
) -> None:
    config = {"version": "v1", "flags": {"plugin": {"deviceListStrategy": strategy, "passDeviceSpecs": True}}}
    node = await fakegpu_node("4xb200", node_spec=node_spec, config={**config, "imex": imex})
    plain = await fakegpu_node("4xb200", node_spec=node_spec, config=config, node_name="fake-node")
    with_imex = await node.run_pod("p", {"c": {GPU: 1}})
    without = await plain.run_pod("p", {"c": {GPU: 1}})
    assert with_imex.admitted and without.admitted
    got, want = with_imex.responses["c"][GPU], without.responses["c"][GPU]
    assert imex_parts(got) == NOTHING
    # The same GPU for the same pod on twin nodes: byte for byte the response the node without IMEX gives,
    # but for the random CDI annotation key.
    got_annotations, want_annotations = list(got.annotations.values()), list(want.annotations.values())
    got.ClearField("annotations")
    want.ClearField("annotations")
    assert (got, got_annotations) == (want, want_annotations)


async def test_optional_and_missing_warns_naming_the_channel(
    fakegpu_node: FakeNodeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "fakegpu.fakeplugin.imex_channels"):
        node = await fakegpu_node(node_spec=fabric_node(imexChannels=0), config=imex_config("envvar", required=False))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "Ignoring requested IMEX channel channel0 (<nil>); nothing injected: "
        "node fake-node's NVLink fabric has 0 IMEX channels (fabric.imexChannels)"
    ]
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    assert pod.admitted and imex_parts(pod.responses["c"][GPU]) == NOTHING


async def test_required_and_missing_refuses_to_start(fakegpu_node: FakeNodeFactory) -> None:
    with pytest.raises(SpecError) as err:
        await fakegpu_node("4xb200", config=imex_config("envvar"))
    assert f"imex.required: {MISSING} (node fake-node has no NVLink fabric" in str(err.value)
    (node,) = fakegpu_node.nodes
    assert node.plugins.servers == {} and node.kubelet.registration.requests == []


def test_required_and_missing_exits_with_nvidias_error_and_writes_no_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI: flags only, as a DaemonSet passes them; exit 2 before any CDI spec is written."""
    cdi = tmp_path / "cdi"
    argv = ["plugin", "--node-name", "n1", "--gpus", "4xb200", "--kubelet-dir", str(tmp_path / "kubelet")]
    flags = ["--imex-channel-ids", "0", "--imex-required", "--device-list-strategy", "cdi-cri"]
    code = main([*argv, *flags, "--cdi-root", str(cdi)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"fakegpu: error: --imex-required: {MISSING} (node n1 has no NVLink fabric" in err
    assert not cdi.exists()


async def test_cdi_spec_resolves_the_channel_to_its_device_node(tmp_path: Path) -> None:
    """``fakegpu plugin`` with a node spec and IMEX from the environment (IMEX_CHANNEL_IDS, IMEX_REQUIRED)."""
    spec = tmp_path / "node.yaml"
    spec.write_text(yaml.safe_dump(fabric_node()))
    cdi = tmp_path / "cdi"
    args = full_parser().parse_args(
        ["plugin", "--node-name", "n1", "--node-spec", str(spec), "--device-list-strategy", "cdi-cri"]
    )
    inputs = inventory_inputs(args, {"IMEX_CHANNEL_IDS": "0", "IMEX_REQUIRED": "true"})
    kubelet = KubeletEmulator(tmp_path / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    task = asyncio.create_task(run_plugin_daemon(inputs, KubeletPaths(tmp_path / "kubelet"), stop=stop, cdi_root=cdi))
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 4 or task.done(), 10.0, "devices")
        assert not task.done()
        assert sorted(p.name for p in cdi.iterdir()) == [f"{CDI}-gpu.json", f"{CDI}-imex-channel.json"]
        pod = await kubelet.run_pod("p", {"c": {GPU: 2}})
        assert pod.admitted
        names = [c.name for c in pod.responses["c"][GPU].cdi_devices]
        assert names[-1] == f"{CDI}/imex-channel=0" and len(names) == 3
        edits = resolve(cdi, names[-1:])
        assert edits.device_nodes == [{"path": CHANNEL0, "hostPath": CHANNEL0}]
        assert edits.env == {} and edits.mounts == []
    finally:
        try:
            assert await stop_and_wait(stop, task) == [0]
        finally:
            await kubelet.stop()


async def test_a_reload_that_requires_a_missing_channel_is_rejected_and_serving_goes_on(
    fakegpu_node: FakeNodeFactory,
) -> None:
    node = await fakegpu_node("4xb200", config={"version": "v1"})
    config = Path(node.inputs.config_file or "")
    config.write_text(yaml.safe_dump(imex_config("envvar")))
    assert await node.reload() is False
    assert f"imex.required: {MISSING}" in node.plugins.stats.reload_errors[-1]
    config.write_text(yaml.safe_dump({"version": "v1", "imex": {"channelIDs": [1]}}))
    assert await node.reload() is False
    assert node.plugins.stats.reload_errors[-1] == (
        f"{config}: imex.channelIDs: invalid IMEX channel IDs: invalid IMEX config: channelIDs must be [] or [0]; "
        "found [1]"
    )
    assert node.plugins.running and node.allocatable() == {GPU: 4}
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    assert pod.admitted and imex_parts(pod.responses["c"][GPU]) == NOTHING


async def test_a_reload_that_configures_imex_on_a_fabric_node_injects_from_then_on(
    fakegpu_node: FakeNodeFactory,
) -> None:
    node = await fakegpu_node(node_spec=fabric_node(), config={"version": "v1"})
    before = await node.run_pod("p1", {"c": {GPU: 1}})
    assert imex_parts(before.responses["c"][GPU]) == NOTHING
    Path(node.inputs.config_file or "").write_text(yaml.safe_dump(imex_config("volume-mounts")))
    assert await node.reload() is True
    after = await node.run_pod("p2", {"c": {GPU: 1}})
    assert imex_parts(after.responses["c"][GPU])["mounts"] == [f"{VM}/imex/0"]
    await eventually(lambda: node.allocatable() == {GPU: 4}, "the four GPUs served again")


def test_help_names_both_flags_and_their_environment_variables(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plugin", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--imex-channel-ids VALUE IMEX channels to inject into every container given a device: none or 0" in text
    assert "(env IMEX_CHANNEL_IDS; default )" in text
    assert "--imex-required [BOOL] the IMEX channels are required: refuse to start" in text
    assert "(env IMEX_REQUIRED; default False)" in text
