"""Tests of the fake Kubernetes API server, driven through lightkube's AsyncClient like the DRA driver."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
from collections.abc import AsyncIterable
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx2
import pytest
from lightkube import ApiError, AsyncClient, operators
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.dictmixin import DictMixin
from lightkube.resources import resource_v1, resource_v1beta1
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from tests.apiserver import FakeApiServer
from tests.apiserver.standalone import ServerProcess
from tests.eventually import eventually

DRIVER = "gpu.example.com"
T = TypeVar("T", bound=DictMixin)


def load(cls: type[T], data: dict[str, Any]) -> T:
    return cast(T, cls.from_dict(data))


def _server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "fake-apiserver" or "process_request_thread" in t.name]


@pytest.fixture
def server():
    with FakeApiServer("1.36") as srv:
        yield srv
        assert srv.errors == []
    assert _server_threads() == []


@pytest.fixture
async def client(server: FakeApiServer):
    kube = server.client()
    yield kube
    await kube.close()


def slice_dict(
    node: str = "n1",
    driver: str = DRIVER,
    devices: int = 2,
    *,
    name: str | None = None,
    generate_name: str | None = None,
    labels: dict[str, str] | None = None,
    device_extra: dict[str, Any] | None = None,
    **spec_extra: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name} if name else {"generateName": generate_name or f"{node}-{driver}-"}
    if labels:
        meta["labels"] = labels
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {"name": f"gpu-{i}", "attributes": {"index": {"int": i}}, **(device_extra or {})} for i in range(devices)
        ],
    }
    spec.update(spec_extra)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta, "spec": {**spec}}


def make_slice(*args: Any, **kwargs: Any) -> ResourceSlice:
    return load(ResourceSlice, slice_dict(*args, **kwargs))


def claim_dict(name: str = "claim-a", namespace: str = "default", **extra: Any) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [request]}},
        **extra,
    }


class WatchCollector:
    """Consumes a lightkube watch in a task and records (event type, object name, object)."""

    def __init__(self, stream: AsyncIterable[tuple[str, Any]]) -> None:
        self.events: list[tuple[str, str]] = []
        self.objects: list[Any] = []
        self.error: BaseException | None = None
        self._stream = stream
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async for kind, obj in self._stream:
                self.events.append((kind, obj.metadata.name))
                self.objects.append(obj)
        except Exception as exc:  # ApiError, or a connection error once the server stops
            self.error = exc

    async def wait_for(self, count: int, timeout: float = 5.0) -> list[tuple[str, str]]:
        await eventually(
            lambda: len(self.events) >= count or self.error is not None, f"{count} watch event(s)", timeout
        )
        return self.events

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def start_watch(server: FakeApiServer, stream: AsyncIterable[tuple[str, Any]]) -> WatchCollector:
    before = server.open_watches
    collector = WatchCollector(stream)
    await eventually(lambda: server.open_watches > before, "the watch to open")
    return collector


# ------------------------------------------------------------------------------------------- CRUD basics


async def test_create_with_generate_name_sets_server_metadata(server: FakeApiServer, client: AsyncClient) -> None:
    created = await client.create(make_slice(generate_name="00000-gpu.example.com-n1-"))

    assert created.metadata is not None
    name = created.metadata.name
    assert name is not None
    assert re.fullmatch(r"00000-gpu\.example\.com-n1-[bcdfghjklmnpqrstvwxz2456789]{5}", name)
    assert created.metadata.uid and created.metadata.resourceVersion
    assert created.metadata.generation == 1
    assert created.metadata.creationTimestamp is not None
    fetched = await client.get(ResourceSlice, name)
    assert fetched.metadata is not None and fetched.metadata.uid == created.metadata.uid
    [stored] = server.objects("resourceslices")
    assert stored["metadata"]["name"] == name
    assert stored["metadata"]["resourceVersion"] == server.resource_version
    assert server.count("create", "resourceslices") == 1
    assert ("POST", "/apis/resource.k8s.io/v1/resourceslices", {}) in [r[:3] for r in server.requests]


async def test_generate_name_prefix_is_cut_to_58_characters(client: AsyncClient) -> None:
    prefix = "0000a-" + "x" * 60 + "-"
    created = await client.create(make_slice(generate_name=prefix))
    assert created.metadata is not None and created.metadata.name is not None
    assert len(created.metadata.name) == 63
    assert created.metadata.name.startswith(prefix[:58])


async def test_duplicate_name_is_409_already_exists(client: AsyncClient) -> None:
    await client.create(make_slice(name="slice-a"))
    with pytest.raises(ApiError) as err:
        await client.create(make_slice(name="slice-a"))
    assert err.value.status.code == 409
    assert err.value.status.reason == "AlreadyExists"


async def test_get_missing_object_is_404_status(client: AsyncClient) -> None:
    with pytest.raises(ApiError) as err:
        await client.get(ResourceSlice, "nope")
    assert err.value.status.code == 404
    assert err.value.status.reason == "NotFound"
    assert err.value.status.message == 'resourceslices.resource.k8s.io "nope" not found'


async def test_list_with_field_and_label_selectors(server: FakeApiServer, client: AsyncClient) -> None:
    await client.create(make_slice("n1", DRIVER, name="a", labels={"tier": "x"}))
    await client.create(make_slice("n2", DRIVER, name="b"))
    await client.create(make_slice("n1", "other.example.com", name="c", labels={"tier": "y"}))
    await client.create(make_slice(name="d", nodeName=None, allNodes=True))

    async def names(**kwargs: Any) -> list[Any]:
        return [s.metadata.name async for s in client.list(ResourceSlice, **kwargs)]  # type: ignore[union-attr]

    assert await names() == ["a", "b", "c", "d"]
    assert await names(fields={"spec.nodeName": "n1"}) == ["a", "c"]
    assert await names(fields={"spec.driver": DRIVER}) == ["a", "b", "d"]
    assert await names(fields={"spec.nodeName": "n1", "spec.driver": DRIVER}) == ["a"]
    assert await names(fields={"metadata.name": "b"}) == ["b"]
    assert await names(fields={"spec.nodeName": ""}) == ["d"]
    assert await names(labels={"tier": "y"}) == ["c"]
    assert await names(labels={"tier": None}) == ["a", "c"]
    assert await names(labels={"tier": ["x", "z"]}) == ["a"]
    assert await names(labels={"tier": operators.not_in(["x"])}) == ["b", "c", "d"]
    assert await names(fields={"spec.nodeName": operators.not_equal("n1")}) == ["b", "d"]
    query = [r.query for r in server.requests if r.query.get("fieldSelector")]
    assert {"fieldSelector": "spec.nodeName=n1,spec.driver=gpu.example.com"} in query
    with pytest.raises(ApiError) as err:
        await names(fields={"spec.pool.name": "n1"})
    assert err.value.status.code == 400
    assert "field label not supported" in (err.value.status.message or "")


async def test_list_pages_with_limit_and_continue(server: FakeApiServer, client: AsyncClient) -> None:
    for i in range(5):
        await client.create(make_slice(f"n{i}", name=f"s{i}"))
    names = [s.metadata.name async for s in client.list(ResourceSlice, chunk_size=2)]  # type: ignore[union-attr]
    assert names == ["s0", "s1", "s2", "s3", "s4"]
    assert server.count("list", "resourceslices") == 3


# --------------------------------------------------------------------------------------- updates/patches


async def test_update_with_stale_resource_version_is_409_conflict(client: AsyncClient) -> None:
    created = await client.create(make_slice(name="a"))
    assert created.spec.devices is not None and created.metadata is not None
    created.spec.devices.pop()
    updated = await client.replace(created)
    assert updated.metadata is not None
    assert updated.metadata.generation == 2
    assert int(updated.metadata.resourceVersion or 0) > int(created.metadata.resourceVersion or 0)

    with pytest.raises(ApiError) as err:
        await client.replace(created)  # still carries the old resourceVersion
    assert err.value.status.code == 409
    assert err.value.status.reason == "Conflict"


async def test_noop_update_keeps_resource_version_and_emits_nothing(server: FakeApiServer, client: AsyncClient) -> None:
    created = await client.create(make_slice(name="a"))
    assert created.metadata is not None
    history_before = server.resource_version
    same = await client.replace(created)
    assert same.metadata is not None
    assert same.metadata.resourceVersion == created.metadata.resourceVersion
    assert server.resource_version == history_before
    assert same.metadata.generation == 1


async def test_update_without_resource_version_is_rejected(server: FakeApiServer, client: AsyncClient) -> None:
    await client.create(make_slice(name="a"))
    with pytest.raises(ApiError) as err:
        await client.replace(make_slice(name="a"))
    assert err.value.status.code == 422
    assert "metadata.resourceVersion" in (err.value.status.message or "")


@pytest.mark.parametrize(
    ("path", "value"),
    [(("driver",), "other.example.com"), (("pool", "name"), "other-pool"), (("nodeName",), "n9")],
)
async def test_immutable_resource_slice_fields_are_422(
    server: FakeApiServer, client: AsyncClient, path: tuple[str, ...], value: str
) -> None:
    created = (await client.create(make_slice(name="a"))).to_dict()
    target = created["spec"]
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with pytest.raises(ApiError) as err:
        await client.replace(load(ResourceSlice, created))
    assert err.value.status.code == 422
    assert err.value.status.reason == "Invalid"
    assert f"spec.{'.'.join(path)}: Invalid value" in (err.value.status.message or "")
    assert "field is immutable" in (err.value.status.message or "")
    assert server.objects("resourceslices")[0]["spec"]["driver"] == DRIVER
    assert server.objects("resourceslices")[0]["spec"]["nodeName"] == "n1"


async def test_merge_patch_apply_and_unsupported_patch_types(server: FakeApiServer, client: AsyncClient) -> None:
    await client.create(make_slice(name="a"))
    patched = await client.patch(ResourceSlice, "a", {"metadata": {"labels": {"k": "v"}}}, patch_type=PatchType.MERGE)
    assert patched.metadata is not None and patched.metadata.labels == {"k": "v"}
    assert patched.metadata.generation == 1  # metadata-only change

    with pytest.raises(ApiError) as err:
        await client.patch(ResourceSlice, "a", {"metadata": {"labels": {"k": "w"}}})  # strategic merge
    assert err.value.status.code == 415

    with pytest.raises(ApiError) as err:
        await client.patch(
            ResourceSlice, "a", {"metadata": {"resourceVersion": "1"}, "spec": {}}, patch_type=PatchType.MERGE
        )
    assert err.value.status.code == 409

    with pytest.raises(ApiError) as err:
        await client.patch(
            ResourceSlice, "a", [{"op": "test", "path": "/spec/driver", "value": "x"}], patch_type=PatchType.JSON
        )
    assert err.value.status.code == 422

    applied = await client.apply(make_slice("n2", name="b"), field_manager="test")  # create
    assert applied.metadata is not None and applied.metadata.generation == 1
    changed = make_slice("n2", name="b", devices=1)
    reapplied = await client.apply(changed, field_manager="test")  # merge into the existing object
    assert reapplied.metadata is not None and reapplied.metadata.generation == 2
    assert [d["name"] for d in server.objects("resourceslices")[1]["spec"]["devices"]] == ["gpu-0"]


# -------------------------------------------------------------------------------------------- validation


async def test_invalid_device_name_is_422_and_recorded(server: FakeApiServer, client: AsyncClient) -> None:
    body = slice_dict(name="a")
    body["spec"]["devices"][0]["name"] = "GPU-0"
    with pytest.raises(ApiError) as err:
        await client.create(load(ResourceSlice, body))
    status = err.value.status
    assert status.code == 422
    assert status.reason == "Invalid"
    assert 'ResourceSlice.resource.k8s.io "a" is invalid: spec.devices[0].name: Invalid value: "GPU-0"' in (
        status.message or ""
    )
    assert server.objects("resourceslices") == []
    [rejection] = server.rejections
    assert (rejection.verb, rejection.kind, rejection.code) == ("create", "resourceslices", 422)
    assert "GPU-0" in rejection.body


@pytest.mark.parametrize(
    ("devices", "device_extra", "accepted"),
    [
        (128, None, True),
        (129, None, False),
        (64, {"taints": [{"key": "example.com/broken", "effect": "NoSchedule"}]}, True),
        (65, {"taints": [{"key": "example.com/broken", "effect": "NoSchedule"}]}, False),
    ],
)
async def test_device_count_limits(
    server: FakeApiServer, client: AsyncClient, devices: int, device_extra: Any, accepted: bool
) -> None:
    body = make_slice(name="big", devices=devices, device_extra=device_extra)
    if accepted:
        await client.create(body)
        assert len(server.objects("resourceslices")[0]["spec"]["devices"]) == devices
        assert server.rejections == []
    else:
        with pytest.raises(ApiError) as err:
            await client.create(body)
        assert err.value.status.code == 422
        assert f"spec.devices: Too many: {devices}" in (err.value.status.message or "")
        assert len(server.rejections) == 1


@pytest.mark.parametrize(
    ("spec_extra", "message"),
    [
        ({"nodeName": None}, "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"),
        ({"allNodes": True}, "but multiple fields are set"),
        ({"driver": "GPU.example.com"}, "spec.driver: Invalid value"),
        ({"pool": {"name": "n1", "generation": 1, "resourceSliceCount": 0}}, "spec.pool.resourceSliceCount"),
    ],
)
async def test_resource_slice_rules(
    server: FakeApiServer, client: AsyncClient, spec_extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiError) as err:
        await client.create(make_slice(name="a", **spec_extra))
    assert err.value.status.code == 422
    assert message in (err.value.status.message or "")
    assert server.objects("resourceslices") == []


def _policy(default: str, low: str, high: str, step: str) -> dict[str, Any]:
    return {"default": default, "validRange": {"min": low, "max": high, "step": step}}


@pytest.mark.parametrize(
    ("multiple", "policy", "message"),
    [
        (True, _policy("0", "0", "16Gi", "1Mi"), None),
        (False, _policy("0", "0", "16Gi", "1Mi"), "requestPolicy: Forbidden: allowMultipleAllocations must be true"),
        (True, _policy("1Ki", "0", "16Gi", "1Mi"), 'validRange.step: Invalid value: "1024"'),
        (True, _policy("0", "0", "17Gi", "1Mi"), 'validRange.max: Invalid value: "17Gi": max is larger than'),
        (True, {"validRange": {"min": "0"}}, "requestPolicy.default: Required value: required when validRange"),
        (
            True,
            {"default": "2", "validValues": ["1", "4"]},
            "default value is not valid according to the requestPolicy",
        ),
    ],
)
async def test_capacity_request_policies(
    server: FakeApiServer, client: AsyncClient, multiple: bool, policy: dict[str, Any], message: str | None
) -> None:
    """kubernetes pkg/apis/resource/validation/validation.go (v1.36) validateRequestPolicy: consumable capacity."""
    body = slice_dict(name="a", devices=1)
    device = body["spec"]["devices"][0]
    device["capacity"] = {"memory": {"value": "16Gi", "requestPolicy": policy}}
    device["allowMultipleAllocations"] = multiple
    if message is None:
        await client.create(load(ResourceSlice, body))
        assert server.rejections == []
        return
    with pytest.raises(ApiError) as err:
        await client.create(load(ResourceSlice, body))
    assert message in (err.value.status.message or "")


async def test_schema_violations_from_kubernetes_validate(server: FakeApiServer) -> None:
    body = slice_dict(name="a")
    body["spec"]["unknownField"] = 1
    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        response = await http.post("/apis/resource.k8s.io/v1/resourceslices", json=body)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/json"
    status = response.json()
    assert (status["kind"], status["status"], status["reason"]) == ("Status", "Failure", "Invalid")
    assert "Additional properties are not allowed ('unknownField' was unexpected)" in status["message"]
    assert server.rejections[0].message == status["message"]


async def test_shared_counters_and_devices_rules_per_release() -> None:
    counters = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}]
    consumes = {"consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "10Gi"}}}]}
    combined = make_slice(name="a", device_extra=consumes, sharedCounters=counters)
    gates = {"DRAPartitionableDevices": True}
    for version, ok in (("1.34", True), ("1.35", False), ("1.36", False)):
        with FakeApiServer(version, feature_gates=gates) as srv:
            async with srv.client() as kube:
                if ok:
                    await kube.create(combined)
                else:
                    with pytest.raises(ApiError) as err:
                        await kube.create(combined)
                    assert "only one of `sharedCounters` or `devices` is allowed" in (err.value.status.message or "")
                    # split slices are fine
                    await kube.create(make_slice(name="counters", devices=0, sharedCounters=counters))
                    await kube.create(make_slice(name="devices", device_extra=consumes))


async def test_disabled_feature_gate_fields_are_dropped() -> None:
    counters = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}]
    with FakeApiServer("1.35") as srv:  # DRAPartitionableDevices is alpha (off) in 1.35
        async with srv.client() as kube:
            created = await kube.create(make_slice(name="a", sharedCounters=counters))
    assert created.spec.sharedCounters is None
    assert "sharedCounters" not in srv.objects("resourceslices")[0]["spec"]


# ----------------------------------------------------------------------------------------------- delete


async def test_delete_and_deletecollection(server: FakeApiServer, client: AsyncClient) -> None:
    await client.create(make_slice("n1", name="a"))
    await client.create(make_slice("n1", "other.example.com", name="b"))
    await client.create(make_slice("n2", name="c"))
    await client.delete(ResourceSlice, "a")
    assert [o["metadata"]["name"] for o in server.objects("resourceslices")] == ["b", "c"]
    with pytest.raises(ApiError) as err:
        await client.delete(ResourceSlice, "a")
    assert err.value.status.code == 404

    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        response = await http.delete(
            "/apis/resource.k8s.io/v1/resourceslices", params={"fieldSelector": "spec.nodeName=n1"}
        )
        assert response.status_code == 200
        assert [i["metadata"]["name"] for i in response.json()["items"]] == ["b"]
        await client.create(make_slice("n3", name="d"))
        response = await http.delete("/apis/resource.k8s.io/v1/resourceslices/d")
        assert response.json()["status"] == "Success"
        assert response.json()["details"]["name"] == "d"
    assert [o["metadata"]["name"] for o in server.objects("resourceslices")] == ["c"]
    assert server.count("deletecollection", "resourceslices") == 1


async def test_deleting_a_node_garbage_collects_owned_slices(server: FakeApiServer, client: AsyncClient) -> None:
    uid = server.add_node("n1", labels={"gpu": "true"})
    node = await client.get(Node, "n1")
    assert node.metadata is not None and node.metadata.uid == uid
    assert node.metadata.labels == {"kubernetes.io/hostname": "n1", "gpu": "true"}
    owned = slice_dict(name="owned")
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": uid, "controller": True}
    ]
    await client.create(load(ResourceSlice, owned))
    await client.create(make_slice("n2", name="other"))
    await client.delete(Node, "n1")
    assert [o["metadata"]["name"] for o in server.objects("resourceslices")] == ["other"]


async def test_claim_status_subresource_spec_immutability_and_finalizers(
    server: FakeApiServer, client: AsyncClient
) -> None:
    body = claim_dict(status={"allocation": {"devices": {"results": []}}})
    body["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    created = await client.create(load(ResourceClaim, body))
    assert created.status is None  # status is ignored on create

    results = [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
    patched = await client.patch(
        ResourceClaim.Status,
        "claim-a",
        {"status": {"allocation": {"devices": {"results": results}}}, "spec": {"devices": {"requests": []}}},
        namespace="default",
        patch_type=PatchType.MERGE,
    )
    assert patched.status is not None and patched.spec is not None and patched.spec.devices is not None
    assert len(patched.spec.devices.requests or []) == 1  # /status ignores spec
    stored = server.get_object("resourceclaims", "claim-a", "default")
    assert stored is not None and stored["status"]["allocation"]["devices"]["results"] == results

    changed = patched.to_dict()
    changed["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    with pytest.raises(ApiError) as err:
        await client.replace(load(ResourceClaim, changed))
    assert err.value.status.code == 422
    assert "spec: Invalid value" in (err.value.status.message or "")

    claims = await start_watch(server, client.watch(ResourceClaim, namespace="default", resource_version="0"))
    await client.delete(ResourceClaim, "claim-a", namespace="default")
    pending = server.get_object("resourceclaims", "claim-a", "default")
    assert pending is not None and pending["metadata"]["deletionTimestamp"]
    await client.patch(
        ResourceClaim, "claim-a", {"metadata": {"finalizers": None}}, namespace="default", patch_type=PatchType.MERGE
    )
    assert server.objects("resourceclaims") == []
    assert await claims.wait_for(3) == [("ADDED", "claim-a"), ("MODIFIED", "claim-a"), ("DELETED", "claim-a")]
    await claims.close()


# ------------------------------------------------------------------------------------------------ watch


async def test_watch_added_modified_deleted_with_field_selector(server: FakeApiServer, client: AsyncClient) -> None:
    await client.create(make_slice("n1", name="existing"))
    watch = await start_watch(server, client.watch(ResourceSlice, fields={"spec.nodeName": "n1"}))
    created = await client.create(make_slice("n1", name="a"))
    await client.create(make_slice("n2", name="elsewhere"))  # filtered out
    assert created.spec.devices is not None
    created.spec.devices.pop()
    await client.replace(created)
    await client.delete(ResourceSlice, "a")
    deleted = server.delete_direct("resourceslices", field_selector="spec.nodeName=n1")
    assert [d["metadata"]["name"] for d in deleted] == ["existing"]

    events = await watch.wait_for(5)
    assert events == [
        ("ADDED", "existing"),  # initial state: no resourceVersion given
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
        ("DELETED", "existing"),  # behind the client's back
    ]
    deleted_rv = int(watch.objects[-1].metadata.resourceVersion)
    assert deleted_rv == int(server.resource_version)
    await watch.close()
    await eventually(lambda: server.open_watches == 0, "no open watch")


async def test_watch_from_resource_version_replays_history_and_410_after_compaction(
    server: FakeApiServer, client: AsyncClient
) -> None:
    first = await client.create(make_slice(name="a"))
    assert first.metadata is not None and first.metadata.resourceVersion is not None
    await client.create(make_slice("n2", name="b"))
    watch = await start_watch(server, client.watch(ResourceSlice, resource_version=first.metadata.resourceVersion))
    assert await watch.wait_for(1) == [("ADDED", "b")]
    await watch.close()

    server.compact()
    expired = WatchCollector(client.watch(ResourceSlice, resource_version=first.metadata.resourceVersion))
    await asyncio.wait_for(expired.task, 5)
    assert isinstance(expired.error, ApiError)
    assert expired.error.status.code == 410


async def test_watch_stream_ends_on_server_timeout_and_close_watches(server: FakeApiServer) -> None:
    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        params = {"watch": "true", "timeoutSeconds": "0.2"}
        response = await http.get("/apis/resource.k8s.io/v1/resourceslices", params=params)
        assert response.status_code == 200
        assert response.text == ""

        server.create_direct(slice_dict(name="a"))
        async with http.stream("GET", "/apis/resource.k8s.io/v1/watch/resourceslices/a") as stream:
            lines = stream.aiter_lines()
            first = await anext(lines)
            assert '"type":"ADDED"' in first
            assert server.close_watches() == 1
            assert [line async for line in lines] == []


async def test_lightkube_rewatch_resumes_from_last_resource_version(server: FakeApiServer, client: AsyncClient) -> None:
    watch = await start_watch(server, client.watch(ResourceSlice))
    created = await client.create(make_slice(name="a"))
    await watch.wait_for(1)
    assert server.close_watches() == 1  # lightkube re-watches from the last resourceVersion it saw
    server.delete_direct("resourceslices", "a")  # usually before the re-watch: must be replayed
    assert await watch.wait_for(2) == [("ADDED", "a"), ("DELETED", "a")], repr(watch.error)
    rewatch = [r.query for r in server.requests if r.query.get("watch") == "true"][1]
    assert created.metadata is not None
    assert rewatch["resourceVersion"] == created.metadata.resourceVersion
    # The barrier: a later object's event; a replay repeated on the re-watch would have come before it.
    server.create_direct(slice_dict(name="b"))
    await watch.wait_for(3)
    assert len(watch.events[: watch.events.index(("ADDED", "b"))]) == 2
    await watch.close()


# ------------------------------------------------------------------------------------------- discovery


@pytest.mark.parametrize("minor", [34, 35, 36])
async def test_version_and_discovery(minor: int) -> None:
    with FakeApiServer(f"1.{minor}") as srv:
        async with httpx2.AsyncClient(base_url=srv.url, trust_env=False) as http:
            version = (await http.get("/version")).json()
            assert (version["major"], version["minor"], version["gitVersion"]) == ("1", str(minor), f"v1.{minor}.0")
            assert (await http.get("/api")).json()["versions"] == ["v1"]
            core = (await http.get("/api/v1")).json()
            assert {r["name"] for r in core["resources"]} == {"nodes", "nodes/status", "pods", "pods/status"}
            groups = (await http.get("/apis")).json()["groups"]
            assert [g["name"] for g in groups] == ["resource.k8s.io"]
            group = (await http.get("/apis/resource.k8s.io")).json()
            assert group["kind"] == "APIGroup"
            assert [v["version"] for v in group["versions"]] == ["v1", "v1beta2", "v1beta1"]
            assert group["preferredVersion"] == {"groupVersion": "resource.k8s.io/v1", "version": "v1"}
            resources = (await http.get("/apis/resource.k8s.io/v1")).json()
            by_name = {r["name"]: r for r in resources["resources"]}
            assert set(by_name) == {
                "deviceclasses",
                "resourceclaims",
                "resourceclaims/status",
                "resourceclaimtemplates",
                "resourceslices",
            }
            assert by_name["resourceclaims"]["namespaced"] is True
            assert by_name["resourceslices"]["namespaced"] is False
            assert {"create", "list", "watch", "deletecollection"} <= set(by_name["resourceslices"]["verbs"])
            missing = await http.get("/apis/nothing.k8s.io/v1")
            assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"


async def test_only_v1beta1_served_like_1_32() -> None:
    with FakeApiServer("1.36", resource_api_versions=["v1beta1"]) as srv:
        async with httpx2.AsyncClient(base_url=srv.url, trust_env=False) as http:
            group = (await http.get("/apis/resource.k8s.io")).json()
            assert group["preferredVersion"]["version"] == "v1beta1"
            assert (await http.get("/apis/resource.k8s.io/v1")).status_code == 404
        async with srv.client() as kube:
            body = slice_dict(name="old")
            body["apiVersion"] = "resource.k8s.io/v1beta1"
            body["spec"]["devices"] = [{"name": "gpu-0", "basic": {"attributes": {"index": {"int": 0}}}}]
            created = await kube.create(load(resource_v1beta1.ResourceSlice, body))
            assert created.spec.devices is not None and created.spec.devices[0].basic is not None
            with pytest.raises(ApiError) as err:
                await kube.create(load(resource_v1.ResourceSlice, slice_dict(name="new")))
            assert err.value.status.code == 404
            bad = dict(body, metadata={"name": "bad"})
            bad["spec"] = {**body["spec"], "devices": [{"name": "Bad"}]}
            with pytest.raises(ApiError):
                await kube.create(load(resource_v1beta1.ResourceSlice, bad))


def test_constructor_rejects_unknown_versions() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        FakeApiServer("1.20")
    with pytest.raises(ValueError, match="does not exist"):
        FakeApiServer("1.33", resource_api_versions=["v1"])


# ----------------------------------------------------------------------------------- faults/bookkeeping


async def test_fault_injection(server: FakeApiServer, client: AsyncClient) -> None:
    server.fail_next("create", "resourceslices", status=500, times=2)
    for _ in range(2):
        with pytest.raises(ApiError) as err:
            await client.create(make_slice(name="a"))
        assert err.value.status.code == 500
        assert err.value.status.reason == "InternalError"
    await client.create(make_slice(name="a"))
    assert server.count("create", "resourceslices") == 3
    assert server.rejections == []  # injected failures are not rejections

    server.fail_next("get", "*", status=503)
    with pytest.raises(ApiError) as err:
        await client.get(ResourceSlice, "a")
    assert err.value.status.code == 503
    assert (await client.get(ResourceSlice, "a")).metadata is not None

    server.fail_next("watch", "resourceslices", status=410)
    expired = WatchCollector(client.watch(ResourceSlice))
    await asyncio.wait_for(expired.task, 5)
    assert isinstance(expired.error, ApiError) and expired.error.status.code == 410


async def test_a_delayed_request_is_answered_late_and_carried_out_after_the_client_gave_up(
    server: FakeApiServer, client: AsyncClient
) -> None:
    """``delay_next`` models a loaded server: the answer comes late, and a client that stopped waiting does
    not stop the request (the object is deleted all the same)."""
    await client.create(make_slice(name="a"))
    with pytest.raises(ValueError, match="seconds > 0"):
        server.delay_next("delete", "resourceslices", 0)
    server.delay_next("delete", "resourceslices", 0.5)
    with pytest.raises(httpx2.ReadTimeout):
        await _delete_with_timeout(client, "a", 0.1)
    await eventually(lambda: server.objects("resourceslices") == [], "the late delete carried out")
    server.delay_next("get", "*", 0.2, times=1)
    with pytest.raises(ApiError):  # answered (late), then promptly: the delay was used up
        await client.get(ResourceSlice, "a")
    with pytest.raises(ApiError):
        await client.get(ResourceSlice, "a")
    assert server.count("get", "resourceslices") == 2


async def _delete_with_timeout(client: AsyncClient, name: str, seconds: float) -> None:
    """A delete the client waits ``seconds`` for (lightkube's ``delete`` takes no timeout)."""
    generic: Any = client._client
    request = generic.prepare_request("delete", res=ResourceSlice, name=name)
    request.timeout = httpx2.Timeout(seconds)
    await generic.send(generic.build_adapter_request(request))


async def test_device_classes_and_direct_helpers(server: FakeApiServer, client: AsyncClient) -> None:
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }
    await client.create(load(DeviceClass, cls))
    assert server.objects("deviceclasses")[0]["metadata"]["generation"] == 1

    allocated = claim_dict(status={"allocation": {"devices": {"results": []}}})
    stored = server.create_direct(allocated)  # keeps status, unlike an API create
    assert stored["status"] == {"allocation": {"devices": {"results": []}}}
    claim = await client.get(ResourceClaim, "claim-a", namespace="default")
    assert claim.status is not None and claim.status.allocation is not None
    stored["metadata"]["labels"] = {"x": "y"}
    assert server.update_direct(stored)["metadata"]["labels"] == {"x": "y"}
    with pytest.raises(ValueError, match="is invalid"):
        server.create_direct(slice_dict(name="Bad_Name"))


