"""``--health-address``: ``/readyz`` turns 200 only once the daemon does its job, tested by holding that job back.

The daemons run as in production (``run_plugin_daemon`` next to the kubelet emulator, ``run_dra_daemon``
against the in-process API server), and what they wait for is delayed by the test: a kubelet that is not
there yet or refuses the registration, an API server that refuses connections, a kubelet plugin watcher
that has not confirmed (or refused) the DRA driver's registration. Every wait goes through ``eventually``.

Upstream has no readiness to copy: NVIDIA/k8s-device-plugin's DaemonSet
(deployments/static/nvidia-device-plugin.yml) has no probe, and NVIDIA/k8s-dra-driver-gpu's
cmd/gpu-kubelet-plugin/health.go only checks that its registration and DRA sockets answer. What the readiness
follows is upstream's own sign of success: the kubelet's answer to ``Register``
(NVIDIA/k8s-device-plugin internal/plugin/server.go ``Start``) and, for DRA, published ResourceSlices and
the kubelet's NotifyRegistrationStatus (kubernetes staging/src/k8s.io/dynamic-resource-allocation/kubeletplugin).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from fakegpu.cli.compute_domain_controller_command import serve_compute_domain_controller
from fakegpu.cli.main import full_parser
from fakegpu.dra.daemon import DraSettings, run_dra_daemon
from fakegpu.fakeplugin.daemon import NodeSettings, run_plugin_daemon
from fakegpu.fakeplugin.node_sync import ConfigSelection
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubelet.plugin_watcher import PluginHandler, PluginWatcher, RegistrationRejected
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg_pb2
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.runtime.plugin_registration import registry_socket_name
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.telemetry.http_endpoint import ListenAddress
from fakegpu.telemetry.telemetry_settings import TelemetrySettings
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.claim_builders import compute_domain
from tests.daemon_tasks import stop_and_wait
from tests.eventually import eventually
from tests.http_get import http_get

GPU = "nvidia.com/gpu"
NODE = "ready-node"
DRIVER = "gpu.nvidia.com"
ANY_PORT = ListenAddress("127.0.0.1", 0)
PROBES = TelemetrySettings(health_address=ANY_PORT)


class GatedProxy:
    """A TCP port in front of the API server that refuses every connection until ``open()``: an API server
    that is unreachable, then reachable, at one fixed address (the daemon's kubeconfig names it)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.is_open = False
        self.refused = 0
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    def open(self) -> None:
        self.is_open = True

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.is_open:
            self.refused += 1
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        pumps = [asyncio.create_task(_pump(reader, up_writer)), asyncio.create_task(_pump(up_reader, writer))]
        self._pumps.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._pumps.discard(task)
            for w in (writer, up_writer):
                w.transport.abort()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE, strict=False) as server:
        yield server


@pytest.fixture
async def gate(apiserver: FakeApiServer) -> AsyncIterator[GatedProxy]:
    proxy = GatedProxy(apiserver.port)
    await proxy.start()
    yield proxy
    await proxy.stop()


def gated_kubeconfig(apiserver: FakeApiServer, proxy: GatedProxy, path: Path) -> str:
    """A kubeconfig for ``apiserver`` that goes through ``proxy``."""
    config: dict[str, Any] = yaml.safe_load(apiserver.kubeconfig(path).read_text())
    config["clusters"][0]["cluster"]["server"] = proxy.url
    path.write_text(yaml.safe_dump(config))
    return str(path)


