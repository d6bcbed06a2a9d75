"""``fakegpu virtual-nodes --delete`` against a slow API server, and against one with nothing to delete.

On a real Kubernetes v1.36.2 server a collection delete of about 7000 ResourceSlices outlived the client's
10 s read timeout and ``--delete`` ended in exit 1 after its nodes were gone; ``--delete`` with nothing of the
prefix took 33.6 s. Here the client's usual timeout is made small (``OLD_TIMEOUT``) and the long-call bounds
too (``LONG``), so the same situations take a second or two.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import httpx2
import pytest
from lightkube import AsyncClient

from fakegpu.kube.lean_requests import LongCall
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.integration.virtual_nodes_harness import Run, command_runner, strict_apiserver

OLD_TIMEOUT = 0.25
"""The client's usual timeouts in these tests (lightkube's default is 10 s)."""
LONG = LongCall(server_seconds=1, read_seconds=1.5)
"""How long a list or collection delete may take in these tests (60 s and 75 s for real)."""
FLEET = ("--gpu-mode", "dra", "--count", "3", "--gpus", "2xh100-80gb", "--mig-mode", "dynamic")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    yield from strict_apiserver()


@pytest.fixture
async def client(server: FakeApiServer) -> AsyncIterator[AsyncClient]:
    c = AsyncClient(config=server.lightkube_config(), timeout=httpx2.Timeout(OLD_TIMEOUT))
    yield c
    await c.close()


@pytest.fixture
def run(client: AsyncClient) -> Callable[..., Awaitable[Run]]:
    return command_runner(client, long_call=LONG)


def leave_slices_behind(server: FakeApiServer) -> int:
    """Delete the Nodes but not their slices, as after a ``--delete`` that failed while the garbage collector
    was still behind: the slices lose their owner reference first, so the server does not collect them."""
    slices = server.objects("resourceslices")
    for obj in slices:
        del obj["metadata"]["ownerReferences"]
        server.update_direct(obj)
    server.delete_direct("nodes", label_selector="fakegpu.io/virtual-node=true")
    assert server.objects("nodes") == [] and len(server.objects("resourceslices")) == len(slices)
    return len(slices)


async def test_deleting_nothing_makes_three_reads_and_returns_at_once(server, run):
    """No node and no slice of the prefix: the served-version probe is the one-item list of the prefix's
    slices, so nothing is waited for and nothing swept."""
    before = len(server.requests)
    started = time.monotonic()
    result = await run("--delete")
    took = time.monotonic() - started
    assert result.code == 0, result.err
    requests = server.requests[before:]
    assert len(requests) <= 3, [(r.method, r.path) for r in requests]
    assert {r.method for r in requests} == {"GET"}
    # The figure; three local requests take a few milliseconds, so this only fails on a wait.
    assert took < 1.0, f"deleting nothing took {took:.2f} s"


async def test_a_collection_delete_answered_after_the_clients_old_timeout_still_ends_in_exit_0(server, run):
    """The real failure: nodes gone, thousands of slices left, their collection delete slower than the
    client's usual read timeout. Every try is that slow, so only waiting long enough succeeds."""
    assert (await run(*FLEET)).code == 0
    left = leave_slices_behind(server)
    server.delay_next("deletecollection", "resourceslices", 3 * OLD_TIMEOUT, times=10)
    result = await run("--delete")
    assert result.code == 0, result.err
    assert server.objects("resourceslices") == [] and left > 0
    assert server.count("deletecollection", "resourceslices") == 1
    sweep = [r for r in server.requests if r.method == "DELETE" and r.path.endswith("/resourceslices")]
    assert [r.query.get("timeoutSeconds") for r in sweep] == [str(LONG.server_seconds)]
    assert [r.query.get("timeout") for r in sweep] == [f"{LONG.server_seconds}s"]  # what bounds a non-watch


async def test_a_collection_delete_the_server_outlives_is_waited_for_and_reported(server, run):
    """Slower still: the first try outlives even the long read timeout (the server goes on deleting), the
    user is told the server is slow and being waited for, and the next try ends the run in exit 0."""
    assert (await run(*FLEET)).code == 0
    leave_slices_behind(server)
    server.delay_next("deletecollection", "resourceslices", LONG.read_seconds + 0.5)
    result = await run("--delete")
    assert result.code == 0, result.err
    assert server.objects("resourceslices") == []
    assert server.count("deletecollection", "resourceslices") == 2
    assert (
        "fakegpu: warning: deleting ResourceSlices: the API server is slow (no answer in 1.5 s); waiting for "
        "it, attempt 2, next in" in result.err
    ), result.err
    assert "error" not in result.err


async def test_a_collection_delete_answered_504_more_often_than_other_requests_may_retry_still_succeeds(server, run):
    """A server that answers its own timeout (504 after ``timeoutSeconds``) is asked again, more often than
    other failures are (each try goes on from what the last one deleted)."""
    assert (await run(*FLEET)).code == 0
    leave_slices_behind(server)
    server.fail_next("deletecollection", "resourceslices", 504, times=5, message="request did not complete")
    result = await run("--delete")
    assert result.code == 0, result.err
    assert server.objects("resourceslices") == []
    assert server.count("deletecollection", "resourceslices") == 6
    assert result.err.count("the API server is slow (504 Timeout)") == 5, result.err


async def test_a_list_that_times_out_once_is_retried(server, run):
    """Lists carry ``timeoutSeconds`` and a read timeout above it; one slower than that is tried again."""
    assert (await run(*FLEET)).code == 0
    server.delay_next("list", "nodes", LONG.read_seconds + 0.5)
    before = server.count("list", "nodes")
    first = len(server.requests)
    result = await run("--delete")
    assert result.code == 0, result.err
    assert "deleted 3 node(s)" in result.out
    assert server.count("list", "nodes") - before == 2
    assert "fakegpu: warning: listing nodes: the API server is slow (no answer in 1.5 s)" in result.err
    sent = server.requests[first:]
    lists = [r for r in sent if r.method == "GET" and r.path.endswith(("/nodes", "/resourceslices"))]
    assert lists and all(r.query.get("timeoutSeconds") == str(LONG.server_seconds) for r in lists)
