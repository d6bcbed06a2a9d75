"""The compute-domain plugin's checkpoint states through its real DRA socket: PrepareStarted before the node
label, PrepareAborted after an unprepare that came first, an unprepare a crash cannot half-do, and the reset on
a new boot ID.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-kubelet-plugin/device_state.go``
(``Prepare``, ``Unprepare``, ``markClaimPrepareAbortedInCheckpoint``, ``claimMatchesPreparedClaim``),
``checkpointv.go`` (``ClaimCheckpointStatePrepareAborted``, ``abortedAt``) and ``cleanup.go``
(``PrepareAbortedClaimEntryTTL``, 2 x 45 s) at commit 0807eed (main, after v0.4.1).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.compute_domain.cdi_edits import VENDOR
from fakegpu.dra.daemon import DraDriver
from fakegpu.dra.prepared_claims import PreparedClaims
from tests.apiserver import FakeApiServer
from tests.cdi_runtime import claim_spec_path
from tests.claim_builders import channel_claim, compute_domain
from tests.dra_kubelet_client import prepare, unprepare
from tests.eventually import eventually
from tests.integration.compute_domain_drivers import ComputeDomainDrivers, serve_node, socket_of
from tests.integration.started_dra_drivers import write_boot_id

NODE = "node-a"
CLUSTER = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"
LABEL = "resource.nvidia.com/computeDomain"
NODE_SPEC = f"version: v1\nfabric: {{clusterUUID: {CLUSTER}, cliqueID: 3}}\ngpus: [{{model: b200, count: 2}}]\n"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    yield from serve_node()


@pytest.fixture
def boot_id(root: Path) -> Path:
    """The fake node's boot ID (``--boot-id-file``); a test reboots the node by rewriting it."""
    return write_boot_id(root, "6f1c2e0a-3b7d-4c55-9e21-000000000001")


