"""The API door's retry policy: a create with generateName is never repeated when the server may have
carried it out; 429 follows Retry-After (capped); credentials a kubeconfig cannot produce are a bad input."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import httpx2
import pytest
from lightkube.config.client_adapter import async_check_output
from lightkube.core.exceptions import ApiError

from fakegpu.virtual_nodes.api import MAX_RETRY_AFTER, Api, ApiCallError, KubeconfigError, from_kubeconfig

REQUEST = httpx2.Request("POST", "https://cluster.example/apis/resource.k8s.io/v1/resourceslices")


def api_error(code: int, headers: dict[str, str] | None = None) -> ApiError:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "m", "code": code}
    return ApiError(request=REQUEST, response=httpx2.Response(code, headers=headers, json=status, request=REQUEST))


class Failing:
    """A request that fails with the given exceptions in turn, then answers "ok"; counts its calls."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.sent = 0

    async def __call__(self) -> str:
        self.sent += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses the retries take (not slept)."""
    taken: list[float] = []

    async def no_sleep(seconds: float) -> None:
        taken.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    return taken


def make_api() -> Api:
    client = SimpleNamespace(config=SimpleNamespace(cluster=SimpleNamespace(server="https://cluster.example")))
    return Api(cast(Any, client), backoff=0.2)


@pytest.mark.parametrize(
    "failure",
    [api_error(500), api_error(504), api_error(503), httpx2.ReadTimeout("timed out"), httpx2.RemoteProtocolError("x")],
)
async def test_a_create_that_may_have_happened_is_not_sent_again(pauses, failure):
    request = Failing(failure)
    with pytest.raises(ApiCallError) as info:
        await make_api().call("create", "creating a slice", request, idempotent=False)
    assert request.sent == 1
    assert info.value.uncertain


@pytest.mark.parametrize("failure", [api_error(429), httpx2.ConnectError("connection refused")])
async def test_a_create_the_server_cannot_have_seen_is_retried(pauses, failure):
    request = Failing(failure)
    assert await make_api().call("create", "creating a slice", request, idempotent=False) == "ok"
    assert request.sent == 2


async def test_idempotent_requests_are_retried_on_server_errors(pauses):
    request = Failing(api_error(500), api_error(504), httpx2.ReadTimeout("timed out"))
    assert await make_api().call("list", "listing", request) == "ok"
    assert request.sent == 4
    assert pauses == [0.2, 0.4, 0.8]


async def test_a_lasting_failure_of_an_idempotent_request_is_not_uncertain(pauses):
    request = Failing(*(api_error(500) for _ in range(10)))
    with pytest.raises(ApiCallError) as info:
        await make_api().call("get", "reading node x", request)
    assert request.sent == 4 and info.value.code == 500 and not info.value.uncertain


@pytest.mark.parametrize(
    ("header", "pause"),
    [
        ({"Retry-After": "3"}, 3.0),
        ({"Retry-After": "3600"}, MAX_RETRY_AFTER),
        ({"Retry-After": "soon"}, 0.2),
        ({}, 0.2),
    ],
)
async def test_429_waits_as_long_as_retry_after_says_within_a_cap(pauses, header, pause):
    request = Failing(api_error(429, header))
    assert await make_api().call("patch", "patching node x", request) == "ok"
    assert pauses == [pause]


async def test_credentials_that_cannot_be_produced_are_a_kubeconfig_error(pauses):
    """lightkube runs exec plugins and reads token files per request: their failures are no server's."""
    missing = Failing()

    async def exec_missing() -> None:
        missing.sent += 1
        await async_check_output(["/nonexistent/kubelogin"], env={})

    async def exec_fails() -> None:
        await async_check_output(["sh", "-c", "echo 'token expired\nlog in again' >&2; exit 3"], env={})

    api = make_api()
    with pytest.raises(KubeconfigError, match="No such file or directory"):
        await api.call("list", "listing nodes", exec_missing)
    assert missing.sent == 1, "a missing exec plugin is not retried"
    with pytest.raises(KubeconfigError) as info:
        await api.call("list", "listing nodes", exec_fails)
    assert (
        str(info.value) == "cannot get credentials for the API server: Exec sh returned 3: token expired log in again"
    )


async def test_other_errors_are_not_taken_for_the_kubeconfigs():
    def bug() -> None:
        raise KeyError("spec")

    try:
        bug()
    except KeyError as exc:
        assert not from_kubeconfig(exc)

    async def broken() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        await make_api().call("list", "listing nodes", broken)
