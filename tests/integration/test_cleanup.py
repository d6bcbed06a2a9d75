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
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import Node, NodeStatus
from lightkube.types import PatchType

from fakegpu.cli import host_leftovers as host
from fakegpu.cli.cleanup_command import run_cleanup
from fakegpu.cli.host_leftovers import CDI_DIR_KEPT
from fakegpu.cli.main import full_parser
from fakegpu.cli.node_status_wait import DEFAULT_SETTLE, DEFAULT_WAIT_TIMEOUT
from fakegpu.kubelet.checkpoint import CHECKPOINT_NAME
from fakegpu.kubelet.device_manager import ENDPOINT_STOP_GRACE_PERIOD
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.atomic_files import temp_name_glob
from fakegpu.runtime.kubelet_paths import DEFAULT_ROOT, KUBELET_SOCKET
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


# --- --wait: the kubelet puts the resources back for its grace period ------------------------------------


async def kubelet_putting_back(apiserver: FakeApiServer, times: int | None) -> int:
    """What a kubelet does while its grace period for a gone plugin runs: each time ``nvidia.com/gpu`` is off
    the Node's status it writes it back (capacity 2, allocatable 0); the last of ``times`` writes capacity 0,
    as the kubelet does when the period ends, and then it stops. ``None``: it never stops (a plugin still
    registered). Returns how many times it wrote."""
    client = apiserver.client()
    written = 0
    try:
        async for _, seen in client.watch(Node, fields={"metadata.name": NODE}):
            capacity = (seen.status.capacity if seen.status else None) or {}
            if "nvidia.com/gpu" in capacity:
                continue
            written += 1
            last = written == times
            back = {"capacity": {"nvidia.com/gpu": "0" if last else "2"}, "allocatable": {"nvidia.com/gpu": "0"}}
            await client.patch(NodeStatus, NODE, {"status": back}, patch_type=PatchType.MERGE)
            if last:
                return written
    finally:
        await client.close()
    return written


def with_gpu_status(apiserver: FakeApiServer) -> None:
    found = node(apiserver)
    found["status"] = {"capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "0"}}
    apiserver.update_direct(found)


async def wait_cleanup(apiserver: FakeApiServer, *flags: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    args = full_parser().parse_args(["cleanup", "--node", NODE, "--skip-host", "--yes", "--wait", *flags])
    client = apiserver.client()
    try:
        status = await run_cleanup(args, client=client, out=out)
    finally:
        await client.close()
    return status, out.getvalue().splitlines()


async def test_wait_removes_what_the_kubelet_puts_back_until_it_stays_off(apiserver):
    with_gpu_status(apiserver)
    kubelet = asyncio.create_task(kubelet_putting_back(apiserver, times=3))
    status, lines = await wait_cleanup(apiserver, "--settle", "1", "--wait-timeout", "60")
    assert status == 0, lines
    assert await kubelet == 3
    again = [line.split(": ", 1)[1] for line in lines if line.startswith("removed again")]
    assert again == [
        "status.capacity nvidia.com/gpu=2",
        "status.allocatable nvidia.com/gpu=0",
        "status.capacity nvidia.com/gpu=2",
        "status.allocatable nvidia.com/gpu=0",
        "status.capacity nvidia.com/gpu=0",
        "status.allocatable nvidia.com/gpu=0",
    ]
    assert lines[:3] == [
        "removed status.capacity nvidia.com/gpu=2",
        "removed status.allocatable nvidia.com/gpu=0",
        f"waiting until node {NODE} keeps no nvidia.com/* in its status for 1 s (the kubelet puts them back "
        "until its grace period of 5m00s ends; giving up after 1m00s)",
    ]
    assert lines[-1].startswith(f"node {NODE} kept no nvidia.com/* in its status for 1 s (waited ")
    assert lines[-1].endswith("removed 3 time(s) more)")
    left = node(apiserver)["status"]
    assert [k for f in ("capacity", "allocatable") for k in left.get(f, {}) if k.startswith("nvidia.com/")] == []


async def test_wait_gives_up_at_its_timeout_and_names_what_keeps_coming_back(apiserver):
    with_gpu_status(apiserver)
    kubelet = asyncio.create_task(kubelet_putting_back(apiserver, times=None))
    try:
        status, lines = await wait_cleanup(apiserver, "--settle", "1", "--wait-timeout", "2")
    finally:
        kubelet.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await kubelet
    assert status == 1
    assert lines[-1] == (
        f"still in node {NODE}'s status after 2 s: status.capacity nvidia.com/gpu=2, "
        "status.allocatable nvidia.com/gpu=0 (a device plugin still registered, or a kubelet with a longer grace "
        "period)"
    )


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--wait"], "--wait: needs --yes (a dry run removes nothing, so there is nothing to wait for)"),
        (["--wait", "--yes", "--skip-api"], "--wait: watches the Node: it cannot go with --skip-api"),
        (
            ["--wait", "--yes", "--settle", "60", "--wait-timeout", "30"],
            "--settle: 60 s must be shorter than --wait-timeout (30 s)",
        ),
    ],
)
async def test_wait_refuses_combinations_that_cannot_work(flags, error):
    args = full_parser().parse_args(["cleanup", "--node", NODE, "--skip-host", *flags])
    with pytest.raises(SpecError) as raised:
        await run_cleanup(args, out=io.StringIO())
    assert str(raised.value) == error


