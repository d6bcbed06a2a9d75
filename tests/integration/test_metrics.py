"""``--metrics-address`` and ``--log-format``: both daemons scraped over HTTP while the kubelet acts.

The daemons run as they do in production (``run_plugin_daemon`` next to the kubelet emulator,
``run_dra_daemon`` against the in-process API server), every change goes through a real interface
(kubelet calls, raw gRPC, the admin socket), and each test asserts exact metric names, label sets and
values. ``EXPECTED_*`` pin every metric name and label name: renaming one must fail here first,
because dashboards and alerts depend on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from fakegpu.cli.main import main
from fakegpu.control.client import admin_call
from fakegpu.dra.daemon import DraSettings, run_dra_daemon
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.fakeplugin.daemon import run_plugin_daemon
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from fakegpu.kubeletapi.dra.v1 import api_pb2 as v1
from fakegpu.kubeletapi.dra.v1 import api_pb2_grpc as v1_grpc
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.runtime.plugin_registration import registry_socket_name
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.telemetry.http_endpoint import ListenAddress
from fakegpu.telemetry.rpc_metrics import fakegpu_version
from fakegpu.telemetry.telemetry_settings import TelemetrySettings
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.claim_builders import allocated_claim
from tests.dra_kubelet_client import get_info, prepare, prepare_v1beta1, unprepare
from tests.eventually import eventually
from tests.http_get import http_get

GPU = "nvidia.com/gpu"
NODE = "metrics-node"
DRIVER = "gpu.nvidia.com"
ANY_PORT = ListenAddress("127.0.0.1", 0)

EXPECTED_DEVICE_PLUGIN = {
    # exposition name: (type, label names of its samples)
    "fakegpu_build_info": ("gauge", {"version"}),
    "fakegpu_config_reloads_total": ("counter", {"result"}),
    "fakegpu_device_plugin_devices": ("gauge", {"resource", "health"}),
    "fakegpu_device_plugin_list_and_watch_sends_total": ("counter", {"resource"}),
    "fakegpu_device_plugin_list_and_watch_streams": ("gauge", {"resource"}),
    "fakegpu_device_plugin_registration_failures_total": ("counter", {"resource"}),
    "fakegpu_device_plugin_registrations_total": ("counter", {"resource"}),
    "fakegpu_device_plugin_reregistrations_total": ("counter", {"resource"}),
    "fakegpu_device_plugin_rpc_duration_seconds": ("histogram", {"resource", "method"}),
    "fakegpu_device_plugin_rpc_requests_total": ("counter", {"resource", "method", "code"}),
}
EXPECTED_DRA = {
    "fakegpu_build_info": ("gauge", {"version"}),
    "fakegpu_config_reloads_total": ("counter", {"result"}),
    "fakegpu_dra_claim_prepares_total": ("counter", {"result"}),
    "fakegpu_dra_claim_unprepares_total": ("counter", {"result"}),
    "fakegpu_dra_devices": ("gauge", {"health"}),
    "fakegpu_dra_prepared_claims": ("gauge", set()),
    "fakegpu_dra_registration_failures_total": ("counter", set()),
    "fakegpu_dra_registrations_total": ("counter", set()),
    "fakegpu_dra_resourceslice_publishes_total": ("counter", {"result"}),
    "fakegpu_dra_rpc_duration_seconds": ("histogram", {"method"}),
    "fakegpu_dra_rpc_requests_total": ("counter", {"method", "code"}),
}
HISTOGRAM_SAMPLES = {"_bucket", "_count", "_sum"}


# --- scraping ----------------------------------------------------------------------------------------


class Scrape:
    """One scrape: ``scrape["name", {"label": "value"}]`` is a sample's value (an assertion fails if absent)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.label_names: dict[str, set[frozenset[str]]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                self.samples[s.name, frozenset(s.labels.items())] = s.value
                self.label_names.setdefault(s.name, set()).add(frozenset(s.labels))

    def __getitem__(self, key: tuple[str, dict[str, str]]) -> float:
        name, labels = key
        value = self.samples.get((name, frozenset(labels.items())))
        assert value is not None, f"no sample {name} {labels} in the scrape"
        return value

    def get(self, name: str, labels: dict[str, str], default: float = 0.0) -> float:
        return self.samples.get((name, frozenset(labels.items())), default)

    def shape(self, prefix: str = "fakegpu_") -> dict[str, tuple[str, set[str]]]:
        """Each metric (as exposed: counters with ``_total``) with its type and the label names of its samples."""
        out: dict[str, tuple[str, set[str]]] = {}
        for name, kind in self.types.items():
            if not name.startswith(prefix):
                continue
            sample_names = [name + s for s in HISTOGRAM_SAMPLES] if kind == "histogram" else [name]
            label_sets = set().union(*(self.label_names.get(n, set()) for n in sample_names))
            assert len(label_sets) <= 2, f"{name} has samples with different label names: {label_sets}"
            labels = set().union(*label_sets) - {"le"}
            if kind == "histogram":
                assert self.label_names[name + "_bucket"] == {frozenset(labels | {"le"})}
            out[name] = (kind, labels)
        return out