async def test_kubeconfig_file(server: FakeApiServer, tmp_path: Path) -> None:
    path = server.kubeconfig(tmp_path / "kubeconfig")
    async with AsyncClient(config=KubeConfig.from_file(path), trust_env=False) as kube:
        await kube.create(make_slice(name="via-file"))
        assert kube.namespace == "default"
    assert server.objects("resourceslices")[0]["metadata"]["name"] == "via-file"


# ------------------------------------------------------------------------------------------- lifecycle


async def test_stop_closes_everything_without_leaking_threads() -> None:
    srv = FakeApiServer().start()
    port = srv.port
    assert srv.url == f"http://127.0.0.1:{port}"
    kube = srv.client()
    watch = await start_watch(srv, kube.watch(ResourceSlice))
    await kube.create(make_slice(name="a"))
    await watch.wait_for(1)
    before = len(_server_threads())
    assert before >= 3  # acceptor + watch + keep-alive connection
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)  # an idle keep-alive connection
    await eventually(lambda: len(_server_threads()) > before, "a new server thread")
    await asyncio.wait_for(asyncio.to_thread(srv.stop), 5)
    assert _server_threads() == []
    assert idle.recv(1) == b""  # closed by the server
    idle.close()
    assert srv.open_watches == 0
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    await watch.close()
    await kube.close()


