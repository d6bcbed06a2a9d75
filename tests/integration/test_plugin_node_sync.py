"""``fakegpu plugin --label-node --config-dir``: GFD labels on the Node and the config its label selects.

The plugin daemon runs in-process against the kubelet emulator (device plugin protocol over real Unix
sockets) and the in-process API server (the Node object), as it would on a kind node.
"""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from fakegpu.cli.main import full_parser
from fakegpu.cli.node_options import node_settings
from fakegpu.control.client import admin_call
from fakegpu.fakeplugin import node_sync
from fakegpu.fakeplugin.cleanup_policy import CleanupOnExit
from fakegpu.fakeplugin.daemon import NodeSettings, run_plugin_daemon
from fakegpu.fakeplugin.node_sync import ConfigSelection
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.sharing.label_ownership import OWNED_LABELS_ANNOTATION
from fakegpu.sharing.labels import TIMESTAMP_LABEL
from tests.apiserver import FakeApiServer
from tests.apiserver.serving import serving
from tests.daemon_tasks import stop_and_wait
from tests.eventually import eventually
from tests.integration.plugin_daemon_runs import plugin_daemon_running

NODE = "gpu-node-1"
GPU = "nvidia.com/gpu"
LABEL = "nvidia.com/device-plugin.config"
MIG_MIXED = {"version": "v1", "flags": {"migStrategy": "mixed"}}
TIME_SLICING_4 = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 4}]}}}


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE, labels={"team": "ml"}) as server:
        yield server


def write_configs(directory: Path, configs: dict[str, Any]) -> Path:
    directory.mkdir(exist_ok=True)
    for name, body in configs.items():
        (directory / name).write_text(yaml.safe_dump(body))
    return directory


def node_labels(apiserver: FakeApiServer) -> dict[str, str]:
    node = apiserver.get_object("nodes", NODE)
    assert node is not None
    return dict(node["metadata"].get("labels") or {})


def set_label(apiserver: FakeApiServer, key: str, value: str | None) -> None:
    node = apiserver.get_object("nodes", NODE)
    assert node is not None
    labels = node["metadata"].setdefault("labels", {})
    if value is None:
        labels.pop(key, None)
    else:
        labels[key] = value
    apiserver.update_direct(node)


Daemon = Callable[..., Awaitable[KubeletEmulator]]


@pytest.fixture
async def daemon(root: Path, apiserver: FakeApiServer) -> AsyncIterator[Daemon]:
    """``kubelet = await daemon(settings)``: the kubelet emulator plus ``run_plugin_daemon`` for NODE."""
    stops: list[tuple[asyncio.Event, asyncio.Task[int], KubeletEmulator]] = []

    async def start(node: NodeSettings, gpus: str = "2xa100-40gb", mig_layout: str | None = None) -> KubeletEmulator:
        kubelet = KubeletEmulator(root / "kubelet")
        await kubelet.start()
        stop = asyncio.Event()
        inputs = InventoryInputs(node_name=NODE, gpus=(gpus,), mig_layout=mig_layout)
        admin = admin_socket(root, len(stops))
        paths = KubeletPaths(root / "kubelet")
        task = asyncio.create_task(run_plugin_daemon(inputs, paths, stop=stop, node=node, admin_socket=admin))
        stops.append((stop, task, kubelet))
        await kubelet.wait_for(lambda: any(kubelet.allocatable().values()) or task.done(), 10.0, "devices")
        if task.done():
            task.result()
        return kubelet

    yield start
    try:
        for stop, task, _ in stops:
            await stop_and_wait(stop, task)
    finally:
        for _, _, kubelet in stops:
            await kubelet.stop()


def admin_socket(root: Path, index: int = 0) -> Path:
    """Where the ``daemon`` fixture's ``index``-th plugin serves its admin socket."""
    return root / f"admin{index}.sock"