async def scrape(url: str) -> Scrape:
    status, headers, body = await http_get(url)
    assert (status, headers["content-type"]) == (200, CONTENT_TYPE_LATEST)
    return Scrape(body)


def metrics_url(caplog: pytest.LogCaptureFixture) -> str:
    urls = [m for r in caplog.records if (m := re.fullmatch(r"serving metrics on (\S+)", r.getMessage()))]
    assert len(urls) == 1, "one daemon, one metrics endpoint"
    return urls[0].group(1)


# --- the device plugin -------------------------------------------------------------------------------


@pytest.fixture
async def plugin_daemon(
    root: Path, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[tuple[KubeletEmulator, str, Path]]:
    """The kubelet emulator and ``run_plugin_daemon`` (2 GPUs, metrics on a free port, an admin socket)."""
    caplog.set_level(logging.INFO, logger="fakegpu.telemetry.http_endpoint")
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    admin = root / "admin.sock"
    task = asyncio.create_task(
        run_plugin_daemon(
            InventoryInputs(node_name=NODE, gpus=("2xa100-40gb",)),
            KubeletPaths(root / "kubelet"),
            stop=stop,
            admin_socket=admin,
            telemetry=TelemetrySettings(metrics_address=ANY_PORT),
        )
    )
    await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 2 or task.done(), 10.0, "devices")
    if task.done():
        task.result()
    try:
        yield kubelet, metrics_url(caplog), admin
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)
        if kubelet.running:
            await kubelet.stop()


def rpc(method: str, code: str = "OK") -> dict[str, str]:
    return {"resource": GPU, "method": method, "code": code}


async def allocate(kubelet: KubeletEmulator, ids: list[str]) -> None:
    socket = kubelet.paths.device_plugins / "nvidia-gpu.sock"
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)])
        await api_pb2_grpc.DevicePluginStub(channel).Allocate(request, timeout=5)


