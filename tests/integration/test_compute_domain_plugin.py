"""The compute-domain kubelet plugin (``fakegpu dra --compute-domains``) over real sockets, against the fake
API server with NVIDIA's CRDs, and its emulated IMEX daemon.

Behaviour followed: ``kubernetes-sigs/dra-driver-nvidia-gpu`` ``cmd/compute-domain-kubelet-plugin/
device_state.go`` (prepare order and error texts), ``computedomain.go`` (node label), ``cdi.go`` (spec and
device names) and ``cmd/compute-domain-daemon`` (clique entries), at commit 0807eed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cli import daemon_runs
from fakegpu.cli.main import main
from fakegpu.dra.compute_domain.kubelet_plugin import ComputeDomainSettings
from fakegpu.dra.daemon import DraDriver, DraSettings
from tests.apiserver import FakeApiServer
from tests.cdi_runtime import claim_spec_path, read_spec_file, resolve
from tests.claim_builders import COMPUTE_DOMAIN_DRIVER, channel_claim, compute_domain, daemon_claim
from tests.dra_kubelet_client import get_info, prepare, unprepare
from tests.eventually import eventually
from tests.integration.compute_domain_drivers import ComputeDomainDrivers, serve_node, socket_of

NODE = "node-a"
DRIVER_NS = "nvidia-dra-driver-gpu"
CLUSTER = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"
CLIQUE = f"{CLUSTER}.3"
LABEL = "resource.nvidia.com/computeDomain"
VENDOR = "k8s.compute-domain.nvidia.com"
NOT_READY_ERROR = "error asserting ComputeDomain Ready: current node not ready in ComputeDomain"

FABRIC_NODE = f"""
version: v1
fabric: {{clusterUUID: {CLUSTER}, cliqueID: 3, imexChannels: 4}}
gpus: [{{model: b200, count: 4}}]
"""
PLAIN_NODE = "version: v1\ngpus: [{model: h100-80gb, count: 2}]\n"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    yield from serve_node()


@pytest.fixture
async def make_driver(root: Path, apiserver: FakeApiServer) -> AsyncIterator[Callable[..., Any]]:
    drivers = ComputeDomainDrivers(root, apiserver)

    async def make(node_spec: str = FABRIC_NODE, start_delay: float = 1.0) -> DraDriver:
        return await drivers.start(node_spec, start_delay=start_delay)

    yield make
    await drivers.stop_all()


def create_domain(apiserver: FakeApiServer, name: str = "cd", namespace: str = "default") -> str:
    return str(apiserver.create_direct(compute_domain(name, namespace))["metadata"]["uid"])


def create_claim(apiserver: FakeApiServer, claim: dict[str, Any]) -> tuple[str, str, str]:
    stored = apiserver.create_direct(claim)
    meta = stored["metadata"]
    return meta["namespace"], meta["name"], meta["uid"]


def node_label(apiserver: FakeApiServer) -> str | None:
    node = apiserver.get_object("nodes", NODE) or {}
    return (node["metadata"].get("labels") or {}).get(LABEL)


def clique_entries(apiserver: FakeApiServer, domain_uid: str) -> list[dict[str, Any]]:
    clique = apiserver.get_object("computedomaincliques", f"{domain_uid}.{CLIQUE}", DRIVER_NS) or {}
    return list(clique.get("daemons") or [])


async def prepared(socket: Path, claim: tuple[str, str, str]) -> Any:
    """Prepare once; the claim's answer (error text or devices)."""
    return (await prepare(socket, [claim])).claims[claim[2]]


async def prepare_until_ready(socket: Path, claim: tuple[str, str, str]) -> Any:
    """The kubelet's retry: prepare until the node's daemon is Ready, then the claim's answer."""

    async def attempt() -> Any:
        answer = await prepared(socket, claim)
        assert NOT_READY_ERROR not in answer.error
        return answer

    return await eventually(attempt, "channel claim prepared once the node's IMEX daemon is Ready", 15.0)


# --- publishing and registration ------------------------------------------------------------------------


