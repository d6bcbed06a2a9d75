"""``fakegpu cleanup --host-root`` on a node's tree the real daemons wrote: afterwards the tree is as before.

The tree is laid out as on a node (the kubelet's directory with its own checkpoint and another driver's
files, the container runtime's CDI directory with another vendor's spec). The device plugin (CDI
strategy, nvidia-smi injection, MPS, registered through ``plugins_registry/``) and ``fakegpu dra
--compute-domains`` (nvidia-smi injection, MPS allowed) run as processes with every path under the host root,
as the overlays set them; the test plays the kubelet: an Allocate whose MPS mounts it creates as a container
runtime does, a GPU claim with MPS, a compute-domain channel claim and the IMEX daemon's claim, each
prepared. Then both daemons are SIGKILLed, which no exit path survives, and cleanup must leave exactly the
tree taken before they started: nothing of fakegpu's left, nothing else touched.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from fakegpu.cli.cleanup_command import run_cleanup
from fakegpu.cli.main import full_parser
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from tests.apiserver import FakeApiServer, serving
from tests.claim_builders import (
    COMPUTE_DOMAIN_DRIVER,
    allocated_claim,
    channel_claim,
    compute_domain,
    daemon_claim,
    gpu_config,
    opaque_config,
)
from tests.dra_kubelet_client import prepare
from tests.eventually import eventually

NODE = "gb200-node-0"
DRIVER_NS = "fakegpu"
NODE_SPEC = """
version: v1
machine: GB200-NVL
fabric: {clusterUUID: 6a0b0570-d223-511b-b780-5222f79fbb84, cliqueID: 1}
gpus: [{model: gb200, count: 4}]
"""
PLUGIN_CONFIG = {
    "version": "v1",
    "flags": {"plugin": {"deviceListStrategy": "cdi-cri"}},
    "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}},
}
NOT_READY = "current node not ready in ComputeDomain"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE, nvidia_crds=True, strict=False) as server:
        yield server


def lay_out_node(host: Path) -> None:
    """What a node has before fakegpu comes: the kubelet's directories and files, another DRA driver, the CDI
    directory with another vendor's spec; ``/var/run`` a link to ``/run``."""
    kubelet = host / "var/lib/kubelet"
    for sub in ("device-plugins", "plugins_registry", "plugins/example.com", "pod-resources"):
        (kubelet / sub).mkdir(parents=True)
    (kubelet / "device-plugins/kubelet_internal_checkpoint").write_text('{"Data":{},"Checksum":1}\n')
    (kubelet / "plugins/example.com/state.json").write_text("{}\n")
    (host / "run/cdi").mkdir(parents=True)
    (host / "var/run").symlink_to("../run")  # as on most nodes (absolute there; relative here, to stay inside)
    (host / "var/run/cdi/example.com-gpu.yaml").write_text("cdiVersion: 0.5.0\n")


def snapshot(host: Path) -> dict[str, bytes | str]:
    """Every path under ``host``: a file's bytes, else its kind."""
    found: dict[str, bytes | str] = {}
    for path in sorted(host.rglob("*")):
        rel = str(path.relative_to(host))
        if path.is_symlink():
            found[rel] = "link"
        elif path.is_socket():
            found[rel] = "socket"
        elif path.is_dir():
            found[rel] = "directory"
        else:
            found[rel] = path.read_bytes()
    return found


def start(root: Path, name: str, *args: str) -> subprocess.Popen[str]:
    log = (root / f"{name}.log").open("w")
    return subprocess.Popen([sys.executable, "-m", "fakegpu", *args], stderr=log, stdout=log, text=True)


def log_of(root: Path, name: str) -> str:
    return (root / f"{name}.log").read_text()


async def allocate_as_a_kubelet(socket: Path) -> list[api_pb2.Mount]:
    """Allocate one GPU replica; the container runtime creates the host paths of its mounts that do not exist."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = api_pb2_grpc.DevicePluginStub(channel)
        devices = await anext(aiter(stub.ListAndWatch(api_pb2.Empty(), timeout=10)))
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[devices.devices[0].ID])]
        )
        response = await stub.Allocate(request, timeout=10)
    mounts = list(response.container_responses[0].mounts)
    for mount in mounts:
        if not os.path.lexists(mount.host_path):
            Path(mount.host_path).mkdir(parents=True)
    return mounts


async def prepared(apiserver: FakeApiServer, socket: Path, claim: dict[str, Any]) -> None:
    """Create the claim and prepare it as the kubelet does, retrying while the node's IMEX daemon is not Ready."""
    meta = apiserver.create_direct(claim)["metadata"]
    ref = (meta["namespace"], meta["name"], meta["uid"])

    async def attempt() -> tuple[str]:
        error = (await prepare(socket, [ref])).claims[ref[2]].error
        assert NOT_READY not in error
        return (str(error),)

    assert await eventually(attempt, f"claim {meta['name']} prepared", 20.0) == ("",)