async def test_device_plugin_metrics_follow_what_the_kubelet_does(plugin_daemon):
    kubelet, url, admin = plugin_daemon
    by_resource = {"resource": GPU}

    m = await scrape(url)
    assert m["fakegpu_build_info", {"version": fakegpu_version()}] == 1
    assert m["fakegpu_device_plugin_registrations_total", by_resource] == 1
    assert m["fakegpu_device_plugin_reregistrations_total", by_resource] == 0
    assert m["fakegpu_device_plugin_registration_failures_total", by_resource] == 0
    assert m["fakegpu_device_plugin_devices", {"resource": GPU, "health": "Healthy"}] == 2
    assert m["fakegpu_device_plugin_devices", {"resource": GPU, "health": "Unhealthy"}] == 0
    assert m["fakegpu_device_plugin_list_and_watch_streams", by_resource] == 1
    assert m["fakegpu_device_plugin_list_and_watch_sends_total", by_resource] == 1
    assert m["fakegpu_device_plugin_rpc_requests_total", rpc("GetDevicePluginOptions")] == 1
    options_calls = {"resource": GPU, "method": "GetDevicePluginOptions"}
    assert m["fakegpu_device_plugin_rpc_duration_seconds_count", options_calls] == 1
    assert m["fakegpu_config_reloads_total", {"result": "success"}] == 0
    assert m["fakegpu_config_reloads_total", {"result": "failure"}] == 0

    # A pod: the kubelet asks for a preference, then allocates.
    assert (await kubelet.run_pod("p1", {"c": {GPU: 1}})).admitted
    # An unknown device ID: UNKNOWN (NVIDIA's plain Go error) with NVIDIA's text.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await allocate(kubelet, ["GPU-does-not-exist"])
    assert refused.value.code() == grpc.StatusCode.UNKNOWN
    # An injected fault counts with its code.
    await admin_call(admin, "fault", method="Allocate", code="UNAVAILABLE", message="boom")
    assert not (await kubelet.run_pod("p2", {"c": {GPU: 1}})).admitted
    m = await scrape(url)
    assert m["fakegpu_device_plugin_rpc_requests_total", rpc("GetPreferredAllocation")] == 2
    assert m["fakegpu_device_plugin_rpc_requests_total", rpc("Allocate")] == 1
    assert m["fakegpu_device_plugin_rpc_requests_total", rpc("Allocate", "UNKNOWN")] == 1
    assert m["fakegpu_device_plugin_rpc_requests_total", rpc("Allocate", "UNAVAILABLE")] == 1
    assert m["fakegpu_device_plugin_rpc_duration_seconds_count", {"resource": GPU, "method": "Allocate"}] == 3

    # A GPU goes bad: the gauge follows and the stream sends the new list.
    await admin_call(admin, "health", target="0", healthy=False)
    await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 1, 5.0, "GPU 0 unhealthy")
    m = await scrape(url)
    assert m["fakegpu_device_plugin_devices", {"resource": GPU, "health": "Healthy"}] == 1
    assert m["fakegpu_device_plugin_devices", {"resource": GPU, "health": "Unhealthy"}] == 1
    assert m["fakegpu_device_plugin_list_and_watch_sends_total", by_resource] == 2

    # A reload through the admin socket.
    await admin_call(admin, "reload")
    assert (await scrape(url))["fakegpu_config_reloads_total", {"result": "success"}] == 1

    # The kubelet restarts: the plugin registers again, on a new stream.
    await kubelet.stop()
    await kubelet.start()

    async def registered_again() -> None:
        m = await scrape(url)
        assert m["fakegpu_device_plugin_registrations_total", by_resource] == 2
        assert m["fakegpu_device_plugin_reregistrations_total", by_resource] == 1
        assert m["fakegpu_device_plugin_list_and_watch_streams", by_resource] == 1
        assert m["fakegpu_device_plugin_list_and_watch_sends_total", by_resource] == 3
        # The old stream ended when the kubelet went away: the client cancelled it.
        assert m["fakegpu_device_plugin_rpc_requests_total", rpc("ListAndWatch", "CANCELLED")] == 1
        assert m.get("fakegpu_device_plugin_rpc_requests_total", rpc("ListAndWatch", "OK")) == 0
        assert m["fakegpu_device_plugin_rpc_requests_total", rpc("GetDevicePluginOptions")] == 2
        assert m["fakegpu_device_plugin_registration_failures_total", by_resource] == 0

    await eventually(registered_again, "re-registration after the kubelet restart")


async def test_device_plugin_metric_names_and_labels_are_pinned(plugin_daemon):
    kubelet, url, _ = plugin_daemon
    assert (await kubelet.run_pod("p1", {"c": {GPU: 1}})).admitted
    m = await scrape(url)
    assert m.shape() == EXPECTED_DEVICE_PLUGIN
    others = {name for name in m.types if not name.startswith("fakegpu_")}
    assert others and all(n.startswith(("process_", "python_")) for n in others), others


async def test_every_fake_node_has_its_own_registry(fakegpu_node):
    """Two device plugin daemons in one process (tests, the demo) count apart and never clash."""
    a = await fakegpu_node("2xa100-40gb", node_name="a")
    b = await fakegpu_node("1xt4", node_name="b")
    assert a.plugins.metrics.registry is not b.plugins.metrics.registry
    await a.set_health("0", healthy=False)
    assert (
        a.plugins.metrics.registry.get_sample_value(
            "fakegpu_device_plugin_devices", {"resource": GPU, "health": "Unhealthy"}
        )
        == 1
    )
    assert (
        b.plugins.metrics.registry.get_sample_value(
            "fakegpu_device_plugin_devices", {"resource": GPU, "health": "Healthy"}
        )
        == 1
    )


