"""``fakegpu cleanup --node N``: what a SIGKILLed plugin left, listed by a dry run and removed with ``--yes``.

The plugin runs as a real process (``python -m fakegpu plugin``) against the kubelet emulator and the
in-process API server, with every host location under a temporary root, and is ended with SIGKILL, which
no exit path survives. What NVIDIA's components leave is the model: GFD's labels stay when it cannot
remove its features file (NVIDIA/k8s-device-plugin ``cmd/gpu-feature-discovery/main.go``,
``removeOutputFile`` runs only on a normal exit), the device plugin's CDI specs
``k8s.device-plugin.nvidia.com-<class>.json`` (``internal/cdi/cdi.go``) are never removed by the plugin,
and the kubelet keeps an extended resource in the Node's status for its grace period after the plugin is
gone (kubernetes ``pkg/kubelet/cm/devicemanager/manager.go``, ``GetCapacity``).
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cli.cleanup_command import run_cleanup
from fakegpu.cli.host_leftovers import CDI_DIR_KEPT
from fakegpu.cli.main import full_parser
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.label_ownership import OWNED_LABELS_ANNOTATION
from tests.apiserver import FakeApiServer
from tests.apiserver.serving import serving
from tests.eventually import eventually

NODE = "gpu-node-1"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE, labels={"team": "ml"}) as server:
        yield server


def node(apiserver: FakeApiServer) -> dict[str, Any]:
    found = apiserver.get_object("nodes", NODE)
    assert found is not None
    return found


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


async def cleanup(apiserver: FakeApiServer, host: Path, *flags: str) -> str:
    out = io.StringIO()
    args = full_parser().parse_args(["cleanup", "--node", NODE, "--host-root", str(host), *flags])
    client = apiserver.client()
    try:
        assert await run_cleanup(args, client=client, out=out) == 0
    finally:
        await client.close()
    return out.getvalue()


async def test_cleanup_removes_what_a_sigkilled_plugin_left(apiserver, root):
    host = root / "host"
    run_dir = host / "var/run/fakegpu"
    run_dir.mkdir(parents=True)
    cdi = host / "var/run/cdi"
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    user_node = node(apiserver)
    user_node["metadata"]["annotations"] = {"team.example/owner": "ml"}
    user_node["status"] = {"capacity": {"cpu": "8", "pods": "110"}, "allocatable": {"cpu": "8", "pods": "110"}}
    apiserver.update_direct(user_node)
    before = node(apiserver)
    plugin = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fakegpu",
            "plugin",
            "--node-name",
            NODE,
            "--gpus",
            "2xa100-40gb",
            "--kubelet-dir",
            str(root / "kubelet"),
            "--label-node",
            "--kubeconfig",
            str(apiserver.kubeconfig(root / "kubeconfig")),
            "--inject-nvidia-smi",
            "--nvidia-smi-dir",
            str(run_dir / "nvidia-smi/device-plugin"),
            "--admin-socket",
            str(run_dir / "plugin.sock"),
            "--device-list-strategy",
            "cdi-cri",
            "--cdi-root",
            str(cdi),
        ],
        env={**os.environ, "FAKEGPU_CLEANUP_ON_EXIT": "always"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await eventually(
            lambda: "nvidia.com/gpu.count" in node(apiserver)["metadata"]["labels"] or plugin.poll() is not None,
            "the plugin's labels",
            timeout=30.0,
        )
        assert plugin.poll() is None, plugin.stderr.read() if plugin.stderr else ""
        await kubelet.wait_for(lambda: kubelet.allocatable().get("nvidia.com/gpu") == 2, 10.0, "registered")
    finally:
        plugin.send_signal(signal.SIGKILL)
        plugin.wait(10)
        if plugin.stderr:
            plugin.stderr.close()
        await kubelet.stop()
    # What the kubelet would have written to the Node's status meanwhile, and the MPS directories the
    # container runtime creates for Allocate's mounts under MPS_ROOT.
    left = node(apiserver)
    left["status"]["capacity"]["nvidia.com/gpu"] = "2"
    left["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    apiserver.update_direct(left)
    (host / "run/nvidia/mps/nvidia.com/gpu/pipe").mkdir(parents=True)
    (cdi / "someone-elses.json").write_text("{}")
    assert (run_dir / "plugin.sock").is_socket(), "SIGKILL leaves the admin socket"
    left = node(apiserver)
    assert OWNED_LABELS_ANNOTATION in left["metadata"]["annotations"]
    files = tree(host)

    dry = await cleanup(apiserver, host)
    assert node(apiserver) == left and tree(host) == files, "a dry run changes nothing"
    owned = sorted(left["metadata"]["annotations"][OWNED_LABELS_ANNOTATION].split(","))
    assert dry.splitlines() == [
        *(f"would remove label {k}={left['metadata']['labels'][k]}" for k in owned),
        f"would remove annotation {OWNED_LABELS_ANNOTATION}",
        "would remove status.capacity nvidia.com/gpu=2",
        "would remove status.allocatable nvidia.com/gpu=0",
        f"would remove directory {run_dir / 'nvidia-smi/device-plugin'}",
        f"would remove directory {run_dir / 'nvidia-smi'}",
        f"would remove directory {host / 'run/nvidia/mps/nvidia.com'}",
        f"would remove directory {host / 'run/nvidia/mps'}",
        f"would remove file {cdi / 'k8s.device-plugin.nvidia.com-gpu.json'}",
        f"would remove socket {run_dir / 'plugin.sock'}",
        f"would remove directory {run_dir}",
        f"would remove directory {host / 'run/nvidia'}",
        f"would keep directory {cdi}: {CDI_DIR_KEPT}",
        "dry run: nothing was changed; run again with --yes to remove the above",
    ]

    done = await cleanup(apiserver, host, "--yes")
    assert done.splitlines() == [
        line.replace("would remove", "removed").replace("would keep", "kept") for line in dry.splitlines()[:-1]
    ]
    after = node(apiserver)
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert after["status"] == before["status"]
    assert tree(host) == [
        "run",
        "var",
        "var/run",
        "var/run/cdi",
        "var/run/cdi/someone-elses.json",
    ]
    assert (await cleanup(apiserver, host)).splitlines()[-1] == f"nothing of fakegpu's left on node {NODE}"


async def test_cleanup_never_removes_a_label_fakegpu_did_not_record(apiserver, root):
    """A ``nvidia.com/*`` label set by someone else (NVIDIA's GFD, a user) is not fakegpu's to remove."""
    user_node = node(apiserver)
    user_node["metadata"]["labels"].update({"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "mine"})
    user_node["metadata"]["annotations"] = {OWNED_LABELS_ANNOTATION: "nvidia.com/gpu.count"}
    apiserver.update_direct(user_node)
    out = await cleanup(apiserver, root, "--yes", "--skip-host")
    assert out.splitlines() == ["removed label nvidia.com/gpu.count=8", f"removed annotation {OWNED_LABELS_ANNOTATION}"]
    labels = node(apiserver)["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "mine" and "nvidia.com/gpu.count" not in labels


def test_host_paths_follow_the_nodes_absolute_symlinks_under_the_host_root(root, capsys):
    """In ``kubectl debug node/N`` the node is at /host, and its ``/var/run`` is a link to ``/run`` (as on
    kind's Debian nodes): the leftovers are found under /host/run, never in the debug container's /run."""
    host = root / "host"
    (host / "run/fakegpu/nvidia-smi/dra").mkdir(parents=True)
    (host / "var").mkdir()
    (host / "var/run").symlink_to("/run")
    args = full_parser().parse_args(["cleanup", "--node", NODE, "--skip-api", "--host-root", str(host), "--yes"])
    assert asyncio.run(run_cleanup(args)) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"removed directory {host / 'run/fakegpu/nvidia-smi/dra'}",
        f"removed directory {host / 'run/fakegpu/nvidia-smi'}",
        f"removed directory {host / 'run/fakegpu'}",
    ]
    assert tree(host) == ["run", "var", "var/run"]


async def test_cleanup_of_a_node_that_does_not_exist_is_named(apiserver, root):
    args = full_parser().parse_args(["cleanup", "--node", "gone", "--skip-host"])
    client = apiserver.client()
    try:
        with pytest.raises(SpecError, match=r"^--node: node gone does not exist$"):
            await run_cleanup(args, client=client, out=io.StringIO())
    finally:
        await client.close()