async def cleanup(host: Path, *flags: str) -> str:
    out = io.StringIO()
    args = full_parser().parse_args(["cleanup", "--node", NODE, "--skip-api", "--host-root", str(host), *flags])
    assert await run_cleanup(args, out=out) == 0
    return out.getvalue()


async def test_cleanup_leaves_the_tree_as_it_was_before_the_daemons(apiserver, root):
    host = root / "host"
    lay_out_node(host)
    before = snapshot(host)
    kubelet, run, cdi = host / "var/lib/kubelet", host / "var/run/fakegpu", host / "var/run/cdi"
    (root / "node.yaml").write_text(NODE_SPEC)
    (root / "config.yaml").write_text(yaml.safe_dump(PLUGIN_CONFIG))
    kubeconfig = str(apiserver.kubeconfig(root / "kubeconfig"))
    inventory = ["--node-name", NODE, "--node-spec", str(root / "node.yaml")]
    plugin = start(
        root,
        "plugin",
        "plugin",
        *inventory,
        "--kubelet-dir",
        str(kubelet),
        "--registration",
        "plugins-registry",
        "--config-file",
        str(root / "config.yaml"),
        "--mps-root",
        str(host / "run/nvidia/mps"),
        "--cdi-root",
        str(cdi),
        "--inject-nvidia-smi",
        "--nvidia-smi-dir",
        str(run / "nvidia-smi/device-plugin"),
        "--admin-socket",
        str(run / "plugin.sock"),
    )
    dra = start(
        root,
        "dra",
        "dra",
        *inventory,
        "--kubeconfig",
        kubeconfig,
        "--kubelet-dir",
        str(kubelet),
        "--cdi-root",
        str(cdi),
        "--feature-gates",
        "MPSSupport=true",
        "--inject-nvidia-smi",
        "--nvidia-smi-dir",
        str(run / "nvidia-smi/dra"),
        "--admin-socket",
        str(run / "dra.sock"),
        "--compute-domains",
        "--namespace",
        DRIVER_NS,
        "--imex-daemon-start-delay",
        "0",
    )
    gpu_socket = kubelet / "plugins/gpu.nvidia.com/dra.sock"
    domain_socket = kubelet / f"plugins/{COMPUTE_DOMAIN_DRIVER}/dra.sock"
    try:
        sockets = (kubelet / "device-plugins/nvidia-gpu.sock", gpu_socket, domain_socket, run / "dra.sock")

        def daemons_serving() -> bool:
            assert plugin.poll() is None, log_of(root, "plugin")
            assert dra.poll() is None, log_of(root, "dra")
            return all(s.is_socket() for s in sockets)

        await eventually(daemons_serving, "both daemons serving their sockets", 30.0)
        mounts = await allocate_as_a_kubelet(sockets[0])
        assert str(host / "run/nvidia/mps/shm") in {m.host_path for m in mounts}
        mps = opaque_config(gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}))
        await prepared(apiserver, gpu_socket, allocated_claim("gpu-mps", NODE, ["gpu-0"], config=[mps]))
        domain = apiserver.create_direct(compute_domain("cd"))["metadata"]["uid"]
        await prepared(apiserver, domain_socket, channel_claim("channel", NODE, domain))
        await prepared(apiserver, domain_socket, daemon_claim("imex-daemon", NODE, domain, namespace=DRIVER_NS))
    finally:
        for daemon in (plugin, dra):
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(10)
    written = snapshot(host)
    for what in (
        "var/lib/kubelet/plugins_registry/nvidia.com-gpu-reg.sock",
        "var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock",
        f"var/lib/kubelet/plugins_registry/{COMPUTE_DOMAIN_DRIVER}-reg.sock",
        "var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json",
        "var/lib/kubelet/plugins/gpu.nvidia.com/mps",
        f"var/lib/kubelet/plugins/{COMPUTE_DOMAIN_DRIVER}/checkpoint.json",
        f"var/lib/kubelet/plugins/{COMPUTE_DOMAIN_DRIVER}/domains",
        "run/cdi/k8s.device-plugin.nvidia.com-gpu.json",
        f"run/cdi/k8s.{COMPUTE_DOMAIN_DRIVER}-device_base.yaml",
        "run/fakegpu/nvidia-smi/dra/nvidia-smi",
        "run/fakegpu/plugin.sock",
        "run/nvidia/mps/shm",
    ):
        assert what in written, f"the daemons did not write {what}: the test would not check its removal"
    specs = [p for p in written if p.startswith("run/cdi/k8s.") and "-claim_" in p]
    assert len(specs) == 3, specs  # the GPU claim's, the channel's and the IMEX daemon's

    dry = await cleanup(host)
    assert snapshot(host) == written, "a dry run changes nothing"
    done = await cleanup(host, "--yes")
    assert snapshot(host) == before, done
    assert done.splitlines() == [
        line.replace("would remove", "removed").replace("would keep", "kept") for line in dry.splitlines()[:-1]
    ]
    assert f"kept file {kubelet / 'device-plugins/kubelet_internal_checkpoint'}" in done
    assert (await cleanup(host)).splitlines()[-1] == f"nothing of fakegpu's left on node {NODE}"