def test_a_node_with_a_fractional_pods_count_is_invalid_as_on_a_real_server():
    with FakeApiServer("1.36") as server:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {"capacity": {"pods": "1.5"}}}
        with pytest.raises(
            ValueError, match=re.escape('status.capacity.pods: Invalid value: "1.5": must be an integer')
        ):
            server.create_direct(node)


# ------------------------------------------------------------------------------------------ fleet scale

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def owned_slice(node: str, uid: str, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = slice_dict(node, name=name, labels=labels)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}
    ]
    return body


def fleet(server: FakeApiServer, nodes: int, slices_per_node: int) -> dict[str, str]:
    """Nodes labelled fleet=a|b (alternating), each owning ``slices_per_node`` slices; returns name -> uid."""
    uids = {}
    for n in range(nodes):
        name = f"n{n:02d}"
        uids[name] = server.add_node(name, labels={"fleet": "ab"[n % 2]})
        for i in range(slices_per_node):
            server.create_direct(owned_slice(name, uids[name], f"{name}-s{i}", labels={"fleet": "ab"[n % 2]}))
    return uids


async def test_garbage_collection_follows_the_owner_index(server: FakeApiServer, client: AsyncClient) -> None:
    uids = fleet(server, 3, 2)
    assert server.owned_by(uids["n00"]) == ["resourceslices/n00-s0", "resourceslices/n00-s1"]
    # A slice with two owners survives the first owner's deletion and goes with the second.
    shared = owned_slice("n01", uids["n01"], "shared")
    shared["metadata"]["ownerReferences"].append(
        {"apiVersion": "v1", "kind": "Node", "name": "n02", "uid": uids["n02"]}
    )
    server.create_direct(shared)
    # An update that drops the owner reference takes the slice out of the index: it is not collected.
    freed = server.get_object("resourceslices", "n00-s1")
    assert freed is not None
    del freed["metadata"]["ownerReferences"]
    server.update_direct(freed)
    assert server.owned_by(uids["n00"]) == ["resourceslices/n00-s0"]

    await client.delete(Node, "n00")
    await client.delete(Node, "n01")
    names = [o["metadata"]["name"] for o in server.objects("resourceslices")]
    assert names == ["n00-s1", "n02-s0", "n02-s1", "shared"]
    assert server.owned_by(uids["n00"]) == [] and server.owned_by(uids["n01"]) == []
    assert server.owned_by(uids["n02"]) == ["resourceslices/n02-s0", "resourceslices/n02-s1", "resourceslices/shared"]
    await client.delete(Node, "n02")
    assert [o["metadata"]["name"] for o in server.objects("resourceslices")] == ["n00-s1"]