async def notify(registration_socket: Path, registered: bool, error: str = "") -> None:
    """What the kubelet's plugin watcher says after GetInfo."""
    async with grpc.aio.insecure_channel(f"unix://{registration_socket}") as channel:
        status = reg.RegistrationStatus(plugin_registered=registered, error=error)
        await reg_grpc.RegistrationStub(channel).NotifyRegistrationStatus(status, timeout=5)


async def test_plugins_registry_registrations_are_counted_from_the_kubelets_notification(fakegpu_node):
    """In plugins-registry mode the kubelet's plugin watcher registers the plugin: its
    NotifyRegistrationStatus is what the registration counters count."""
    node = await fakegpu_node("2xl4", registration="plugins-registry")
    registry = node.plugins.metrics.registry
    by_resource = {"resource": GPU}

    def value(name: str) -> float | None:
        found: float | None = registry.get_sample_value(name, by_resource)
        return found

    assert value("fakegpu_device_plugin_registrations_total") == 1
    assert value("fakegpu_device_plugin_reregistrations_total") == 0
    await node.kubelet.stop()
    await node.kubelet.start()
    await node.wait_synced()
    assert value("fakegpu_device_plugin_registrations_total") == 2
    assert value("fakegpu_device_plugin_reregistrations_total") == 1
    assert value("fakegpu_device_plugin_registration_failures_total") == 0
    socket = node.kubelet.paths.plugins_registry / registry_socket_name(GPU)
    await notify(socket, False, "incompatible version")
    assert value("fakegpu_device_plugin_registration_failures_total") == 1
    assert value("fakegpu_device_plugin_registrations_total") == 2


# --- the DRA driver ----------------------------------------------------------------------------------


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE, strict=False) as server:
        yield server
        assert server.errors == []


@pytest.fixture
async def dra_daemon(
    root: Path, apiserver: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[tuple[Path, str, Path]]:
    """``run_dra_daemon`` for 2 H100s: (DRA socket, metrics URL, admin socket); stopped before the server."""
    caplog.set_level(logging.INFO, logger="fakegpu.telemetry.http_endpoint")
    paths = KubeletPaths(root / "kubelet")
    settings = DraSettings(  # with NVIDIA's health gate, so a health change republishes the slices
        cdi_root=root / "cdi",
        kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig")),
        feature_gates=parse_feature_gates("NVMLDeviceHealthCheck=true"),
    )
    stop = asyncio.Event()
    admin = root / "dra-admin.sock"
    task = asyncio.create_task(
        run_dra_daemon(
            InventoryInputs(node_name=NODE, gpus=("2xh100-80gb",)),
            paths,
            settings,
            stop=stop,
            admin_socket=admin,
            telemetry=TelemetrySettings(metrics_address=ANY_PORT),
        )
    )
    try:
        await eventually(
            lambda: task.done() or any(r.getMessage().startswith("serving metrics") for r in caplog.records),
            "serving metrics",
        )
        if task.done():
            task.result()
        url = metrics_url(caplog)

        async def published() -> None:
            assert (await scrape(url))["fakegpu_dra_resourceslice_publishes_total", {"result": "success"}] == 1

        await eventually(published, "the first publish")
        yield paths.dra_socket(DRIVER), url, admin
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)