async def resynced(root: Path) -> None:
    """Wait for two more passes of the plugin's node sync (one every resync interval): the second began
    after this call, so whatever the plugin would write for what happened before has been written."""

    async def syncs() -> int:
        status = await admin_call(admin_socket(root), "status")
        return int(status["node_object"]["syncs"])

    before = await syncs()

    async def passed() -> bool:
        return await syncs() >= before + 2

    await eventually(passed, "two more passes of the node sync")


def node_metadata(apiserver: FakeApiServer) -> tuple[dict[str, str], dict[str, str]]:
    node = apiserver.get_object("nodes", NODE)
    assert node is not None
    return dict(node["metadata"].get("labels") or {}), dict(node["metadata"].get("annotations") or {})


async def run_and_stop(
    apiserver: FakeApiServer, root: Path, node: NodeSettings, before_stop: Callable[[], None] = lambda: None
) -> None:
    """Start the plugin, wait for its labels, call ``before_stop``, then stop it as SIGTERM does (the
    daemon's stop event)."""
    async with plugin_daemon_running(
        root, NODE, node, lambda: "nvidia.com/gpu.count" in node_labels(apiserver), "GFD labels"
    ):
        before_stop()


def settings(apiserver: FakeApiServer, root: Path, **kw: Any) -> NodeSettings:
    return NodeSettings(kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig")), resync_interval=0.2, **kw)


async def test_label_node_writes_the_gfd_labels_and_records_them(daemon, apiserver, root):
    await daemon(settings(apiserver, root, label_node=True))
    await eventually(lambda: "nvidia.com/gpu.count" in node_labels(apiserver), "GFD labels")
    labels = node_labels(apiserver)
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["team"] == "ml" and labels["kubernetes.io/hostname"] == NODE
    node = apiserver.get_object("nodes", NODE)
    assert node is not None
    owned = set(node["metadata"]["annotations"][OWNED_LABELS_ANNOTATION].split(","))
    assert owned == {k for k in labels if k.startswith("nvidia.com/")}
    # In sync: a resync writes nothing more.
    patches = apiserver.count("patch", "nodes")
    await resynced(root)
    assert apiserver.count("patch", "nodes") == patches == 1


async def test_label_node_writes_the_gfd_timestamp_once_per_run(daemon, apiserver, root):
    """NVIDIA's GFD writes ``nvidia.com/gfd.timestamp`` by default (``internal/lm/timestamp.go``), taken once
    per run: ``cmd/gpu-feature-discovery/main.go`` builds the timestamp labeler before its relabel loop, so
    the 60 s relabelling keeps the value; NVIDIA's e2e test (``tests/e2e/gpu-feature-discovery_test.go``)
    waits for ``[0-9]{10}``."""
    await daemon(settings(apiserver, root, label_node=True))
    await eventually(lambda: TIMESTAMP_LABEL in node_labels(apiserver), "the GFD timestamp")
    stamp = node_labels(apiserver)[TIMESTAMP_LABEL]
    assert re.fullmatch(r"[0-9]{10}", stamp)
    patches = apiserver.count("patch", "nodes")
    set_label(apiserver, "nvidia.com/gpu.count", None)  # a relabel pass: the run's timestamp stays
    await eventually(lambda: node_labels(apiserver).get("nvidia.com/gpu.count") == "2", "label restored")
    assert node_labels(apiserver)[TIMESTAMP_LABEL] == stamp
    assert apiserver.count("patch", "nodes") == patches + 1


async def test_no_timestamp_leaves_the_label_out(daemon, apiserver, root):
    """GFD's ``--no-timestamp`` (``GFD_NO_TIMESTAMP``): ``NewTimestampLabeler`` returns no label."""
    await daemon(settings(apiserver, root, label_node=True, timestamp=False))
    await eventually(lambda: "nvidia.com/gpu.count" in node_labels(apiserver), "GFD labels")
    assert TIMESTAMP_LABEL not in node_labels(apiserver)


async def test_a_config_switch_is_a_new_gfd_run_with_a_new_timestamp(daemon, apiserver, root, monkeypatch):
    """GFD's config-manager sends SIGHUP on a new config and GFD starts a new run, with a new timestamp
    (``cmd/gpu-feature-discovery/main.go`` ``start``/``run``)."""
    now = [1_700_000_000.0]
    monkeypatch.setattr(node_sync, "time", SimpleNamespace(time=lambda: now[0]))
    configs = write_configs(root / "configs", {"default": {"version": "v1"}, "time-slicing-4": TIME_SLICING_4})
    await daemon(settings(apiserver, root, label_node=True, selection=ConfigSelection(configs)))
    await eventually(lambda: node_labels(apiserver).get(TIMESTAMP_LABEL) == "1700000000", "first run's stamp")
    now[0] += 90
    set_label(apiserver, "nvidia.com/gpu.count", None)
    await eventually(lambda: node_labels(apiserver).get("nvidia.com/gpu.count") == "2", "relabelled")
    assert node_labels(apiserver)[TIMESTAMP_LABEL] == "1700000000"
    set_label(apiserver, LABEL, "time-slicing-4")
    await eventually(lambda: node_labels(apiserver).get(TIMESTAMP_LABEL) == "1700000090", "the new run's stamp")
    assert node_labels(apiserver)["nvidia.com/gpu.replicas"] == "4"


@pytest.mark.parametrize(
    ("argv", "env", "timestamp"),
    [
        ([], {}, True),
        (["--no-timestamp"], {}, False),
        ([], {"GFD_NO_TIMESTAMP": "true"}, False),
        ([], {"GFD_NO_TIMESTAMP": "0"}, True),
        (["--no-timestamp"], {"GFD_NO_TIMESTAMP": "false"}, False),
    ],
)
def test_no_timestamp_flag_and_env(argv, env, timestamp):
    """GFD's flag and env var (``cmd/gpu-feature-discovery/main.go``: ``no-timestamp``, ``GFD_NO_TIMESTAMP``)."""
    args = full_parser().parse_args(["plugin", "--label-node", *argv])
    assert node_settings(args, env).timestamp is timestamp


def test_a_bad_gfd_no_timestamp_is_named():
    args = full_parser().parse_args(["plugin", "--label-node"])
    with pytest.raises(SpecError, match="GFD_NO_TIMESTAMP: could not parse 'maybe' as bool value"):
        node_settings(args, {"GFD_NO_TIMESTAMP": "maybe"})


async def test_a_label_someone_removes_is_put_back(daemon, apiserver, root):
    await daemon(settings(apiserver, root, label_node=True))
    await eventually(lambda: "nvidia.com/gpu.count" in node_labels(apiserver), "GFD labels")
    set_label(apiserver, "nvidia.com/gpu.count", None)
    await eventually(lambda: node_labels(apiserver).get("nvidia.com/gpu.count") == "2", "label restored")


async def test_the_config_label_switches_the_config_live_and_the_labels_follow(daemon, apiserver, root):
    configs = write_configs(
        root / "configs",
        {"default": {"version": "v1"}, "time-slicing-4": TIME_SLICING_4, "mig-mixed": MIG_MIXED},
    )
    kubelet = await daemon(settings(apiserver, root, label_node=True, selection=ConfigSelection(configs)))
    assert kubelet.allocatable() == {GPU: 2}
    await eventually(lambda: node_labels(apiserver).get("nvidia.com/gpu.replicas") == "1", "unshared labels")
    assert node_labels(apiserver)["nvidia.com/gpu.sharing-strategy"] == "none"

    set_label(apiserver, LABEL, "time-slicing-4")
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, 5.0, "8 replicas")
    await eventually(lambda: node_labels(apiserver).get("nvidia.com/gpu.replicas") == "4", "shared labels")
    assert node_labels(apiserver)["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert node_labels(apiserver)["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-SHARED"

    set_label(apiserver, LABEL, "mig-mixed")
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 2}, 5.0, "unshared again")
    await eventually(lambda: node_labels(apiserver).get("nvidia.com/mig.strategy") == "mixed", "MIG strategy label")

    # Back to no label: the `named` fallback picks `default`; the label that no longer applies goes away.
    set_label(apiserver, LABEL, None)
    await eventually(lambda: "nvidia.com/mig.strategy" not in node_labels(apiserver), "label removed")
    assert node_labels(apiserver)["nvidia.com/gpu.sharing-strategy"] == "none"
    assert node_labels(apiserver)["team"] == "ml"