def test_wait_seconds_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        full_parser().parse_args(["cleanup", "--node", NODE, "--wait-timeout", "0"])
    assert "--wait-timeout: expected seconds above 0 and at most 3600, found '0'" in capsys.readouterr().err


# --- the docs -----------------------------------------------------------------------------------------------


def cleanup_docs() -> tuple[str, str]:
    """deploy/README.md's cleanup table with its text, and its "What remains" paragraph, joined into lines."""
    text = " ".join((Path(__file__).resolve().parents[2] / "deploy/README.md").read_text().split())
    start = text.index("**`fakegpu cleanup --node N`** lists")
    remains = text.index("What remains after it, on purpose", start)
    return text[start:remains], text[remains:]


def test_the_teardown_table_names_every_path_cleanup_looks_for():
    """The table is written from the declarations cleanup and the daemons share (``host_leftovers``), with the
    flags' defaults and the wait's figures as the code has them."""
    table, remains = cleanup_docs()
    paths = [
        *host.CDI_SPEC_GLOBS,
        f"device-plugins/{host.DEVICE_PLUGIN_SOCKET_GLOB}",
        *(f"plugins_registry/{g}" for g in host.REGISTRY_SOCKET_GLOBS),
        *(f"plugins/{driver}/" for driver in host.DRA_PLUGIN_ENTRIES),
        temp_name_glob("<name>"),
        host.PRIVATE_SOCKET_GLOB,
        *map(str, [host.DEFAULT_NVIDIA_SMI_DIR, host.DEFAULT_MPS_ROOT, host.DEFAULT_CDI_ROOT, DEFAULT_ROOT]),
        *map(str, host.DEFAULT_ADMIN_SOCKETS),
        f"/var/run/{host.RUN_DIR_NAME}",
    ]
    assert [p for p in paths if f"`{p}" not in table] == []
    for driver, entries in host.DRA_PLUGIN_ENTRIES.items():
        listed = table.split(f"`plugins/{driver}/` (", 1)[1].split(")", 1)[0]
        assert listed == ", ".join(f"`{e}/`" if "." not in e else f"`{e}`" for e in entries)
    assert f"{ENDPOINT_STOP_GRACE_PERIOD / 60:g} min grace period" in table
    assert f"`--settle` ({DEFAULT_SETTLE:g} s)" in table
    assert f"`--wait-timeout` ({DEFAULT_WAIT_TIMEOUT:g} s)" in table
    assert f"`device-plugins/{CHECKPOINT_NAME}`" in remains and f"`{KUBELET_SOCKET}`" in remains