async def test_deletecollection_of_nodes_by_label_collects_their_slices(server: FakeApiServer) -> None:
    fleet(server, 6, 3)
    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        response = await http.delete("/api/v1/nodes", params={"labelSelector": "fleet=a"})
    assert response.status_code == 200
    deleted = response.json()
    assert deleted["kind"] == "NodeList"
    assert [i["metadata"]["name"] for i in deleted["items"]] == ["n00", "n02", "n04"]
    assert all(int(i["metadata"]["resourceVersion"]) > 0 for i in deleted["items"])
    assert [o["metadata"]["name"] for o in server.objects("nodes")] == ["n01", "n03", "n05"]
    remaining = {o["spec"]["nodeName"] for o in server.objects("resourceslices")}
    assert remaining == {"n01", "n03", "n05"}
    assert len(server.objects("resourceslices")) == 9
    assert server.count("deletecollection", "nodes") == 1
    assert server.count("delete") == 0


async def test_deletecollection_of_slices_by_label_and_field_selector(server: FakeApiServer) -> None:
    fleet(server, 4, 2)
    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        by_label = await http.delete(SLICES, params={"labelSelector": "fleet=b"})
        assert by_label.status_code == 200
        assert by_label.json()["kind"] == "ResourceSliceList"
        assert [i["metadata"]["name"] for i in by_label.json()["items"]] == ["n01-s0", "n01-s1", "n03-s0", "n03-s1"]
        by_field = await http.delete(SLICES, params={"fieldSelector": "spec.nodeName=n02"})
        assert [i["metadata"]["name"] for i in by_field.json()["items"]] == ["n02-s0", "n02-s1"]
        nothing = await http.delete(SLICES, params={"labelSelector": "fleet=c"})
        assert nothing.status_code == 200 and nothing.json()["items"] == []
    assert [o["metadata"]["name"] for o in server.objects("resourceslices")] == ["n00-s0", "n00-s1"]
    assert len(server.objects("nodes")) == 4  # owners are not touched by deleting dependents