class Probes:
    """The daemon's ``/healthz`` and ``/readyz``, found from its log line."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog

    def _base(self) -> str:
        for record in self.caplog.records:
            found = re.fullmatch(r"serving health checks on (http://\S+)/healthz, \S+/readyz", record.getMessage())
            if found:
                return found.group(1)
        raise AssertionError("no health endpoint logged yet")

    async def ready(self) -> tuple[int, str]:
        status, _, body = await http_get(self._base() + "/readyz")
        return status, body

    async def live(self) -> int:
        return (await http_get(self._base() + "/healthz"))[0]

    async def wait(self, status: int, body: str, what: str) -> None:
        async def check() -> None:
            assert await self.ready() == (status, body)

        await eventually(check, what, 10.0)


@pytest.fixture
def probes(caplog: pytest.LogCaptureFixture) -> Probes:
    caplog.set_level(logging.INFO, logger="fakegpu.telemetry.http_endpoint")
    return Probes(caplog)


@pytest.fixture
async def daemons() -> AsyncIterator[list[tuple[asyncio.Event, asyncio.Task[int]]]]:
    """Daemons a test started; each stopped afterwards, failing the test if it did not end cleanly."""
    started: list[tuple[asyncio.Event, asyncio.Task[int]]] = []
    yield started
    for stop, task in started:
        assert await stop_and_wait(stop, task) == [0]


def start(daemons: list[tuple[asyncio.Event, asyncio.Task[int]]], run: Any, *args: Any, **kw: Any) -> None:
    stop = asyncio.Event()
    daemons.append((stop, asyncio.create_task(run(*args, stop=stop, **kw))))


# --- the device plugin -------------------------------------------------------------------------------


async def test_plugin_is_ready_only_while_every_resource_is_registered(root, probes, daemons):
    """Two resources (mixed MIG); no kubelet yet, then one, then a kubelet restart: ready only in between."""
    paths = KubeletPaths(root / "kubelet")
    inputs = InventoryInputs(
        node_name=NODE,
        gpus=("1xh100-80gb", "1xl4"),
        mig_layout="all-1g.10gb",
        cli_flags={"mig_strategy": "mixed"},
    )
    start(daemons, run_plugin_daemon, inputs, paths, telemetry=PROBES)
    waiting = f" (waiting for {paths.kubelet_socket})"
    unregistered = "not registered with the kubelet: nvidia.com/gpu, nvidia.com/mig-1g.10gb"
    await probes.wait(503, f"not ready: {unregistered}{waiting}\n", "not ready without a kubelet")
    assert await probes.live() == 200

    kubelet = KubeletEmulator(root / "kubelet")
    both = {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 7}
    await kubelet.start()
    try:
        await probes.wait(200, "ok\n", "ready once the kubelet registered both resources")
        await eventually(lambda: kubelet.allocatable() == both, "the devices on the node")

        # The kubelet goes away: its registrations went with it; ready again once it is back and registered.
        await kubelet.stop()
        await probes.wait(503, f"not ready: {unregistered}{waiting}\n", "not ready while the kubelet is away")
        assert await probes.live() == 200
        await kubelet.start()
        await probes.wait(200, "ok\n", "ready after re-registration")
        await eventually(lambda: kubelet.allocatable() == both, "the devices on the node")
    finally:
        await kubelet.stop()


async def test_plugin_is_not_ready_while_the_kubelet_refuses_it(root, probes, daemons):
    """The kubelet's Register fails: not ready, with the kubelet's error, until a kubelet accepts it."""
    kubelet = KubeletEmulator(root / "kubelet")
    accepted = kubelet.registration.Register

    async def refuse(
        request: api_pb2.RegisterRequest, context: grpc.aio.ServicerContext[api_pb2.RegisterRequest, api_pb2.Empty]
    ) -> api_pb2.Empty:
        await context.abort(grpc.StatusCode.UNKNOWN, "kubelet is shutting down")
        raise AssertionError("abort returns no answer")

    kubelet.registration.Register = refuse  # type: ignore[method-assign]
    await kubelet.start()
    try:
        start(
            daemons, run_plugin_daemon, InventoryInputs(node_name=NODE, gpus=("2xl4",)), kubelet.paths, telemetry=PROBES
        )
        await probes.wait(
            503,
            "not ready: not registered with the kubelet: nvidia.com/gpu (last error: registering nvidia.com/gpu "
            f"with {kubelet.paths.kubelet_socket} failed: UNKNOWN: kubelet is shutting down; retrying every 30s)\n",
            "not ready while refused",
        )
        # A kubelet that accepts (restarted: the plugin registers at once, as NVIDIA's on kubelet.sock's creation).
        await kubelet.stop()
        kubelet.registration.Register = accepted  # type: ignore[method-assign]
        await kubelet.start()
        await probes.wait(200, "ok\n", "ready once accepted")
        await eventually(lambda: kubelet.allocatable() == {GPU: 2}, "the devices on the node")
    finally:
        await kubelet.stop()


async def test_plugin_is_not_ready_while_it_waits_for_its_nodes_config_label(root, apiserver, gate, probes, daemons):
    """The reading of issue 16: with the API server unreachable the plugin serves nothing; now /readyz says so."""
    configs = root / "configs"
    configs.mkdir()
    (configs / "default").write_text(yaml.safe_dump({"version": "v1"}))
    node = NodeSettings(selection=ConfigSelection(configs), kubeconfig=gated_kubeconfig(apiserver, gate, root / "kc"))
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    try:
        start(
            daemons,
            run_plugin_daemon,
            InventoryInputs(node_name=NODE, gpus=("2xl4",)),
            kubelet.paths,
            telemetry=PROBES,
            node=node,
        )
        reading = f"not ready: reading node {NODE}'s nvidia.com/device-plugin.config label from the API server\n"
        await probes.wait(503, reading, "not ready while the API server is unreachable")
        await eventually(lambda: gate.refused >= 1, "the plugin tried the API server")
        assert await probes.ready() == (503, reading)
        assert kubelet.allocatable() == {}
        gate.open()
        await probes.wait(200, "ok\n", "ready once the label is read and the GPUs registered")
        await eventually(lambda: kubelet.allocatable() == {GPU: 2}, "the devices on the node")
    finally:
        await kubelet.stop()


# --- the DRA driver ----------------------------------------------------------------------------------


class DraPluginWatcher:
    """The kubelet's plugin watcher for type DRAPlugin, accepting or refusing as the test says."""

    def __init__(self, registry_dir: Path) -> None:
        self.refusal: str | None = "DRA driver gpu.nvidia.com is not allowed on this node"

        async def register(info: reg_pb2.PluginInfo, endpoint: Path) -> None:
            if self.refusal is not None:
                raise RegistrationRejected(self.refusal)

        async def deregister(info: reg_pb2.PluginInfo) -> None:
            return None

        self.watcher = PluginWatcher(registry_dir, {"DRAPlugin": PluginHandler(register, deregister)}, 0.02)