def test_what_is_served_or_holds_others_files_stays_and_the_dry_run_says_why(root):
    """A socket a live process serves (its daemon still runs), a DRA plugin directory whose socket is served,
    and directories holding files fakegpu does not write are kept, each named with the reason."""
    h = root / "h"
    gpu_dir = h / "var/lib/kubelet/plugins/gpu.nvidia.com"
    domain_dir = h / "var/lib/kubelet/plugins/compute-domain.nvidia.com"
    for directory in (gpu_dir, domain_dir / "domains", h / "run/nvidia/mps/shm", h / "run/nvidia/driver"):
        directory.mkdir(parents=True)
    (gpu_dir / "checkpoint.json").write_text("{}")
    (domain_dir / "checkpoint.json").write_text("{}")
    (domain_dir / "notes.txt").write_text("mine")
    cdi = h / "var/run/cdi"
    cdi.mkdir(parents=True)
    gpu_spec = cdi / "k8s.gpu.nvidia.com-claim_6d1b9f2a-0000-4000-8000-000000000001.yaml"
    domain_spec = cdi / "k8s.compute-domain.nvidia.com-claim_6d1b9f2a-0000-4000-8000-000000000002.yaml"
    for spec in (gpu_spec, domain_spec):
        spec.write_text("cdiVersion: 0.5.0\n")
    listeners = []
    for path in (gpu_dir / "dra.sock", h / "var/run/fakegpu/dra.sock"):
        path.parent.mkdir(parents=True, exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen()
        listeners.append(listener)
    try:
        args = full_parser().parse_args(["cleanup", "--node", NODE, "--skip-api", "--host-root", str(h), "--yes"])
        out = io.StringIO()
        assert asyncio.run(run_cleanup(args, out=out)) == 0
    finally:
        for listener in listeners:
            listener.close()
    served = host.SERVED.format(pid=f" (pid {os.getpid()})")
    spec_served = host.SERVED_SPEC.format(writer="gpu.nvidia.com", pid=f" (pid {os.getpid()})")
    assert out.getvalue().splitlines() == [
        f"removed directory {h / 'run/nvidia/mps/shm'}",
        f"removed directory {h / 'run/nvidia/mps'}",
        f"removed file {domain_spec}",  # its driver serves no more
        f"removed file {domain_dir / 'checkpoint.json'}",
        f"removed directory {domain_dir / 'domains'}",
        f"kept file {gpu_spec}: {spec_served}",  # a running driver's claim keeps its devices
        f"kept directory {cdi}: {host.CDI_DIR_KEPT}",
        f"kept socket {h / 'var/run/fakegpu/dra.sock'}: {served}",
        f"kept directory {gpu_dir}: {served}",
        f"kept directory {domain_dir}: {host.FOREIGN_FILES_KEPT.format(names='notes.txt')}",
        f"kept directory {h / 'run/nvidia'}: {host.NVIDIA_RUN_DIR_KEPT}",
    ]
    assert (gpu_dir / "checkpoint.json").exists() and (domain_dir / "notes.txt").exists() and gpu_spec.exists()
    assert not domain_spec.exists()


async def test_wait_without_the_grant_to_watch_nodes_fails_instead_of_taking_silence_for_success(apiserver):
    """``--wait`` needs ``list`` and ``watch`` on nodes beyond the plain clean-up's grants; refused them, it
    must say so rather than hear nothing for ``--settle`` seconds and report the resources gone."""
    with_gpu_status(apiserver)
    user = "system:serviceaccount:ops:cleaner"
    apiserver.authorize("t0ken", user, lambda a: a.resource in ("nodes", "nodes/status") and a.verb in ("get", "patch"))
    args = full_parser().parse_args(
        ["cleanup", "--node", NODE, "--skip-host", "--yes", "--wait", "--settle", "1", "--wait-timeout", "30"]
    )
    client = apiserver.client(token="t0ken")
    try:
        with pytest.raises(SpecError, match=rf"^node {NODE}: .*forbidden.*cannot list resource \"nodes\""):
            await run_cleanup(args, client=client, out=io.StringIO())
    finally:
        await client.close()