async def test_the_label_is_read_before_the_first_registration(daemon, apiserver, root):
    configs = write_configs(root / "configs", {"default": {"version": "v1"}, "time-slicing-4": TIME_SLICING_4})
    set_label(apiserver, LABEL, "time-slicing-4")
    kubelet = await daemon(settings(apiserver, root, selection=ConfigSelection(configs)))
    # Never advertised the unshared 2 first: the first ListAndWatch already had 8 devices.
    assert kubelet.allocatable() == {GPU: 8}


async def test_a_label_naming_no_config_keeps_the_current_one(daemon, apiserver, root, caplog):
    configs = write_configs(root / "configs", {"default": {"version": "v1"}, "time-slicing-4": TIME_SLICING_4})
    kubelet = await daemon(settings(apiserver, root, selection=ConfigSelection(configs)))
    set_label(apiserver, LABEL, "no-such-config")
    await eventually(lambda: "specified config no-such-config does not exist" in caplog.text, "selection error")
    assert "still serving config default" in caplog.text
    assert kubelet.allocatable() == {GPU: 2}
    # Adding the config to the ConfigMap afterwards makes the same label work, as a fixed ConfigMap should.
    (configs / "no-such-config").write_text(yaml.safe_dump(TIME_SLICING_4))
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, 5.0, "config appeared")


