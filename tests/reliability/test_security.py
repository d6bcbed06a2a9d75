"""Security checks (issue 8): what the daemons expose and what a request can reach.

* Every socket the device plugin and DRA daemons create (device plugin sockets, registration sockets,
  ``dra.sock``, admin sockets) is owner-only: mode 0600, or in a 0700 directory. Checked in-process, as
  subprocesses, and at the moment of ``bind`` under umask 0 (a chmod after bind leaves a window).
* No TCP listener unless one is asked for: a subprocess daemon's listening sockets, read from
  ``/proc/<pid>/net/tcp{,6}`` and its fds, are none without ``--metrics-address``/``--dcgm-address`` and
  exactly the asked ones with them.
* The admin socket refuses other users (peer credentials checked per connection) before reading a request.
* CDI specs (0644, the runtime reads them) and the claim checkpoint (0600) are written atomically: a
  complete temp file in the same directory renamed over the target, never a partial file.
* No path from a request (claim namespace, name or UID, allocated device, share ID, device plugin device
  ID) escapes the CDI root or the plugin directory: such requests are refused with one clear line.

RBAC is covered by tests/integration/test_rbac_coverage.py (every API call each component makes is granted,
nothing more).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

import fakegpu.control.server as admin_server
from fakegpu.control.client import admin_call
from fakegpu.control.protocol import AdminError
from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.daemon import DraDriver, DraSettings, run_dra_daemon
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.dra.gpu_prepare import GpuClaimPreparer
from fakegpu.dra.prepared_claims import CHECKPOINT_FILE, ClaimRef, PreparedClaims
from fakegpu.fakeplugin.daemon import run_plugin_daemon
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2 as dp
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from fakegpu.runtime.cdi_spec_model import validate_spec
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.claim_builders import allocated_claim, gpu_config, opaque_config
from tests.daemon_tasks import stop_and_wait
from tests.dra_kubelet_client import prepare, unprepare
from tests.eventually import eventually

ROOT = Path(__file__).resolve().parents[2]
NODE = "node-a"
DRIVER = "gpu.nvidia.com"
MAX_MESSAGE = 1000


# --- helpers -----------------------------------------------------------------------------------------------


@pytest.fixture
def root() -> Iterator[Path]:
    """A short, world-readable test root: only the modes the daemons set themselves count."""
    path = Path(tempfile.mkdtemp(prefix="fgsec-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer("1.36").start()
    server.add_node(NODE)
    server.add_node("node-b")
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def sockets_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_socket())


def exposed(sock: Path) -> str | None:
    """Why ``sock`` is reachable by other users, or None when it is owner-only (0600 or in a 0700 dir)."""
    mode = stat.S_IMODE(sock.lstat().st_mode)
    parent = stat.S_IMODE(sock.parent.stat().st_mode)
    if mode & 0o077 == 0 or parent & 0o077 == 0:
        return None
    return f"{sock}: mode {mode:04o} in a {parent:04o} directory"


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.exc_info or "Traceback" in r.getMessage()]


@contextlib.contextmanager
def recording() -> Iterator[Records]:
    handler = Records()
    root_logger = logging.getLogger()
    level = root_logger.level
    root_logger.addHandler(handler)
    root_logger.setLevel(min(level, logging.INFO))
    try:
        yield handler
    finally:
        root_logger.removeHandler(handler)
        root_logger.setLevel(level)


def one_clear_line(message: str) -> list[str]:
    problems = []
    if not message:
        problems.append("no error")
    if "\n" in message:
        problems.append(f"several lines: {message[:200]!r}")
    if len(message) > MAX_MESSAGE:
        problems.append(f"{len(message)} characters")
    if "Traceback" in message:
        problems.append("a traceback")
    return problems


# --- both daemons in this process --------------------------------------------------------------------------


Daemons = tuple[Path, Path, Path]
"""(root, plugin admin socket, DRA admin socket)"""


@pytest.fixture
async def daemons(root: Path, apiserver: FakeApiServer) -> AsyncIterator[Daemons]:
    """``run_plugin_daemon`` (plugins_registry registration: device plugin and registration sockets) and
    ``run_dra_daemon``, each with an admin socket, in this process."""
    stop = asyncio.Event()
    plugin_admin, dra_admin = root / "run" / "plugin.sock", root / "run" / "dra.sock"
    inputs = InventoryInputs(
        node_name=NODE, gpus=("2xa100-40gb",), mig_layout="all-1g.5gb", cli_flags={"mig_strategy": "mixed"}
    )
    plugin = asyncio.create_task(
        run_plugin_daemon(
            inputs,
            KubeletPaths(root / "kubelet"),
            registration="plugins-registry",
            stop=stop,
            admin_socket=plugin_admin,
        )
    )
    settings = DraSettings(cdi_root=root / "cdi", kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig")))
    dra = asyncio.create_task(
        run_dra_daemon(
            InventoryInputs(node_name=NODE, gpus=("2xa100-40gb",)),
            KubeletPaths(root / "kubelet"),
            settings,
            stop=stop,
            admin_socket=dra_admin,
        )
    )
    expected = [
        root / "kubelet/device-plugins/nvidia-mig-1g.5gb.sock",
        root / "kubelet/plugins_registry/nvidia.com-mig-1g.5gb-reg.sock",
        root / "kubelet/plugins/gpu.nvidia.com/dra.sock",
        root / "kubelet/plugins_registry/gpu.nvidia.com-reg.sock",
        plugin_admin,
        dra_admin,
    ]
    try:
        await eventually(
            lambda: all(p.is_socket() for p in expected) or plugin.done() or dra.done(), "every socket", 10.0
        )
        for task in (plugin, dra):
            if task.done():
                task.result()
        yield root, plugin_admin, dra_admin
    finally:
        await stop_and_wait(stop, plugin, dra, timeout=10.0)


async def test_every_socket_of_both_daemons_is_owner_only(daemons: Daemons):
    root, _, _ = daemons
    found = sockets_under(root)
    assert len(found) == 6, found
    assert [e for e in map(exposed, found) if e] == []


async def test_sockets_are_owner_only_from_the_moment_they_are_bound(root, apiserver, monkeypatch):
    """Under umask 0 a socket chmod-ed after bind is world-connectable in between: bind must create it 0600.

    The mode is read right after gRPC's ``add_insecure_port`` (where gRPC binds) and after the admin socket's
    ``bind``."""
    at_bind: dict[str, int] = {}
    real_server = grpc.aio.server

    class Recorder:
        def __init__(self, server: grpc.aio.Server) -> None:
            self._server = server

        def __getattr__(self, name: str) -> Any:
            return getattr(self._server, name)

        def add_insecure_port(self, address: str) -> int:
            port = self._server.add_insecure_port(address)
            path = address.removeprefix("unix://")
            at_bind[path] = stat.S_IMODE(os.lstat(path).st_mode)
            return port

    def server(*args: Any, **kwargs: Any) -> Any:
        return Recorder(real_server(*args, **kwargs))

    real_bind = socket.socket.bind

    def bind(self: socket.socket, address: Any) -> None:
        real_bind(self, address)
        if self.family == socket.AF_UNIX and isinstance(address, str):
            at_bind[address] = stat.S_IMODE(os.lstat(address).st_mode)

    monkeypatch.setattr(grpc.aio, "server", server)
    monkeypatch.setattr(socket.socket, "bind", bind)
    with umask(0):
        stop = asyncio.Event()
        inputs = InventoryInputs(node_name=NODE, gpus=("1xt4",))
        plugin = asyncio.create_task(
            run_plugin_daemon(
                inputs,
                KubeletPaths(root / "kubelet"),
                registration="plugins-registry",
                stop=stop,
                admin_socket=root / "run" / "plugin.sock",
            )
        )
        settings = DraSettings(cdi_root=root / "cdi", kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig")))
        dra = asyncio.create_task(
            run_dra_daemon(
                inputs, KubeletPaths(root / "kubelet"), settings, stop=stop, admin_socket=root / "run" / "dra.sock"
            )
        )
        try:
            await eventually(lambda: len(at_bind) >= 6 or plugin.done() or dra.done(), "six sockets bound", 10.0)
        finally:
            await stop_and_wait(stop, plugin, dra, timeout=10.0)
    assert len(at_bind) == 6, at_bind
    assert {p: f"{m:04o}" for p, m in at_bind.items() if m & 0o077} == {}


async def test_directories_the_daemons_create_are_not_writable_by_others_under_umask_0(root, apiserver):
    """A world-writable device-plugins/ or plugins/<driver>/ lets anyone replace a socket or the checkpoint, a
    world-writable CDI root lets anyone plant a spec the runtime applies to containers."""
    with umask(0):
        stop = asyncio.Event()
        inputs = InventoryInputs(node_name=NODE, gpus=("1xt4",))
        paths = KubeletPaths(root / "kubelet")
        plugin = asyncio.create_task(run_plugin_daemon(inputs, paths, registration="plugins-registry", stop=stop))
        settings = DraSettings(cdi_root=root / "cdi", kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig")))
        dra = asyncio.create_task(run_dra_daemon(inputs, paths, settings, stop=stop))
        try:
            await eventually(lambda: len(sockets_under(root)) >= 4 or plugin.done() or dra.done(), "four sockets", 10.0)
            writable = {
                str(p.relative_to(root)): f"{stat.S_IMODE(p.stat().st_mode):04o}"
                for p in root.rglob("*")
                if p.is_dir() and stat.S_IMODE(p.stat().st_mode) & 0o022
            }
        finally:
            await stop_and_wait(stop, plugin, dra, timeout=10.0)
    assert writable == {}


# --- the admin socket --------------------------------------------------------------------------------------


def test_peer_uid_reads_the_real_peer_credentials():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert admin_server.peer_uid(left) == os.geteuid()


async def test_admin_sockets_refuse_other_users_before_reading_a_request(daemons: Daemons, monkeypatch):
    _, plugin_admin, dra_admin = daemons
    stranger = os.geteuid() + 4242
    assert stranger != 0
    before = await admin_call(plugin_admin, "status")
    monkeypatch.setattr(admin_server, "peer_uid", lambda sock: stranger)
    with recording() as log:
        for path in (plugin_admin, dra_admin):
            with pytest.raises(AdminError) as refused:
                await admin_call(path, "health", target="0", healthy=False)
            assert str(refused.value) == f"permission denied: uid {stranger} may not use the admin socket {path}"
            # Raw: the refusal comes before any request is read, then the connection is closed.
            reader, writer = await asyncio.open_unix_connection(path)
            answer = json.loads(await asyncio.wait_for(reader.readline(), 5.0))
            assert answer == {
                "ok": False,
                "error": f"permission denied: uid {stranger} may not use the admin socket {path}",
            }
            assert await asyncio.wait_for(reader.read(), 5.0) == b""
            writer.close()
    assert sum(f"refused a connection from uid {stranger}" in r.getMessage() for r in log.records) == 4
    assert log.tracebacks() == []
    monkeypatch.undo()
    # Nothing the strangers asked for happened: every GPU is still healthy.
    after = await admin_call(plugin_admin, "status")
    assert after["gpus"] == before["gpus"]
    assert all(g["healthy"] for g in after["gpus"])
    assert (await admin_call(dra_admin, "status"))["gpus"][0]["healthy"] is True


# --- subprocess daemons: sockets and TCP listeners ---------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _address(hex_address: str) -> str:
    """``0100007F:1F90`` -> ``127.0.0.1:8080``; IPv6 as ``[::1]:8080``."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
        return f"{ip}:{int(port, 16)}"
    words = b"".join(struct.pack("<I", struct.unpack(">I", raw[i : i + 4])[0]) for i in range(0, 16, 4))
    return f"[{socket.inet_ntop(socket.AF_INET6, words)}]:{int(port, 16)}"