async def test_dra_driver_is_ready_once_published_and_registered(root, apiserver, gate, probes, daemons):
    """Publication held back (the API server refuses connections), the kubelet's registration first missing,
    then refused, then confirmed: ready only once both are done."""
    paths = KubeletPaths(root / "kubelet")
    settings = DraSettings(cdi_root=root / "cdi", kubeconfig=gated_kubeconfig(apiserver, gate, root / "kc"))
    start(daemons, run_dra_daemon, InventoryInputs(node_name=NODE, gpus=("1xl4",)), paths, settings, telemetry=PROBES)
    unpublished = f"ResourceSlices for node {NODE} not published yet (last error: "
    unregistered = f"the kubelet has not registered {DRIVER} yet (no NotifyRegistrationStatus)"

    async def neither() -> None:
        status, body = await probes.ready()
        assert status == 503 and body.startswith(f"not ready: {unpublished}"), body
        assert body.endswith(f"); {unregistered}\n"), body

    await eventually(neither, "not ready: nothing published, nothing registered", 10.0)
    assert await probes.live() == 200

    kubelet = DraPluginWatcher(paths.plugins_registry)
    await kubelet.watcher.start()
    try:
        refused = f"the kubelet refused to register {DRIVER}: {kubelet.refusal}"

        async def refused_unpublished() -> None:
            status, body = await probes.ready()
            assert status == 503 and body.startswith(f"not ready: {unpublished}") and body.endswith(f"); {refused}\n")

        await eventually(refused_unpublished, "not ready: refused by the kubelet", 10.0)

        # The kubelet accepts a registration socket served anew (as after a kubelet restart).
        kubelet.refusal = None
        Path(paths.plugins_registry / f"{DRIVER}-reg.sock").unlink()

        async def unpublished_only() -> None:
            status, body = await probes.ready()
            assert status == 503 and body.startswith(f"not ready: {unpublished}") and ";" not in body, body

        await eventually(unpublished_only, "registered, still not published", 10.0)
        assert apiserver.objects("resourceslices") == []

        gate.open()
        await probes.wait(200, "ok\n", "ready once the slices are published")
        assert [s["spec"]["nodeName"] for s in apiserver.objects("resourceslices")] == [NODE]
    finally:
        await kubelet.watcher.stop()