async def test_a_bad_selected_config_keeps_the_running_inventory(daemon, apiserver, root, caplog):
    bad = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": "many"}]}}}
    configs = write_configs(root / "configs", {"default": {"version": "v1"}, "broken": bad})
    kubelet = await daemon(settings(apiserver, root, label_node=True, selection=ConfigSelection(configs)))
    await eventually(lambda: "nvidia.com/gpu.count" in node_labels(apiserver), "GFD labels")
    set_label(apiserver, LABEL, "broken")
    await eventually(lambda: "config reload rejected" in caplog.text, "reload rejected")
    assert str(configs / "broken") in caplog.text
    assert kubelet.allocatable() == {GPU: 2}
    assert node_labels(apiserver)["nvidia.com/gpu.replicas"] == "1"
    # Fixing the file the label names makes the same label work, without touching the label.
    (configs / "broken").write_text(yaml.safe_dump(TIME_SLICING_4))
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, 5.0, "fixed config applied")


async def test_nothing_is_served_until_the_label_could_be_read(daemon, apiserver, root):
    """As NVIDIA's config-manager init container: an API server that is away is waited for, so the kubelet
    never sees the default config on a node whose label asks for another."""
    configs = write_configs(root / "configs", {"default": {"version": "v1"}, "time-slicing-4": TIME_SLICING_4})
    set_label(apiserver, LABEL, "time-slicing-4")
    apiserver.fail_next("get", "nodes", 503, times=2)
    kubelet = await daemon(settings(apiserver, root, selection=ConfigSelection(configs)))
    assert apiserver.count("get", "nodes") >= 3
    assert kubelet.allocatable() == {GPU: 8}


async def test_labels_follow_the_served_inventory_not_a_rejected_file(daemon, apiserver, root, caplog):
    # MPS with MIG devices is refused by the inventory, while labels alone could be computed from it.
    mps_on_mig = {
        "version": "v1",
        "flags": {"migStrategy": "single", "mpsRoot": "/run/nvidia/mps"},
        "sharing": {"mps": {"resources": [{"name": GPU, "replicas": 2}]}},
    }
    configs = write_configs(root / "configs", {"default": {"version": "v1", "flags": {"migStrategy": "single"}}})
    node = settings(apiserver, root, label_node=True, selection=ConfigSelection(configs))
    kubelet = await daemon(node, gpus="2xa100-40gb", mig_layout="all-1g.5gb")
    await eventually(lambda: node_labels(apiserver).get("nvidia.com/gpu.count") == "14", "MIG single labels")
    (configs / "default").write_text(yaml.safe_dump(mps_on_mig))
    await eventually(lambda: "config reload rejected" in caplog.text, "reload rejected")
    await resynced(root)  # a wrong label patch would have landed by now
    assert node_labels(apiserver).get("nvidia.com/gpu.sharing-strategy") == "none"
    assert kubelet.allocatable() == {GPU: 14}