async def test_dra_metrics_follow_claims_and_health(dra_daemon, apiserver):
    socket, url, admin = dra_daemon
    m = await scrape(url)
    assert m["fakegpu_dra_devices", {"health": "Healthy"}] == 2
    assert m["fakegpu_dra_devices", {"health": "Unhealthy"}] == 0
    assert m["fakegpu_dra_prepared_claims", {}] == 0
    assert m["fakegpu_dra_resourceslice_publishes_total", {"result": "failure"}] == 0
    assert m["fakegpu_dra_claim_prepares_total", {"result": "success"}] == 0

    uid = apiserver.create_direct(allocated_claim("c1", NODE, ["gpu-1"]))["metadata"]["uid"]
    assert (await prepare(socket, [("default", "c1", uid)])).claims[uid].error == ""
    # A missing claim fails alone: its call still succeeds.
    assert (await prepare(socket, [("default", "gone", "0000")])).claims["0000"].error
    # The same claim again over v1beta1 (idempotent): one prepared claim.
    assert (await prepare_v1beta1(socket, [("default", "c1", uid)])).claims[uid].error == ""
    m = await scrape(url)
    assert m["fakegpu_dra_prepared_claims", {}] == 1
    assert m["fakegpu_dra_claim_prepares_total", {"result": "success"}] == 2
    assert m["fakegpu_dra_claim_prepares_total", {"result": "failure"}] == 1
    assert m["fakegpu_dra_rpc_requests_total", {"method": "NodePrepareResources", "code": "OK"}] == 3
    assert m["fakegpu_dra_rpc_duration_seconds_count", {"method": "NodePrepareResources"}] == 3

    await admin_call(admin, "fault", method="NodePrepareResources", code="UNAVAILABLE")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await prepare(socket, [("default", "c1", uid)])
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert (await unprepare(socket, [("default", "c1", uid)])).claims[uid].error == ""
    m = await scrape(url)
    assert m["fakegpu_dra_rpc_requests_total", {"method": "NodePrepareResources", "code": "UNAVAILABLE"}] == 1
    assert m["fakegpu_dra_rpc_requests_total", {"method": "NodeUnprepareResources", "code": "OK"}] == 1
    assert m["fakegpu_dra_claim_unprepares_total", {"result": "success"}] == 1
    assert m["fakegpu_dra_prepared_claims", {}] == 0

    await admin_call(admin, "health", target="gpu-1", healthy=False)

    async def tainted() -> None:
        m = await scrape(url)
        assert m["fakegpu_dra_devices", {"health": "Healthy"}] == 1
        assert m["fakegpu_dra_devices", {"health": "Unhealthy"}] == 1
        assert m["fakegpu_dra_resourceslice_publishes_total", {"result": "success"}] == 2

    await eventually(tainted, "the taint to be published")


async def test_dra_registrations_are_counted_from_the_kubelets_notification(dra_daemon, root):
    _, url, _ = dra_daemon
    registration = KubeletPaths(root / "kubelet").plugins_registry / registry_socket_name(DRIVER)
    m = await scrape(url)
    assert m["fakegpu_dra_registrations_total", {}] == 0
    assert m["fakegpu_dra_registration_failures_total", {}] == 0
    assert (await get_info(registration)).name == DRIVER  # GetInfo, then plugin_registered: true
    m = await scrape(url)
    assert m["fakegpu_dra_registrations_total", {}] == 1
    await notify(registration, False, "no DRA handler for version v2")
    await get_info(registration)  # the kubelet restarted and registered it again
    m = await scrape(url)
    assert m["fakegpu_dra_registrations_total", {}] == 2
    assert m["fakegpu_dra_registration_failures_total", {}] == 1


async def test_an_rpc_past_its_deadline_counts_as_deadline_exceeded(dra_daemon, apiserver):
    """grpc cancels the handler of a call whose deadline passed: the client saw DEADLINE_EXCEEDED, and so
    must the metrics, not CANCELLED (which is a client that went away)."""
    socket, url, admin = dra_daemon
    await admin_call(admin, "fault", method="NodeUnprepareResources", delay=2.0)
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = v1_grpc.DRAPluginStub(channel)
        request = v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(namespace="default", name="c", uid="u")])
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await stub.NodeUnprepareResources(request, timeout=0.2)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    async def counted() -> None:
        m = await scrape(url)
        unprepares = {"method": "NodeUnprepareResources"}
        assert m["fakegpu_dra_rpc_requests_total", {**unprepares, "code": "DEADLINE_EXCEEDED"}] == 1
        assert m.get("fakegpu_dra_rpc_requests_total", {**unprepares, "code": "CANCELLED"}) == 0

    await eventually(counted, "the late call to be counted")


async def test_dra_metric_names_and_labels_are_pinned(dra_daemon, apiserver):
    socket, url, _ = dra_daemon
    uid = apiserver.create_direct(allocated_claim("c1", NODE, ["gpu-0"]))["metadata"]["uid"]
    assert (await prepare(socket, [("default", "c1", uid)])).claims[uid].error == ""
    m = await scrape(url)
    assert m.shape() == EXPECTED_DRA
    others = {name for name in m.types if not name.startswith("fakegpu_")}
    assert others and all(n.startswith(("process_", "python_")) for n in others), others