def tcp_listeners(pid: int) -> set[str]:
    """Listening TCP sockets (state 0A) that ``pid`` holds, as ``host:port``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                found.add(_address(fields[1]))
    return found


def ended_or_bound(proc: subprocess.Popen[bytes], sockets: list[Path]) -> bool:
    return proc.poll() is not None or all(s.is_socket() for s in sockets)


def test_address_parsing():
    assert _address("0100007F:1F90") == "127.0.0.1:8080"
    assert _address("00000000000000000000000001000000:0050") == "[::1]:80"


async def test_subprocess_daemons_own_only_private_sockets_and_listen_on_tcp_only_when_asked(root, apiserver):
    kubeconfig = str(apiserver.kubeconfig(root / "kubeconfig"))
    ports = [free_port() for _ in range(4)]
    fakegpu = [sys.executable, "-m", "fakegpu"]
    plugin = [*fakegpu, "plugin", "--gpus", "2xt4", "--node-name", NODE]
    dra = [*fakegpu, "dra", "--gpus", "2xt4", "--kubeconfig", kubeconfig]
    daemons: dict[str, tuple[list[str], list[Path], set[str]]] = {
        "plugin": (
            [
                *plugin,
                "--kubelet-dir",
                f"{root}/p",
                "--registration",
                "plugins-registry",
                "--admin-socket",
                f"{root}/p-run/a.sock",
            ],
            [
                root / "p/device-plugins/nvidia-gpu.sock",
                root / "p/plugins_registry/nvidia.com-gpu-reg.sock",
                root / "p-run/a.sock",
            ],
            set(),
        ),
        "plugin-tcp": (
            [
                *plugin,
                "--kubelet-dir",
                f"{root}/pt",
                "--metrics-address",
                f"127.0.0.1:{ports[0]}",
                "--dcgm-address",
                f"127.0.0.1:{ports[1]}",
            ],
            [root / "pt/device-plugins/nvidia-gpu.sock"],
            {f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"},
        ),
        "dra": (
            [
                *dra,
                "--node-name",
                NODE,
                "--kubelet-dir",
                f"{root}/d",
                "--cdi-root",
                f"{root}/d-cdi",
                "--admin-socket",
                f"{root}/d-run/a.sock",
            ],
            [
                root / "d/plugins/gpu.nvidia.com/dra.sock",
                root / "d/plugins_registry/gpu.nvidia.com-reg.sock",
                root / "d-run/a.sock",
            ],
            set(),
        ),
        "dra-tcp": (
            [
                *dra,
                "--node-name",
                "node-b",
                "--kubelet-dir",
                f"{root}/dt",
                "--cdi-root",
                f"{root}/dt-cdi",
                "--metrics-address",
                f"127.0.0.1:{ports[2]}",
                "--dcgm-address",
                f"127.0.0.1:{ports[3]}",
            ],
            [root / "dt/plugins/gpu.nvidia.com/dra.sock", root / "dt/plugins_registry/gpu.nvidia.com-reg.sock"],
            {f"127.0.0.1:{ports[2]}", f"127.0.0.1:{ports[3]}"},
        ),
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KUBECONFIG": kubeconfig}
    procs = {
        name: subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for name, (argv, _, _) in daemons.items()
    }
    problems: list[str] = []
    try:
        for name, (_, sockets, listeners) in daemons.items():
            proc = procs[name]
            await eventually(
                functools.partial(ended_or_bound, proc, sockets), f"{name} to create {sockets}", 30.0, interval=0.05
            )
            assert proc.poll() is None, f"{name} ended: {proc.stderr.read().decode() if proc.stderr else ''}"
            # The TCP endpoints start before the sockets: what listens now is all that will.
            got = tcp_listeners(proc.pid)
            if got != listeners:
                problems.append(f"{name} listens on {sorted(got)}, expected {sorted(listeners)}")
        problems.extend(e for e in map(exposed, sockets_under(root)) if e)
        assert len(sockets_under(root)) == 9
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for name, proc in procs.items():
            status: int | None
            try:
                status = proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                status = None
            stderr = proc.stderr.read().decode() if proc.stderr else ""
            if status != 0:
                problems.append(f"{name} exited with {status}")
            if "Traceback" in stderr:
                problems.append(f"{name} logged a traceback: {stderr[-2000:]}")
    assert problems == [], "\n".join(problems)
    assert sockets_under(root) == [], "a daemon left a socket behind"


# --- CDI specs and the checkpoint --------------------------------------------------------------------------


@pytest.fixture
async def driver(root: Path, apiserver: FakeApiServer) -> AsyncIterator[DraDriver]:
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, gpus=("2xh100-80gb",))))
    dra = DraDriver(
        live,
        KubeletPaths(root / "kubelet"),
        DraSettings(cdi_root=root / "cdi", feature_gates=parse_feature_gates("MPSSupport=true")),  # the MPS claims
        apiserver.client,
    )
    await dra.start()
    try:
        yield dra
    finally:
        await dra.stop()


MPS = [opaque_config(gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}))]


def complete_file(suffix: str, text: str) -> None:
    """JSON that parses, or a YAML CDI spec that validates (a truncated YAML file may still parse)."""
    if suffix == ".yaml":
        validate_spec(yaml.safe_load(text))
    else:
        json.loads(text)


async def test_cdi_specs_and_checkpoint_are_written_atomically_with_restrictive_modes(
    root: Path, apiserver: FakeApiServer, driver: DraDriver, monkeypatch
):
    cdi = root / "cdi"
    plugin_dir = root / "kubelet/plugins/gpu.nvidia.com"
    checkpoint = plugin_dir / CHECKPOINT_FILE
    replaced: list[tuple[str, int]] = []
    problems: list[str] = []
    real_replace = os.replace

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        source, target = Path(src), Path(dst)
        if root in target.parents:
            mode = 0o600 if target == checkpoint else 0o644
            if source.parent != target.parent:
                problems.append(f"{source} is not in the directory of {target}")
            if not source.name.startswith(".") or source.suffix in (".json", ".yaml"):
                problems.append(f"{source.name}: a temp file a CDI runtime would load")
            if stat.S_IMODE(source.stat().st_mode) != mode:
                problems.append(f"{source.name}: mode {stat.S_IMODE(source.stat().st_mode):04o}, expected {mode:04o}")
            text = source.read_text()
            try:
                complete_file(target.suffix, text)
            except (ValueError, yaml.YAMLError) as exc:
                problems.append(f"{source.name} is not a complete file when renamed ({exc}): {text[-80:]!r}")
            if target.exists():
                complete_file(target.suffix, target.read_text())  # what was visible before was complete too
            replaced.append((target.name, stat.S_IMODE(source.stat().st_mode)))
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", replace)  # the os.replace atomic_files calls
    with umask(0):  # the modes are set explicitly, whatever the umask
        uids = [apiserver.create_direct(allocated_claim("plain", NODE))["metadata"]["uid"]]
        uids.append(apiserver.create_direct(allocated_claim("mps", NODE, ["gpu-1"], config=MPS))["metadata"]["uid"])
        refs = [("default", "plain", uids[0]), ("default", "mps", uids[1])]
        response = await prepare(driver.plugin.dra_socket, refs)
        assert [response.claims[u].error for u in uids] == ["", ""]
        assert (await unprepare(driver.plugin.dra_socket, refs[:1])).claims[uids[0]].error == ""
    assert problems == [], "\n".join(problems)
    spec_names = {f"k8s.gpu.nvidia.com-claim_{u}.yaml" for u in uids}
    assert {n for n, _ in replaced} == spec_names | {CHECKPOINT_FILE}
    assert sum(n == CHECKPOINT_FILE for n, _ in replaced) == 5, "start and complete per claim, one removal"
    remaining = sorted(p.name for p in cdi.iterdir())
    assert remaining == [f"k8s.gpu.nvidia.com-claim_{uids[1]}.yaml"], "no temp file, no spec of the unprepared claim"
    assert stat.S_IMODE((cdi / remaining[0]).stat().st_mode) == 0o644
    assert stat.S_IMODE(checkpoint.stat().st_mode) == 0o600
    assert sorted(p.name for p in plugin_dir.iterdir()) == [CHECKPOINT_FILE, "dra.sock", "mps"]
    # The MPS claim's control directories (NVIDIA's sharing.go layout) are never group- or world-writable.
    mps_dirs = [plugin_dir / "mps", *(plugin_dir / "mps").rglob("*")]
    assert len(mps_dirs) == 5 and all(stat.S_IMODE(d.stat().st_mode) == 0o755 for d in mps_dirs)


# --- paths from requests -----------------------------------------------------------------------------------


def snapshot(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


EVIL_NAMES = [
    ("default", "../../../../etc/passwd"),
    ("../kube-system", "claim"),
    ("/etc", "passwd"),
    ("default", "claim\x00.json"),
    ("default", "x" * 10000),
    ("default", "ünïcödé-ç"),
    ("default", "a/b"),
]
EVIL_UIDS = [
    "../../../../tmp/evil",
    "/etc/passwd",
    "a/../../b",
    "..",
    ".",
    "a\x00b",
    "u" * 300,
    "ü",
    "",
]


async def test_claim_names_and_uids_from_the_kubelet_cannot_escape(
    root: Path, apiserver: FakeApiServer, driver: DraDriver
):
    victim = root / "victim.json"
    victim.write_text("keep")
    good = apiserver.create_direct(allocated_claim("good", NODE))["metadata"]["uid"]
    refs = [(ns, name, f"uid-{i}") for i, (ns, name) in enumerate(EVIL_NAMES)]
    refs += [("default", "good", uid) for uid in EVIL_UIDS if uid]
    before = snapshot(root)
    requests_before = len(apiserver.requests)
    with recording() as log:
        response = await prepare(driver.plugin.dra_socket, refs)
        undone = await unprepare(driver.plugin.dra_socket, refs)
    problems = []
    for ns, name, uid in refs:
        label = f"{ns!r}/{name[:40]!r} ({uid[:40]!r})"
        problems += [f"prepare {label}: {p}" for p in one_clear_line(response.claims[uid].error)]
        if response.claims[uid].devices:
            problems.append(f"prepare {label}: devices were prepared")
        error = undone.claims[uid].error
        if error:  # refusing an unprepare is fine (nothing was prepared), as long as it is clear
            problems += [f"unprepare {label}: {p}" for p in one_clear_line(error)]
    assert problems == [], "\n".join(problems)
    assert snapshot(root) == before, "nothing may be written or removed"
    assert victim.read_text() == "keep"
    claim_reads = [r.path for r in apiserver.requests[requests_before:] if "resourceclaims" in r.path]
    assert set(claim_reads) <= {"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/good"}, claim_reads
    assert log.tracebacks() == []
    # The good claim with its own UID still works.
    assert (await prepare(driver.plugin.dra_socket, [("default", "good", good)])).claims[good].error == ""


class StubReader:
    """An API server that answers whatever claim the test wants, UID included (a real one cannot be asked to)."""

    def __init__(self, claims: Mapping[str, Mapping[str, Any]]) -> None:
        self.claims = claims

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        return self.claims[name]


def stub_claim(uid: str, result: Mapping[str, Any]) -> dict[str, Any]:
    claim = allocated_claim("evil", NODE)
    claim["metadata"].update(uid=uid)
    claim["status"]["allocation"]["devices"]["results"] = [{"request": "gpu", "driver": DRIVER, "pool": NODE, **result}]
    return claim


GOOD_RESULT = {"device": "gpu-0"}
EVIL_RESULTS = [
    {"device": "../../../../tmp/evil"},
    {"device": "/etc/passwd"},
    {"device": "gpu-0", "shareID": "../../../../tmp/evil"},
    {"device": "gpu-0", "shareID": "/etc/passwd"},
    {"device": "gpu-0", "shareID": "a\x00b"},
    {"device": "gpu-0", "pool": "../../evil"},
]


async def test_claim_uids_devices_and_share_ids_from_the_api_server_cannot_escape(root: Path):
    """Even a claim whose UID, device or share ID is hostile (possible only through a broken or hostile API
    server) is refused before anything is written."""
    cdi, plugin_dir = root / "cdi", root / "plugins"
    cdi.mkdir()
    plugin_dir.mkdir()
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, gpus=("1xh100-80gb",))))
    claims: dict[str, dict[str, Any]] = {}
    refs = []
    for i, uid in enumerate(EVIL_UIDS):
        claims[f"uid-{i}"] = stub_claim(uid, GOOD_RESULT)
        refs.append(ClaimRef("default", f"uid-{i}", uid))
    for i, result in enumerate(EVIL_RESULTS):
        uid = f"0f0e0d0c-0b0a-4988-8776-6554433221{i:02d}"
        claims[f"result-{i}"] = stub_claim(uid, result)
        refs.append(ClaimRef("default", f"result-{i}", uid))
    preparer = GpuClaimPreparer(
        StubReader(claims),
        live,
        driver=DRIVER,
        mig_mode="static",
        cdi_root=cdi,
        checkpoint=PreparedClaims.in_dir(plugin_dir),
    )
    before = snapshot(root)
    problems = []
    for ref in refs:
        label = f"{ref.name}: {ref.uid[:40]!r}"
        try:
            await preparer.prepare(ref)
        except ClaimError as exc:
            problems += [f"{label}: {p}" for p in one_clear_line(str(exc))]
        else:
            problems.append(f"{label}: prepared")
        try:
            await preparer.unprepare(ref)
        except ValueError as exc:
            problems += [f"unprepare {label}: {p}" for p in one_clear_line(str(exc))]
    assert problems == [], "\n".join(problems)
    assert snapshot(root) == before
    assert preparer.checkpoint.claims() == []


async def test_device_ids_in_device_plugin_requests_cannot_escape(fakegpu_node):
    node = await fakegpu_node("2xt4")
    before = snapshot(node.root)
    socket_path = node.kubelet.paths.device_plugins / "nvidia-gpu.sock"
    evil = ["../../../../etc/passwd", "/etc/passwd", "GPU-\x00", "x" * 10000, "ü", ""]
    problems = []
    async with grpc.aio.insecure_channel(f"unix://{socket_path}") as channel:
        stub = dp_grpc.DevicePluginStub(channel)
        for device in evil:
            label = repr(device[:40])
            request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=[device])])
            try:
                await stub.Allocate(request, timeout=10)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNKNOWN:  # NVIDIA's plain Go error
                    problems.append(f"Allocate {label}: {exc.code()}")
                problems += [f"Allocate {label}: {p}" for p in one_clear_line(exc.details() or "")]
            else:
                problems.append(f"Allocate {label}: allocated")
            preferred = dp.PreferredAllocationRequest(
                container_requests=[
                    dp.ContainerPreferredAllocationRequest(available_deviceIDs=[device], allocation_size=1)
                ]
            )
            with contextlib.suppress(grpc.aio.AioRpcError):  # refusing is fine; answering must not escape
                await stub.GetPreferredAllocation(preferred, timeout=10)
    assert problems == [], "\n".join(problems)
    assert snapshot(node.root) == before