async def test_a_configmap_update_of_the_selected_key_reloads(daemon, apiserver, root):
    """A mounted ConfigMap changes by swapping its ``..data`` symlink, not by writing the key's file."""
    configs = root / "configs"
    configs.mkdir()
    first = configs / "..2026_11_29_12_00_00.1"
    first.mkdir()
    (first / "default").write_text(yaml.safe_dump({"version": "v1"}))
    (configs / "..data").symlink_to(first.name)
    (configs / "default").symlink_to("..data/default")
    kubelet = await daemon(settings(apiserver, root, selection=ConfigSelection(configs)))
    assert kubelet.allocatable() == {GPU: 2}
    second = configs / "..2026_11_29_12_05_00.2"
    second.mkdir()
    (second / "default").write_text(yaml.safe_dump(TIME_SLICING_4))
    (configs / "..data_tmp").symlink_to(second.name)
    (configs / "..data_tmp").rename(configs / "..data")
    await kubelet.wait_for(lambda: kubelet.allocatable() == {GPU: 8}, 5.0, "updated ConfigMap applied")


async def test_a_stopped_plugin_leaves_the_node_as_it_found_it(apiserver, root):
    """SIGTERM (the DaemonSet's normal end) with the default ``--cleanup-on-exit always``: exactly the labels and
    annotations the Node had before the plugin started, a user's label that equals a GFD one included.

    Follows NVIDIA's GFD, which removes its features file on every exit so NFD drops the labels
    (NVIDIA/k8s-device-plugin ``cmd/gpu-feature-discovery/main.go``, ``removeOutputFile``)."""
    node = apiserver.get_object("nodes", NODE)
    assert node is not None
    node["metadata"]["labels"]["nvidia.com/gpu.family"] = "ampere"  # set by someone else: never fakegpu's
    node["metadata"]["annotations"] = {"team.example/owner": "ml"}
    apiserver.update_direct(node)
    before = node_metadata(apiserver)
    await run_and_stop(apiserver, root, settings(apiserver, root, label_node=True))
    assert node_metadata(apiserver) == before


@pytest.mark.parametrize(
    ("policy", "opt_in", "removed"),
    [
        ("never", "true", False),
        ("unless-node-label:fakegpu.io/device-plugin=true", "true", False),  # restart in place
        ("unless-node-label:fakegpu.io/device-plugin=true", None, True),  # opted out: gone for good
        ("unless-node-label:fakegpu.io/device-plugin=true", "false", True),
        ("unless-node-label:fakegpu.io/device-plugin", "false", False),
    ],
)
async def test_the_exit_policy_keeps_labels_for_a_restart_in_place(apiserver, root, policy, opt_in, removed):
    """``unless-node-label``: while the Node still carries the DaemonSet's opt-in label a new pod will follow
    and adopt the labels; once the label is gone the DaemonSet controller deleted this pod for good."""
    set_label(apiserver, "fakegpu.io/device-plugin", "true")
    before = node_metadata(apiserver)
    node = settings(apiserver, root, label_node=True, cleanup_on_exit=CleanupOnExit.parse(policy))
    await run_and_stop(apiserver, root, node, lambda: set_label(apiserver, "fakegpu.io/device-plugin", opt_in))
    labels, annotations = node_metadata(apiserver)
    if removed:
        expected = dict(before[0])
        expected.pop("fakegpu.io/device-plugin")
        if opt_in is not None:
            expected["fakegpu.io/device-plugin"] = opt_in
        assert (labels, annotations) == (expected, before[1])
    else:
        assert labels["nvidia.com/gpu.count"] == "2" and OWNED_LABELS_ANNOTATION in annotations