# --- off by default, bad addresses, the CLI ----------------------------------------------------------


def listening_sockets() -> set[str]:
    """Local addresses of this process's network namespace in LISTEN state (TCP over IPv4 and IPv6)."""
    found = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":
                    found.add(fields[1])
    return found


async def test_no_metrics_listener_unless_asked(root):
    if not Path("/proc/self/net/tcp").exists():
        pytest.skip("needs /proc/self/net/tcp")
    before = listening_sockets()
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    inputs = InventoryInputs(node_name=NODE, gpus=("1xt4",))
    task = asyncio.create_task(run_plugin_daemon(inputs, KubeletPaths(root / "kubelet"), stop=stop))
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 1, 10.0, "devices")
        assert listening_sockets() == before
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)
        await kubelet.stop()


@pytest.mark.parametrize("command", ["plugin", "dra"])
def test_cli_rejects_a_bad_address_in_one_line(command, capsys, tmp_path):
    code = main([command, "--kubelet-dir", str(tmp_path), "--gpus", "1xt4", "--metrics-address", "localhost"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err == (
        "fakegpu: error: --metrics-address: 'localhost': no port; "
        "expected HOST:PORT, [IPV6]:PORT, :PORT or PORT, with PORT from 0 to 65535\n"
    )


def test_cli_defaults_metrics_off_and_logs_text(capsys):
    with pytest.raises(SystemExit):
        main(["plugin", "--help"])
    help_text = capsys.readouterr().out
    assert "--metrics-address HOST:PORT" in help_text
    assert "0.0.0.0:PORT" in help_text
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--log-format {text,json}" in capsys.readouterr().out


async def test_json_logs_one_line_per_rpc_at_debug(root):
    """``fakegpu --log-format json --log-level debug plugin``: every stderr line is a JSON object, and
    each RPC the kubelet makes gives exactly one line naming it."""
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fakegpu",
        "--log-format",
        "json",
        "--log-level",
        "debug",
        "plugin",
        "--kubelet-dir",
        str(root / "kubelet"),
        "--gpus",
        "1xt4",
        "--node-name",
        NODE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    stderr = asyncio.create_task(proc.stderr.read())  # read all along: a full pipe would stall the plugin
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 1, 15.0, "the plugin's devices")
        assert (await kubelet.run_pod("p1", {"c": {GPU: 1}})).admitted
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10.0) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await kubelet.stop()
    lines = (await stderr).decode().splitlines()
    docs = [json.loads(line) for line in lines]  # every line parses
    assert all({"time", "level", "logger", "message"} <= set(d) for d in docs)
    assert any(d["message"] == f"serving {GPU} for node {NODE}" and d["level"] == "info" for d in docs)
    # Debug is fakegpu's own: no library chatter (grpc logs each event loop lookup) between the RPC lines.
    debug_sources = {".".join(d["logger"].split(".")[:2]) for d in docs if d["level"] == "debug"}
    own = {"fakegpu.fakeplugin", "fakegpu.runtime", "fakegpu.sharing", "fakegpu.telemetry"}
    assert debug_sources <= own, debug_sources
    rpcs = [d for d in docs if "method" in d and "code" in d]
    assert {d["logger"] for d in rpcs} == {"fakegpu.fakeplugin.rpc"}
    assert all(d["level"] == "debug" and d["resource"] == GPU and d["duration_seconds"] >= 0 for d in rpcs)
    assert Counter((d["method"], d["code"]) for d in rpcs) == {
        ("GetDevicePluginOptions", "OK"): 1,
        ("ListAndWatch", "OK"): 1,  # ended by the SIGTERM
        ("GetPreferredAllocation", "OK"): 1,
        ("Allocate", "OK"): 1,
    }
    allocate = next(d for d in rpcs if d["method"] == "Allocate")
    assert len(allocate["devices"]) == 1 and allocate["devices"][0].startswith("GPU-")
    assert re.fullmatch(rf"{GPU} Allocate: OK in \d+\.\d ms \[{allocate['devices'][0]}\]", allocate["message"])