async def test_publishes_one_schema_valid_slice_and_registers_its_own_socket(apiserver, make_driver):
    driver = await make_driver()
    slices = [s for s in apiserver.objects("resourceslices") if s["spec"]["driver"] == COMPUTE_DOMAIN_DRIVER]
    (only,) = slices
    assert only["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert only["spec"]["nodeName"] == NODE
    assert [d["name"] for d in only["spec"]["devices"]] == ["channel-0", "daemon"]
    assert only["spec"]["devices"][0]["attributes"] == {"type": {"string": "channel"}, "id": {"int": 0}}
    assert only["metadata"]["ownerReferences"][0]["name"] == NODE
    assert apiserver.rejections == []  # the server validated the slice against the ResourceSlice schema
    # The GPU driver's slice is still there, beside it.
    assert {s["spec"]["driver"] for s in apiserver.objects("resourceslices")} == {
        "gpu.nvidia.com",
        COMPUTE_DOMAIN_DRIVER,
    }
    assert driver.compute_domains is not None
    info = await get_info(Path(driver.compute_domains.plugin.registration_socket))
    assert (info.name, info.endpoint) == (COMPUTE_DOMAIN_DRIVER, str(socket_of(driver)))
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert (Path(driver.settings.cdi_root) / f"{VENDOR}-device_base.yaml").exists()


# --- channel claims on a fabric node ----------------------------------------------------------------------


async def test_channel_claim_waits_for_the_node_daemon_then_gets_channel0(apiserver, make_driver, root):
    driver = await make_driver()
    assert driver.compute_domains is not None and driver.compute_domains.daemon.running  # driver-managed
    domain = create_domain(apiserver)
    claim = create_claim(apiserver, channel_claim("wl", NODE, domain))
    first = await prepared(socket_of(driver), claim)
    assert NOT_READY_ERROR in first.error
    assert first.error.startswith(f"error preparing devices for claim 'default/wl:{claim[2]}': prepare devices failed")
    assert node_label(apiserver) == domain  # labelled before readiness is asserted: the daemon lands here
    entries = await eventually(lambda: clique_entries(apiserver, domain), "the daemon's clique entry")
    assert entries == [
        {"nodeName": NODE, "ipAddress": "127.0.0.1", "cliqueID": CLIQUE, "index": 0, "status": "NotReady"}
    ]
    clique = apiserver.get_object("computedomaincliques", f"{domain}.{CLIQUE}", DRIVER_NS)
    assert clique is not None
    assert clique["metadata"]["labels"] == {LABEL: domain, "resource.nvidia.com/computeDomain.cliqueID": CLIQUE}

    answer = await prepare_until_ready(socket_of(driver), claim)
    assert answer.error == ""
    (device,) = answer.devices
    assert (device.pool_name, device.device_name, list(device.request_names)) == (NODE, "channel-0", ["channel"])
    assert list(device.cdi_device_ids) == [f"{VENDOR}/claim={claim[2]}-channel-0"]
    assert clique_entries(apiserver, domain)[0]["status"] == "Ready"
    spec = read_spec_file(claim_spec_path(root / "cdi", claim[2], VENDOR))
    assert spec["kind"] == f"{VENDOR}/claim"
    assert [d["name"] for d in spec["devices"]] == [f"{claim[2]}-channel-0"]
    edits = resolve(root / "cdi", list(device.cdi_device_ids))
    assert edits.node_paths == ["/dev/nvidia-caps-imex-channels/channel0"]
    assert edits.device_nodes[0]["type"] == "c" and edits.device_nodes[0]["minor"] == 0


async def test_allocation_mode_all_injects_every_channel_of_the_node(apiserver, make_driver, root):
    driver = await make_driver(start_delay=0.0)
    domain = create_domain(apiserver)
    claim = create_claim(apiserver, channel_claim("wl", NODE, domain, allocation_mode="All"))
    answer = await prepare_until_ready(socket_of(driver), claim)
    edits = resolve(root / "cdi", list(answer.devices[0].cdi_device_ids))
    assert edits.node_paths == [f"/dev/nvidia-caps-imex-channels/channel{n}" for n in range(4)]


async def test_a_second_channel_claim_on_the_node_is_refused(apiserver, make_driver):
    driver = await make_driver(start_delay=0.0)
    domain = create_domain(apiserver)
    first = create_claim(apiserver, channel_claim("wl-1", NODE, domain))
    assert (await prepare_until_ready(socket_of(driver), first)).error == ""
    second = create_claim(apiserver, channel_claim("wl-2", NODE, domain))
    answer = await prepared(socket_of(driver), second)
    assert (
        f"allocation failed: channel 0 already allocated by claim {first[2]} (according to checkpoint)" in answer.error
    )
    # The first claim prepared again answers from the checkpoint.
    assert (await prepared(socket_of(driver), first)).devices[0].device_name == "channel-0"


async def test_a_claim_in_another_namespace_than_its_domain_is_refused(apiserver, make_driver):
    driver = await make_driver()
    domain = create_domain(apiserver, namespace="team-a")
    claim = create_claim(apiserver, channel_claim("wl", NODE, domain, namespace="default"))
    answer = await prepared(socket_of(driver), claim)
    assert (
        "error asserting ComputeDomain's namespace: the ResourceClaim's namespace is different than the "
        "ComputeDomain's namespace" in answer.error
    )
    assert node_label(apiserver) is None


async def test_unknown_domain_and_missing_config_are_refused(apiserver, make_driver):
    driver = await make_driver()
    unknown = "0b5c1a52-0000-4000-8000-000000000000"
    claim = create_claim(apiserver, channel_claim("wl", NODE, unknown))
    assert f"ComputeDomain not found: {unknown}" in (await prepared(socket_of(driver), claim)).error
    bare = create_claim(apiserver, channel_claim("bare", NODE, None))
    assert "error validating config: domainID cannot be empty" in (await prepared(socket_of(driver), bare)).error
    assert node_label(apiserver) is None


async def test_configs_are_decoded_strictly(apiserver, make_driver):
    """``error decoding config parameters`` for an unknown field (NVIDIA's strict decoder); a daemon config
    named for the channel request cannot apply to it."""
    driver = await make_driver()
    domain = create_domain(apiserver)
    extra = channel_claim("extra", NODE, domain)
    extra["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["numChannels"] = 2
    answer = await prepared(socket_of(driver), create_claim(apiserver, extra))
    assert 'prepare devices failed: error decoding config parameters: config[0]: json: unknown field "numChannels"' in (
        answer.error
    )
    wrong = channel_claim("wrong", NODE, domain)
    wrong["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["kind"] = "ComputeDomainDaemonConfig"
    answer = await prepared(socket_of(driver), create_claim(apiserver, wrong))
    assert "cannot apply ComputeDomainDaemonConfig to request: channel" in answer.error
    assert node_label(apiserver) is None


async def test_a_node_labelled_for_another_domain_refuses_the_claim(apiserver, make_driver):
    driver = await make_driver()
    domain = create_domain(apiserver)
    node = apiserver.get_object("nodes", NODE)
    assert node is not None
    node["metadata"]["labels"][LABEL] = "another-domain"
    apiserver.update_direct(node)
    claim = create_claim(apiserver, channel_claim("wl", NODE, domain))
    answer = await prepared(socket_of(driver), claim)
    assert (
        "error adding Node label for ComputeDomain: label already exists for a different ComputeDomain" in answer.error
    )


# --- the daemon's claim ---------------------------------------------------------------------------------


async def test_daemon_claim_gets_the_daemon_environment_and_its_directory(apiserver, make_driver, root):
    driver = await make_driver()
    domain = create_domain(apiserver)
    claim = create_claim(apiserver, daemon_claim("daemon-claim", NODE, domain, namespace=DRIVER_NS))
    answer = await prepared(socket_of(driver), claim)  # never waits for readiness
    assert answer.error == ""
    ids = list(answer.devices[0].cdi_device_ids)
    assert ids == [f"{VENDOR}/device=all", f"{VENDOR}/claim={claim[2]}-daemon"]
    edits = resolve(root / "cdi", ids)
    assert edits.env == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CLIQUE_ID": CLIQUE,
        "COMPUTE_DOMAIN_UUID": domain,
        "COMPUTE_DOMAIN_NAME": "cd",
        "COMPUTE_DOMAIN_NAMESPACE": "default",
    }
    (mount,) = edits.mounts
    host = root / "kubelet" / "plugins" / COMPUTE_DOMAIN_DRIVER / "domains" / domain
    assert (mount["containerPath"], mount["hostPath"]) == ("/imexd", str(host))
    assert host.is_dir()
    assert (await unprepare(socket_of(driver), [claim])).claims[claim[2]].error == ""
    assert not claim_spec_path(root / "cdi", claim[2], VENDOR).exists()


# --- the emulated daemon ------------------------------------------------------------------------------


async def test_an_xid_makes_the_node_not_ready_in_its_clique_until_healed(apiserver, make_driver):
    driver = await make_driver(start_delay=0.0)
    domain = create_domain(apiserver)
    claim = create_claim(apiserver, channel_claim("wl", NODE, domain))
    assert (await prepare_until_ready(socket_of(driver), claim)).error == ""

    def status() -> str:
        return str(clique_entries(apiserver, domain)[0]["status"])

    gpu = driver.live.inventory.node.gpus[0].uuid
    driver.live.inject_xid(gpu, 79)
    await eventually(lambda: status() == "NotReady", "entry NotReady while a GPU is unhealthy")
    driver.live.set_health(gpu, True)
    await eventually(lambda: status() == "Ready", "entry Ready again once healed")


async def test_unprepare_removes_the_label_and_the_daemon_leaves_its_clique(apiserver, make_driver, root):
    driver = await make_driver(start_delay=0.0)
    domain = create_domain(apiserver)
    claim = create_claim(apiserver, channel_claim("wl", NODE, domain))
    assert (await prepare_until_ready(socket_of(driver), claim)).error == ""
    assert (await unprepare(socket_of(driver), [claim])).claims[claim[2]].error == ""
    assert node_label(apiserver) is None
    assert not claim_spec_path(root / "cdi", claim[2], VENDOR).exists()
    await eventually(lambda: clique_entries(apiserver, domain) == [], "the node's entry removed")
    # The channel is free again for the next claim.
    again = create_claim(apiserver, channel_claim("wl-2", NODE, domain))
    assert (await prepare_until_ready(socket_of(driver), again)).error == ""


async def test_a_node_without_a_clique_joins_the_domain_status_and_gets_no_devices(apiserver, make_driver, root):
    driver = await make_driver(PLAIN_NODE, start_delay=0.5)
    domain = create_domain(apiserver)
    claim = create_claim(apiserver, channel_claim("wl", NODE, domain))
    assert NOT_READY_ERROR in (await prepared(socket_of(driver), claim)).error
    answer = await prepare_until_ready(socket_of(driver), claim)
    assert answer.error == ""
    (device,) = answer.devices
    assert list(device.cdi_device_ids) == []  # nothing to inject without a clique, as NVIDIA's prepare
    assert not claim_spec_path(root / "cdi", claim[2], VENDOR).exists()
    stored = apiserver.get_object("computedomains", "cd", "default")
    assert stored is not None
    assert stored["status"]["nodes"] == [
        {"name": NODE, "ipAddress": "127.0.0.1", "cliqueID": "", "index": -1, "status": "Ready"}
    ]
    assert apiserver.objects("computedomaincliques") == []
    assert (await unprepare(socket_of(driver), [claim])).claims[claim[2]].error == ""
    assert node_label(apiserver) is None

    def nodes() -> list[Any]:
        cd = apiserver.get_object("computedomains", "cd", "default") or {}
        return list((cd.get("status") or {}).get("nodes") or [])

    await eventually(lambda: nodes() == [], "the node's status entry removed")


# --- the command line -----------------------------------------------------------------------------------


def test_dra_compute_domains_flags_reach_the_driver_settings(monkeypatch):
    seen: list[DraSettings] = []

    def fake_daemon(inputs: Any, paths: Any, settings: DraSettings, **_: Any) -> Any:
        seen.append(settings)
        return None

    monkeypatch.setattr(daemon_runs, "run_dra_daemon", fake_daemon)
    monkeypatch.setattr(daemon_runs, "run_bounded", lambda _coroutine: 0)
    argv = [
        "dra",
        "--node-name",
        NODE,
        "--compute-domains",
        "--namespace",
        "gpu-ops",
        "--imex-daemon-start-delay",
        "2.5",
    ]
    assert main(argv) == 0
    assert main(["dra", "--node-name", NODE]) == 0
    assert [s.compute_domains for s in seen] == [ComputeDomainSettings("gpu-ops", 2.5), None]


def test_dra_refuses_a_bad_imex_daemon_start_delay(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["dra", "--compute-domains", "--imex-daemon-start-delay", "soon"])
    assert exited.value.code == 2
    assert "--imex-daemon-start-delay: expected seconds between 0 and 3600, found 'soon'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--imex-mode", "bogus"], 'unknown imex.mode "bogus"'),
        (["--imex-isolation", "channel"], 'imex.isolation="channel" is not supported yet'),
        (["--imex-mode", "hostManaged"], 'imex.mode="hostManaged" requires the HostManagedIMEXDaemon feature gate'),
    ],
)
def test_dra_refuses_a_bad_imex_config_before_reading_the_kubeconfig(tmp_path, capsys, monkeypatch, flags, problem):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/compute-domain-kubelet-plugin/main.go at 89aa5bb and
    pkg/imex/imex.go (Validate) at commit 0807eed: the IMEX flags are validated before the plugin builds its
    clients, so a bad value is one line and exit 2 (as every bad flag of fakegpu) even with an unreadable
    kubeconfig."""
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    argv = ["dra", "--node-name", NODE, "--compute-domains", "--kubelet-dir", str(tmp_path / "kubelet")]
    assert main([*argv, "--kubeconfig", str(tmp_path / "missing"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fakegpu: error: imex configuration validation failed: {problem}"), err
    assert err.count("\n") == 1 and "kubeconfig" not in err