@pytest.mark.parametrize(("policy", "slices_left"), [("Orphan", 4), ("Foreground", 0), ("Background", 0)])
async def test_deletecollection_honours_propagation_policy(
    server: FakeApiServer, policy: str, slices_left: int
) -> None:
    fleet(server, 2, 2)
    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        response = await http.request(
            "DELETE", "/api/v1/nodes", json={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy}
        )
    assert response.status_code == 200
    assert server.objects("nodes") == []
    assert len(server.objects("resourceslices")) == slices_left


async def test_unknown_propagation_policy_is_refused(server: FakeApiServer) -> None:
    fleet(server, 1, 1)
    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        response = await http.delete("/api/v1/nodes", params={"propagationPolicy": "Sideways"})
    assert response.status_code == 422
    assert 'Unsupported value: "Sideways"' in response.json()["message"]
    assert len(server.objects("nodes")) == 1


async def list_pages(http: httpx2.AsyncClient, params: dict[str, str]) -> list[dict[str, Any]]:
    pages, token = [], ""
    while True:
        response = await http.get(SLICES, params={**params, **({"continue": token} if token else {})})
        assert response.status_code == 200
        pages.append(response.json())
        token = pages[-1]["metadata"].get("continue", "")
        if not token:
            return pages


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"labelSelector": "fleet=a"}, ["n00-s0", "n00-s1", "n00-s2", "n02-s0", "n02-s1", "n02-s2", "n04-s0"]),
        ({"fieldSelector": "spec.nodeName=n03"}, ["n03-s0", "n03-s1", "n03-s2"]),
        ({"labelSelector": "fleet=b", "fieldSelector": "spec.nodeName!=n01"}, ["n03-s0", "n03-s1", "n03-s2"]),
    ],
)
async def test_list_paging_with_selectors(server: FakeApiServer, params: dict[str, str], expected: list[str]) -> None:
    fleet(server, 5, 3)
    server.delete_direct("resourceslices", "n04-s1")
    server.delete_direct("resourceslices", "n04-s2")
    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        pages = await list_pages(http, {**params, "limit": "2"})
    names = [i["metadata"]["name"] for page in pages for i in page["items"]]
    assert names == expected
    assert [len(page["items"]) for page in pages] == [2] * (len(expected) // 2) + [1] * (len(expected) % 2)
    # With a selector the number of remaining items is unknown, as on a real API server.
    assert all("remainingItemCount" not in page["metadata"] for page in pages)


async def test_list_paging_without_selector_counts_remaining_items(server: FakeApiServer) -> None:
    fleet(server, 3, 3)
    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        pages = await list_pages(http, {"limit": "4"})
        bad = await http.get(SLICES, params={"limit": "4", "continue": "not-a-token"})
    assert [len(page["items"]) for page in pages] == [4, 4, 1]
    assert [page["metadata"].get("remainingItemCount") for page in pages] == [5, 1, None]
    assert len({i["metadata"]["name"] for page in pages for i in page["items"]}) == 9
    assert bad.status_code == 400


async def test_schema_validation_can_be_turned_off() -> None:
    body = slice_dict(name="a")
    body["spec"]["unknownField"] = 1
    bad_name = slice_dict(name="b")
    bad_name["spec"]["devices"][0]["name"] = "GPU-0"
    with FakeApiServer("1.36", validate_schema=False) as srv:
        async with httpx2.AsyncClient(base_url=srv.url, trust_env=False) as http:
            accepted = await http.post(SLICES, json=body)
            refused = await http.post(SLICES, json=bad_name)
    assert accepted.status_code == 201  # only kubernetes-validate knows the schema's unknown fields
    assert refused.status_code == 422  # the server's own rules still run
    assert [o["metadata"]["name"] for o in srv.objects("resourceslices")] == ["a"]


async def test_watch_history_is_bounded_and_older_versions_expire() -> None:
    with FakeApiServer("1.36", history_limit=2) as srv:
        versions = [srv.create_direct(slice_dict(name=name))["metadata"]["resourceVersion"] for name in "abcd"]
        async with srv.client() as kube:
            replay = WatchCollector(kube.watch(ResourceSlice, resource_version=versions[1]))
            await replay.wait_for(2)
            assert replay.events == [("ADDED", "c"), ("ADDED", "d")]
            await replay.close()
            expired = WatchCollector(kube.watch(ResourceSlice, resource_version=versions[0]))
            await asyncio.wait_for(expired.task, 5)
    assert isinstance(expired.error, ApiError)
    assert expired.error.status.code == 410


async def test_counts_endpoint_reports_calls_and_bytes_per_verb(server: FakeApiServer, client: AsyncClient) -> None:
    await client.create(make_slice(name="a"))
    await client.get(ResourceSlice, "a")
    async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as http:
        counts = (await http.get("/debug/fakegpu/counts")).json()
        again = (await http.get("/debug/fakegpu/counts")).json()
    assert counts["calls"] == {"create": 1, "get": 1} == dict(server.counts)
    assert counts["bytes_received"]["create"] > len(json_bytes(slice_dict(name="a")))
    assert 0 < counts["bytes_received"]["get"] < counts["bytes_received"]["create"]
    assert counts["objects"] == {"resourceslices": 1}
    assert again["calls"] == counts["calls"]  # reading the counts is not counted


def json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def test_standalone_server_process_serves_counts_and_stops() -> None:
    with ServerProcess(36, validate_schema=False) as server:
        with httpx2.Client(base_url=server.url, trust_env=False) as http:
            assert http.post(SLICES, json=slice_dict(name="a")).status_code == 201
            assert http.get(SLICES).json()["items"][0]["metadata"]["name"] == "a"
        counts = server.counts()
        process = server._process
    assert counts["calls"] == {"create": 1, "list": 1}
    assert counts["objects"] == {"resourceslices": 1}
    assert process is not None and process.returncode == 0  # stopped, and without server errors


def test_standalone_server_serves_events_only_when_asked() -> None:
    """Node fault Events can be rehearsed against the standalone server (``--events``); without it core/v1
    Events answer 404, as the daemons' Event writers are tested to survive."""
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "default"}}
    event |= {"involvedObject": {"kind": "Node", "name": "n1"}, "reason": "GpuLostIsNotHealthy", "type": "Warning"}
    path = "/api/v1/namespaces/default/events"
    for events, code in ((True, 201), (False, 404)):
        with (
            ServerProcess(36, validate_schema=False, events=events) as server,
            httpx2.Client(base_url=server.url, trust_env=False) as http,
        ):
            assert http.post(path, json=event).status_code == code