async def test_plugins_registry_mode_is_ready_on_the_kubelets_word(fakegpu_node):
    """In plugins-registry mode the kubelet's NotifyRegistrationStatus is the registration
    (k8s.io/kubelet pluginregistration v1, as NVIDIA/k8s-device-plugin's plugin watcher path): readiness
    follows what it last said."""
    node = await fakegpu_node("2xl4", registration="plugins-registry")
    # The kubelet sends NotifyRegistrationStatus after it has taken the plugin's devices, so the fixture can
    # return before it arrives.
    await eventually(lambda: node.plugins.not_ready() is None, "the kubelet's word that the plugin is registered")
    socket = node.kubelet.paths.plugins_registry / registry_socket_name(GPU)
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        refused = reg_pb2.RegistrationStatus(plugin_registered=False, error="incompatible version")
        await stub.NotifyRegistrationStatus(refused, timeout=5)
        assert node.plugins.not_ready() == (
            "not registered with the kubelet: nvidia.com/gpu (the kubelet refused: incompatible version)"
        )
        await stub.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
    assert node.plugins.not_ready() is None


# --- the ComputeDomain controller --------------------------------------------------------------------

CONTROLLER = "system:serviceaccount:fakegpu:fakegpu-compute-domain-controller"


@pytest.fixture
def crd_apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer(nvidia_crds=True) as server:
        yield server


async def test_compute_domain_controller_is_ready_only_while_watching_and_reconciling(
    root, crd_apiserver, probes, daemons
):
    """The reading of issue 26 on a real Kubernetes v1.36.2 cluster: refused ``list`` on resourceslices, the
    controller retried forever while ``kubectl rollout status`` reported success. Now /readyz says so, and
    likewise while the watch of ComputeDomains or a domain's sync is refused; it is ready in between."""
    refused = {("list", "resourceslices")}
    crd_apiserver.authorize("sa", CONTROLLER, lambda r: (r.verb, r.resource) not in refused)
    kubeconfig = crd_apiserver.kubeconfig(root / "kc", token="sa")
    argv = ["compute-domain-controller", "--kubeconfig", str(kubeconfig), "--health-address", "127.0.0.1:0"]
    start(daemons, serve_compute_domain_controller, full_parser().parse_args([*argv, "--status-interval", "0.1"]))

    async def refused_with(prefix: str, refusal: str) -> bool:
        status, body = await probes.ready()
        assert status == 503 and body.startswith(f"not ready: {prefix}"), body
        return refusal in body

    def forbidden(verb: str, resource: str) -> str:
        return f'User "{CONTROLLER}" cannot {verb} resource "{resource}"'

    await eventually(
        lambda: refused_with("finding the resource.k8s.io version: ", forbidden("list", "resourceslices")),
        "not ready while the version discovery is forbidden",
        10.0,
    )
    assert await probes.live() == 200
    refused.clear()
    refused.add(("watch", "computedomains"))
    # A refused watch reaches the controller as lightkube's HTTP error, its status line without the message.
    await eventually(
        lambda: refused_with("following ComputeDomains: ", "403 Forbidden"),
        "not ready while the watch is forbidden",
        10.0,
    )
    refused.clear()
    await probes.wait(200, "ok\n", "ready once it lists, watches and has reconciled")

    refused.add(("create", "resourceclaimtemplates"))
    crd_apiserver.create_direct(compute_domain("cd"))
    await eventually(
        lambda: refused_with(
            "syncing ComputeDomain default/cd failed: ", forbidden("create", "resourceclaimtemplates")
        ),
        "not ready while a domain's sync is forbidden",
        10.0,
    )
    refused.clear()
    await probes.wait(200, "ok\n", "ready again once the domain syncs")
    assert crd_apiserver.get_object("resourceclaimtemplates", "imex-channel-0", "default") is not None