@pytest.fixture
async def make_driver(root: Path, apiserver: FakeApiServer, boot_id: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start the DRA driver with its compute-domain plugin; one at a time (a new one restarts the node's)."""
    drivers = ComputeDomainDrivers(root, apiserver, boot_id_file=boot_id)

    async def make(start_delay: float = 60.0) -> DraDriver:
        await drivers.stop_all()
        return await drivers.start(NODE_SPEC, namespace="fakegpu", start_delay=start_delay)

    yield make
    await drivers.stop_all()


def checkpoint_file(root: Path) -> Path:
    return root / "kubelet" / "plugins" / "compute-domain.nvidia.com" / "checkpoint.json"


def entries(root: Path) -> dict[str, dict[str, Any]]:
    data = json.loads(checkpoint_file(root).read_text())["data"]
    return {c["uid"]: c for c in data["preparedClaims"]}


def node_label(apiserver: FakeApiServer) -> str | None:
    return ((apiserver.get_object("nodes", NODE) or {})["metadata"].get("labels") or {}).get(LABEL)


def setup_claim(apiserver: FakeApiServer) -> tuple[str, tuple[str, str, str]]:
    domain = str(apiserver.create_direct(compute_domain("cd"))["metadata"]["uid"])
    meta = apiserver.create_direct(channel_claim("wl", NODE, domain))["metadata"]
    return domain, (meta["namespace"], meta["name"], meta["uid"])


async def test_prepare_started_comes_before_the_label_and_unprepare_aborts_it(root, apiserver, make_driver):
    """A channel claim waiting for its daemon is ``PrepareStarted`` (with the devices it is to get) while the node
    carries the domain's label; its unprepare clears the label and leaves ``PrepareAborted`` with ``abortedAt``;
    a stale retry of the same prepare is refused for good; a second unprepare is a no-op."""
    driver = await make_driver()
    domain, claim = setup_claim(apiserver)
    first = (await prepare(socket_of(driver), [claim])).claims[claim[2]]
    assert "current node not ready in ComputeDomain" in first.error
    entry = entries(root)[claim[2]]
    assert entry["state"] == "PrepareStarted"
    assert [(d["device"], d["uuid"]) for d in entry["devices"]] == [("channel-0", domain)]
    assert node_label(apiserver) == domain

    answer = await unprepare(socket_of(driver), [claim])
    assert answer.claims[claim[2]].error == ""
    assert node_label(apiserver) is None
    entry = entries(root)[claim[2]]
    assert entry["state"] == "PrepareAborted" and isinstance(entry["abortedAt"], float)

    stale = (await prepare(socket_of(driver), [claim])).claims[claim[2]]
    assert stale.error == (
        f"error preparing devices for claim 'default/wl:{claim[2]}': stale prepare for claim default/wl:{claim[2]}: "
        "claim prepare was already aborted"
    )
    assert node_label(apiserver) is None  # the stale retry labelled nothing
    assert (await unprepare(socket_of(driver), [claim])).claims[claim[2]].error == ""
    assert entries(root)[claim[2]]["state"] == "PrepareAborted"


async def test_an_aborted_entry_expires_after_nvidias_ttl(root, apiserver, make_driver):
    """``PrepareAbortedClaimEntryTTL`` = 2 x ``ErrorRetryMaxTimeout`` = 90 s: after it the entry is dropped and the
    claim can be prepared again."""
    driver = await make_driver(start_delay=0.1)
    _, claim = setup_claim(apiserver)
    await prepare(socket_of(driver), [claim])
    await unprepare(socket_of(driver), [claim])
    assert driver.compute_domains is not None
    preparer = driver.compute_domains.preparer
    aborted_at = entries(root)[claim[2]]["abortedAt"]
    preparer.wall_clock = lambda: aborted_at + 89.0
    assert "already aborted" in (await prepare(socket_of(driver), [claim])).claims[claim[2]].error
    preparer.wall_clock = lambda: aborted_at + 90.0

    async def prepared() -> Any:
        answer = (await prepare(socket_of(driver), [claim])).claims[claim[2]]
        assert answer.error == ""
        return answer

    await eventually(prepared, "the claim prepared again once its PrepareAborted entry expired", 15.0)
    assert entries(root)[claim[2]]["state"] == "PrepareCompleted"


async def test_an_unprepare_cut_short_by_a_crash_is_finished_by_the_retry(root, apiserver, make_driver, monkeypatch):
    """Unprepare clears the label first and the checkpoint last: when writing the checkpoint fails (a crash
    between the two), the entry is still there and the kubelet's retry finishes the unprepare."""
    driver = await make_driver(start_delay=0.1)
    domain, claim = setup_claim(apiserver)

    async def completed() -> None:
        assert (await prepare(socket_of(driver), [claim])).claims[claim[2]].error == ""

    await eventually(completed, "the channel claim prepared", 15.0)
    assert node_label(apiserver) == domain
    real_remove = PreparedClaims.remove

    def crash(self: PreparedClaims, uid: str) -> bool:
        raise OSError("disk gone while writing the checkpoint")

    monkeypatch.setattr(PreparedClaims, "remove", crash)
    failed = await unprepare(socket_of(driver), [claim])
    assert "disk gone" in failed.claims[claim[2]].error
    assert node_label(apiserver) is None
    assert entries(root)[claim[2]]["state"] == "PrepareCompleted"  # nothing forgotten: the retry can finish

    monkeypatch.setattr(PreparedClaims, "remove", real_remove)
    assert (await unprepare(socket_of(driver), [claim])).claims[claim[2]].error == ""
    assert claim[2] not in entries(root)


def reset_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "fakegpu.dra.boot_reset"]


def boot_of(root: Path) -> str:
    return str(json.loads(checkpoint_file(root).read_text())["data"]["nodeBootID"])


async def test_a_new_boot_id_forgets_the_claims_and_undoes_nothing_else(root, apiserver, make_driver, boot_id, caplog):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/compute-domain-kubelet-plugin/device_state.go (``NewDeviceState``)
    and checkpointv.go (``CheckpointV2.NodeBootID``) at commit 0807eed: PR #1066 (v0.4.0) gave the compute-domain
    plugin the GPU plugin's boot-ID check with the same texts. A restart in the same boot keeps the claims; a new
    boot ID logs ``Invalidating checkpoint: ...`` and ``Create empty checkpoint`` (here once per plugin, both in
    one process) and forgets every claim, and nothing else: the node keeps ``resource.nvidia.com/computeDomain``
    (computedomain.go's ``RemoveNodeLabel`` runs only from ``Unprepare``). The claim's CDI spec is gone, as a real
    reboot's tmpfs takes it, and the kubelet's next prepare prepares the claim anew."""
    caplog.set_level(logging.INFO, logger="fakegpu.dra.boot_reset")
    first = boot_id.read_text().strip()
    driver = await make_driver(start_delay=0.1)
    assert boot_of(root) == first
    domain, claim = setup_claim(apiserver)

    async def completed() -> None:
        assert (await prepare(socket_of(driver), [claim])).claims[claim[2]].error == ""

    await eventually(completed, "the channel claim prepared", 15.0)
    spec = claim_spec_path(root / "cdi", claim[2], VENDOR)
    assert spec.exists() and node_label(apiserver) == domain

    caplog.clear()
    driver = await make_driver(start_delay=0.1)  # a restart of the plugins in the same boot
    assert entries(root)[claim[2]]["state"] == "PrepareCompleted" and spec.exists()
    assert reset_log(caplog) == []

    second = "6f1c2e0a-3b7d-4c55-9e21-000000000002"
    boot_id.write_text(second + "\n")  # the node rebooted
    driver = await make_driver(start_delay=0.1)
    invalidated = f'Invalidating checkpoint: checkpoint nodeBootID "{first}" != current "{second}"'
    assert reset_log(caplog) == [invalidated, "Create empty checkpoint"] * 2  # the GPU plugin, then this one
    assert entries(root) == {} and boot_of(root) == second
    assert not spec.exists(), "what a reboot leaves: no CDI spec of the forgotten claim"
    assert node_label(apiserver) == domain, "NVIDIA's reset leaves the node label alone"

    await eventually(completed, "the channel claim prepared again in the new boot", 15.0)
    assert entries(root)[claim[2]]["state"] == "PrepareCompleted" and spec.exists()