async def test_writes_answer_with_metadata_alone_when_asked(server: FakeApiServer, client: AsyncClient) -> None:
    """As the real API server's create and update handlers do (``transformResponseObject``): an Accept of
    ``as=PartialObjectMetadata;g=meta.k8s.io;v=v1`` gets the metadata alone; without it, the whole object."""
    partial = {"accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "1"}}}
    async with httpx2.AsyncClient(base_url=server.url) as http:
        created = await http.post("/api/v1/nodes", json=node, headers=partial)
        assert created.status_code == 201
        body = created.json()
        assert body["kind"] == "PartialObjectMetadata" and body["apiVersion"] == "meta.k8s.io/v1"
        assert body["metadata"]["name"] == "n1" and body["metadata"]["uid"] and "status" not in body
        node["metadata"] = {"name": "n1", "resourceVersion": body["metadata"]["resourceVersion"]}
        replaced = await http.put("/api/v1/nodes/n1", json=node, headers=partial)
        assert replaced.status_code == 200 and replaced.json()["kind"] == "PartialObjectMetadata"
        whole = await http.get("/api/v1/nodes/n1")
        assert whole.json()["kind"] == "Node" and whole.json()["status"]["capacity"] == {"cpu": "1"}
        node["metadata"] = {"name": "n1"}
        refused = await http.post("/api/v1/nodes", json=node, headers=partial)
        assert refused.status_code == 409 and refused.json()["kind"] == "Status"


async def test_a_token_user_gets_only_its_grants_and_a_real_servers_forbidden(server: FakeApiServer) -> None:
    user = "system:serviceaccount:fakegpu:reader"
    server.authorize("t0k", user, lambda r: (r.verb, r.group, r.resource) == ("get", "", "nodes"))
    server.add_node("n1")
    restricted = server.client(token="t0k")
    admin = server.client()
    try:
        assert (await restricted.get(Node, "n1")).metadata.name == "n1"  # type: ignore[union-attr]
        with pytest.raises(ApiError) as refused:
            async for _ in restricted.list(ResourceSlice):
                pass
        assert refused.value.status.code == 403 and refused.value.status.reason == "Forbidden"
        expected = (
            f'resourceslices.resource.k8s.io is forbidden: User "{user}" cannot list resource "resourceslices" '
            'in API group "resource.k8s.io" at the cluster scope'
        )
        assert refused.value.status.message == expected
        with pytest.raises(ApiError) as named:
            await restricted.patch(Node, "n1", {"metadata": {"labels": {"a": "b"}}}, patch_type=PatchType.MERGE)
        assert named.value.status.message == (
            f'nodes "n1" is forbidden: User "{user}" cannot patch resource "nodes" in API group "" at the cluster scope'
        )
        assert server.forbidden == [expected, named.value.status.message]
        assert [r.user for r in server.requests if r.path.endswith("/nodes/n1")] == [user, user]
        # Requests without the token are the test's own: unrestricted.
        async for _ in admin.list(ResourceSlice):
            pass
        # New grants replace the old ones.
        server.authorize("t0k", user, lambda r: r.verb == "list")
        async for _ in restricted.list(ResourceSlice):
            pass
    finally:
        await restricted.close()
        await admin.close()