@pytest.mark.parametrize(
    ("argv", "env", "policy"),
    [
        ([], {}, "always"),
        ([], {"FAKEGPU_CLEANUP_ON_EXIT": "never"}, "never"),
        (["--cleanup-on-exit", "always"], {"FAKEGPU_CLEANUP_ON_EXIT": "never"}, "always"),
        (["--cleanup-on-exit", "unless-node-label:a.b/c=d"], {}, "unless-node-label:a.b/c=d"),
    ],
)
def test_cleanup_on_exit_flag_and_env(argv, env, policy):
    args = full_parser().parse_args(["plugin", "--label-node", *argv])
    assert str(node_settings(args, env).cleanup_on_exit) == policy


def test_a_bad_cleanup_on_exit_is_named():
    args = full_parser().parse_args(["plugin", "--label-node"])
    with pytest.raises(SpecError, match="FAKEGPU_CLEANUP_ON_EXIT: 'sometimes': expected always, never or"):
        node_settings(args, {"FAKEGPU_CLEANUP_ON_EXIT": "sometimes"})


def test_cli_rejects_config_dir_with_config_file_and_orphan_selection_flags(root):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fakegpu", "plugin", "--node-name", NODE, "--kubelet-dir", str(root), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    configs = write_configs(root / "configs", {"default": {"version": "v1"}})
    (root / "c.yaml").write_text("version: v1\n")
    out = run("--config-dir", str(configs), "--config-file", str(root / "c.yaml"))
    assert (out.returncode, out.stderr.strip()) == (
        2,
        "fakegpu: error: --config-dir: cannot be combined with --config-file; the node label picks the file",
    )
    out = run("--default-config", "x")
    assert (out.returncode, out.stderr.strip()) == (
        2,
        "fakegpu: error: --default-config: only applies with --config-dir",
    )
    out = run("--config-dir", str(configs), "--fallback-strategies", "named,whatever")
    assert out.returncode == 2
    assert "--fallback-strategies: unknown fallback strategy: whatever" in out.stderr
    assert "Traceback" not in out.stderr
    out = run("--config-dir", str(configs), "--default-config", "gone")
    assert (out.returncode, out.stderr.strip()) == (
        2,
        "fakegpu: error: --default-config: specified config gone does not exist (available: default)",
    )
    out = run("--label-node", "--kubeconfig", str(root / "missing-kubeconfig"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"fakegpu: error: {root / 'missing-kubeconfig'}: ")
    (root / "bad-kubeconfig").write_text("clusters: [\n")
    out = run("--label-node", "--kubeconfig", str(root / "bad-kubeconfig"))
    assert out.returncode == 2 and "not valid YAML" in out.stderr and "Traceback" not in out.stderr


async def test_a_failed_label_update_names_the_server_and_counts_its_attempts(
    root: Path, apiserver: FakeApiServer, daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 15 §3: the node sync's API errors name the server and the kubeconfig, with the retry count."""
    caplog.set_level(logging.WARNING, logger="fakegpu.fakeplugin.node_sync")
    apiserver.fail_next("patch", "nodes", 500, times=2, message="etcd is having a bad day")
    node = settings(apiserver, root, label_node=True)
    await daemon(node)
    await eventually(lambda: "nvidia.com/gpu.count" in node_labels(apiserver), "the labels after two failures", 10.0)
    failures = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"updating node {NODE} failed")]
    assert len(failures) == 2, failures
    for attempt, line in enumerate(failures, start=1):
        assert re.fullmatch(
            rf"updating node {NODE} failed \(attempt {attempt}, next in [\d.]+ s\): etcd is having a bad day"
            rf" \(API server {re.escape(apiserver.url)}, kubeconfig {re.escape(node.kubeconfig or '')}\)",
            line,
        ), line
