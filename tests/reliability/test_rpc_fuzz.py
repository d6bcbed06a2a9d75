"""Fuzzing every RPC of both plugins with arbitrary messages (hypothesis).

For each RPC, ``profile.fuzz_examples`` requests are drawn: built from the message types (known device
IDs and claims mixed with unknown ones, duplicates, empty lists, 10 000 IDs, strings up to 1 MB,
unicode, NUL bytes, extreme ints) or raw bytes (random, or a valid request cut short or with bytes
flipped). Every request is sent over the plugin's real Unix socket as raw bytes, and:

- the answer is OK with a valid response, or a refusal the server gives on purpose (``Refusal``s:
  NVIDIA's Allocate and GetPreferredAllocation texts as UNKNOWN, which is what NVIDIA's plugin sends
  (plain Go errors, internal/plugin/server.go); grpc-go's INTERNAL for bytes that do not parse;
  RESOURCE_EXHAUSTED over 4 MiB);
  UNKNOWN from an escaped exception, a transport error or any other code or text fails;
- what OK or refused means is predicted from the request itself (parsed locally with the same
  protobuf): an undecodable request gets grpc-go's unmarshalling error, an Allocate of unknown devices
  UNKNOWN with NVIDIA's text, a prepare of a claim that exists answers with its device, and so on;
- after every example the server still answers a normal call (and the DRA checkpoint still holds
  exactly the claims that were prepared, with their devices);
- nothing is logged with a traceback, and at the end no stream is left open and no descriptor or task
  leaked.

The last tests pin what fuzzing found (see each docstring).

Hypothesis does not run coroutines itself, so each test hands its examples to a worker thread running
hypothesis, which submits every call to the test's event loop (where the servers run) and waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakegpu.dra.daemon import DraDriver
from fakegpu.dra.plugin_service import MAX_CONCURRENT_PREPARES
from fakegpu.dra.prepared_claims import PreparedClaims
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2 as dp
from fakegpu.kubeletapi.dra.v1 import api_pb2 as dra_v1
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2 as dra_v1beta1
from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2 as health
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg
from fakegpu.sharing.identifiers import strip_replica
from fakegpu.testing.fake_node import FakeNode
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.claim_builders import allocated_claim
from tests.reliability.profile import BIG_COUNTS, LONG_SIZES, Profile
from tests.reliability.raw_calls import (
    DRA_DRIVER,
    UNDECODABLE,
    UNLIMITED,
    Answer,
    Footprint,
    Refusal,
    first_message_bytes,
    no_leaks,
    shorten,
    start_dra_driver,
    tracebacks,
    unary_bytes,
    unclear,
    unix_channel,
)

EXAMPLE_TIMEOUT = 120.0
CALL_TIMEOUT = 60.0
NODE = "fuzz-node"
MAX_MESSAGE = 4 * 1024 * 1024
"""gRPC's default receive limit: the servers refuse bigger requests with RESOURCE_EXHAUSTED."""

DP = "/v1beta1.DevicePlugin/"
REG = "/pluginregistration.Registration/"
DRA_V1 = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
DRA_V1BETA1 = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"
HEALTH = "/v1alpha1.DRAResourceHealth/"

TOO_LARGE = Refusal(
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    r"(SERVER: )?Received message larger than max \(\d+ vs\. \d+\)",
    "a request over gRPC's 4 MiB default",
)
ALLOCATE_REFUSED = Refusal(
    grpc.StatusCode.UNKNOWN,
    r'invalid allocation request for "nvidia\.com/[^"]+": invalid request: '
    r"(no devices requested|unknown device: .{0,260}|maximum request size for shared resources is 1; found \d+)",
    "NVIDIA's ValidateRequest texts",
)
PREFERRED_REFUSED = Refusal(
    grpc.StatusCode.UNKNOWN,
    r"error getting list of preferred allocation devices: "
    r"(unknown device: .{0,260}|must-include device .{0,260} is not among the available devices"
    r"|not enough available devices to satisfy allocation|allocation size must be positive, found -?\d+)",
    "NVIDIA returns a plain Go error here, which gRPC sends as Unknown (documented in the service)",
)

# --- the nodes under test --------------------------------------------------------------------------------

DP_SPEC = {
    "version": "v1",
    "gpus": [
        {"model": "a100-40gb", "count": 2},
        {"model": "a100-40gb", "migEnabled": True, "migDevices": {"1g.5gb": 7}},
    ],
}
DP_CONFIG = {
    "version": "v1",
    "flags": {"migStrategy": "mixed"},
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.5gb", "replicas": 2}]}},
}
"""Two resources, so both GetPreferredAllocation paths are fuzzed: whole GPUs (topology-aligned) and
time-sliced MIG replicas (distributed policy)."""
RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-1g.5gb")


@dataclass
class DevicePluginTarget:
    node: FakeNode
    socket: dict[str, Path]
    registration: dict[str, Path]
    ids: dict[str, list[str]]
    options: dict[str, bytes] = field(default_factory=dict)
    info: dict[str, bytes] = field(default_factory=dict)

    def other_ids(self, resource: str) -> list[str]:
        return [i for r in RESOURCES if r != resource for i in self.ids[r]]


@pytest.fixture
async def dp_target(fakegpu_node) -> DevicePluginTarget:
    node: FakeNode = await fakegpu_node(node_spec=DP_SPEC, config=DP_CONFIG, registration="plugins-registry")
    ids = {}
    for name in RESOURCES:
        resource = node.inventory.resource(name)
        assert resource is not None, sorted(r.name for r in node.inventory.resources)
        ids[name] = [d.id for d in resource.devices]
    target = DevicePluginTarget(
        node,
        socket={n: node.plugins.servers[n].socket_path for n in RESOURCES},
        registration={n: node.plugins.registry[n].socket_path for n in RESOURCES},
        ids=ids,
    )
    for name in RESOURCES:
        async with unix_channel(target.socket[name]) as channel:
            options = await unary_bytes(channel, DP + "GetDevicePluginOptions", b"")
        async with unix_channel(target.registration[name]) as channel:
            info = await unary_bytes(channel, REG + "GetInfo", b"")
        assert options.payload is not None and info.payload is not None
        target.options[name], target.info[name] = options.payload, info.payload
    return target


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass
class DraTarget:
    driver: DraDriver
    server: FakeApiServer
    root: Path
    good: dict[str, tuple[ClaimRef, str]]
    """uid -> (ref, the device allocated to it): claims this node must prepare."""
    bad: list[ClaimRef]
    """Claims that exist but cannot be prepared here (foreign device, not allocated)."""
    info: bytes = b""

    @property
    def socket(self) -> Path:
        return self.driver.plugin.dra_socket

    @property
    def registration(self) -> Path:
        return Path(self.driver.plugin.registration_socket)

    def checkpoint(self) -> PreparedClaims:
        return PreparedClaims.in_dir(self.root / "kubelet" / "plugins" / DRA_DRIVER)

    def claim_reads(self) -> int:
        return self.server.count("get", "resourceclaims")


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        yield server


@pytest.fixture
async def dra_target(apiserver: FakeApiServer, root: Path) -> AsyncIterator[DraTarget]:
    driver = await start_dra_driver(apiserver, root, node=NODE, gpus="4xa100-40gb")
    try:
        good = {}
        for i in range(3):
            claim = apiserver.create_direct(allocated_claim(f"good-{i}", NODE, [f"gpu-{i}"]))
            ref = ClaimRef("default", f"good-{i}", claim["metadata"]["uid"])
            good[ref.uid] = (ref, f"gpu-{i}")
        foreign = apiserver.create_direct(allocated_claim("foreign", NODE, ["gpu-9"]))
        pending = allocated_claim("pending", NODE, ["gpu-3"])
        del pending["status"]
        pending_uid = apiserver.create_direct(pending)["metadata"]["uid"]
        bad = [
            ClaimRef("default", "foreign", foreign["metadata"]["uid"]),
            ClaimRef("default", "pending", pending_uid),
        ]
        target = DraTarget(driver, apiserver, root, good, bad)
        async with unix_channel(target.registration) as channel:
            info = await unary_bytes(channel, REG + "GetInfo", b"")
        assert info.payload is not None
        target.info = info.payload
        yield target
    finally:
        await driver.stop()


# --- strategies -------------------------------------------------------------------------------------------


class LongText(str):
    """A very long string whose repr stays short, so a failing example can be read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"LongText({str.__repr__(self[:20])}... {len(self)} characters)"


def long_strings() -> st.SearchStrategy[str]:
    """Strings of 1 kB to 1 MB, built from a drawn seed so hypothesis itself stays small."""
    return st.builds(
        lambda seed, size: LongText((seed * (size // len(seed) + 1))[:size]),
        st.text(min_size=1, max_size=8),
        st.sampled_from(LONG_SIZES),
    )


SPECIAL_STRINGS = ["", "\x00", "GPU-\x00", " ", "::", "::1", "../../etc/passwd", "ß", "😀", "\u202e", "a/b", "A" * 300]


def odd_strings() -> st.SearchStrategy[str]:
    """Short arbitrary unicode (NUL included), special cases, and now and then 1 kB to 1 MB."""
    return st.one_of(st.text(max_size=40), st.sampled_from(SPECIAL_STRINGS), long_strings())


def device_ids(known: Sequence[str], other: Sequence[str]) -> st.SearchStrategy[str]:
    """A device ID: one of the resource's, another resource's, a near miss, or anything short."""
    return st.one_of(
        st.sampled_from(known),
        st.sampled_from(other),
        st.sampled_from(known).map(lambda i: i + "::99"),
        st.sampled_from(known).map(str.upper),
        st.sampled_from(known).map(lambda i: i[:-1]),
        st.text(max_size=40),
        st.sampled_from(SPECIAL_STRINGS),
    )


def id_lists(known: Sequence[str], other: Sequence[str]) -> st.SearchStrategy[list[str]]:
    """Empty or short (duplicates likely), 1 000 / 10 000 IDs (all known, one repeated, or unknown), or
    a short list led by one very long string."""

    def big(kind: str, count: int, seed: str) -> list[str]:
        if kind == "cycle":
            return [known[i % len(known)] for i in range(count)]
        if kind == "repeat":
            return [seed] * count
        return [f"{seed}-{i}" for i in range(count)]

    ids = device_ids(known, other)
    return st.one_of(
        st.lists(ids, max_size=12),
        st.builds(
            big,
            st.sampled_from(["cycle", "repeat", "unknown"]),
            st.sampled_from(BIG_COUNTS),
            st.one_of(st.sampled_from(known), st.text(min_size=1, max_size=20)),
        ),
        st.builds(lambda long, rest: [long, *rest], long_strings(), st.lists(ids, max_size=3)),
    )


INT32 = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from([0, 1, 2, 3, 8, 14, 15, -1, 2**31 - 1, -(2**31)]),
)


@dataclass(frozen=True)
class Payload:
    """A request as sent on the wire; its repr stays short, so a failing example can be read."""

    data: bytes

    def __repr__(self) -> str:
        return f"Payload({len(self.data)} bytes: {shorten(repr(self.data), 160)})"


def raw_payloads(valid: st.SearchStrategy[Message]) -> st.SearchStrategy[Payload]:
    """Random bytes, or a valid request cut short, with bytes flipped, or with garbage appended."""

    def mutate(blob: bytes, how: str, where: int, byte: int) -> bytes:
        if not blob:
            return bytes([byte])
        at = where % len(blob)
        if how == "truncate":
            return blob[:at]
        if how == "flip":
            return blob[:at] + bytes([blob[at] ^ (byte or 0xFF)]) + blob[at + 1 :]
        return blob + bytes([byte]) * (where % 7 + 1)

    return st.one_of(
        st.binary(max_size=256),
        st.builds(
            mutate,
            valid.map(lambda m: m.SerializeToString()),
            st.sampled_from(["truncate", "flip", "append"]),
            st.integers(0, 2**16),
            st.integers(0, 255),
        ),
    ).map(Payload)


def payloads(valid: st.SearchStrategy[Message]) -> st.SearchStrategy[Payload]:
    """Two thirds well-formed requests, one third raw bytes."""
    typed = valid.map(lambda m: Payload(m.SerializeToString()))
    raw = raw_payloads(valid)
    return st.integers(0, 2).flatmap(lambda i: raw if i == 2 else typed)


def decoded(message_type: type[Message], request: bytes, answer: Answer) -> Any:
    """The request as the server sees it, after checking the answers that need no decoding: a request
    over 4 MiB must be refused as too large, one that does not parse with grpc-go's unmarshalling
    error. None when one of those settled it."""
    if len(request) > MAX_MESSAGE:
        assert TOO_LARGE.matches(answer), f"a request of {len(request)} bytes got {answer}"
        return None
    try:
        message = message_type.FromString(request)
    except DecodeError:
        assert UNDECODABLE.matches(answer), f"an undecodable request got {answer} ({shorten(repr(request), 200)})"
        return None
    return message


# --- running examples -----------------------------------------------------------------------------------


def fuzz_settings(profile: Profile) -> settings:
    return settings(
        max_examples=profile.fuzz_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
        print_blob=True,
    )


async def run_examples(
    profile: Profile, strategy: st.SearchStrategy[Any], check: Callable[[Any], Coroutine[Any, Any, None]]
) -> int:
    """Run ``check`` on ``profile.fuzz_examples`` drawn examples (hypothesis in a worker thread, every
    check on this event loop); a failing example is shrunk and raised here. Returns how many ran."""
    loop = asyncio.get_running_loop()
    ran = 0

    @fuzz_settings(profile)
    @given(strategy)
    def examples(example: Any) -> None:
        nonlocal ran
        ran += 1
        asyncio.run_coroutine_threadsafe(check(example), loop).result(timeout=EXAMPLE_TIMEOUT)

    await asyncio.to_thread(examples)
    return ran


def judge(answer: Answer, refusals: Sequence[Refusal], request: bytes) -> None:
    """Fail unless the answer is OK or one of ``refusals`` (plus undecodable / too large)."""
    problem = unclear(answer, [*refusals, UNDECODABLE, TOO_LARGE])
    assert problem is None, f"{problem} (request: {shorten(repr(request), 200)})"


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    found = tracebacks(caplog.records)
    assert found == [], "a server logged a traceback:\n" + "\n".join(found)


# --- device plugin ---------------------------------------------------------------------------------------


def allocate_requests(target: DevicePluginTarget, resource: str) -> st.SearchStrategy[Message]:
    known, other = target.ids[resource], target.other_ids(resource)
    containers = st.builds(lambda ids: dp.ContainerAllocateRequest(devices_ids=ids), id_lists(known, other))
    many = st.builds(
        lambda i, n: [dp.ContainerAllocateRequest(devices_ids=[known[i % len(known)]])] * n,
        st.integers(0, 100),
        st.sampled_from(BIG_COUNTS),
    )
    return st.builds(
        lambda cs: dp.AllocateRequest(container_requests=cs), st.one_of(st.lists(containers, max_size=4), many)
    )


def preferred_requests(target: DevicePluginTarget, resource: str) -> st.SearchStrategy[Message]:
    known, other = target.ids[resource], target.other_ids(resource)
    subsets = st.lists(st.sampled_from(known), max_size=len(known) + 2)
    container = st.builds(
        lambda available, must, size: dp.ContainerPreferredAllocationRequest(
            available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
        ),
        st.one_of(subsets, id_lists(known, other)),
        st.one_of(st.lists(st.sampled_from(known), max_size=3), id_lists(known, other)),
        st.one_of(st.integers(0, len(known) + 1), INT32),
    )
    return st.builds(lambda cs: dp.PreferredAllocationRequest(container_requests=cs), st.lists(container, max_size=3))


def pre_start_requests(target: DevicePluginTarget, resource: str) -> st.SearchStrategy[Message]:
    known, other = target.ids[resource], target.other_ids(resource)
    return st.builds(lambda ids: dp.PreStartContainerRequest(devices_ids=ids), id_lists(known, other))


def check_allocate(target: DevicePluginTarget, resource: str, request: bytes, answer: Answer) -> None:
    judge(answer, [ALLOCATE_REFUSED], request)
    message = decoded(dp.AllocateRequest, request, answer)
    if message is None:
        return
    known = set(target.ids[resource])
    valid = all(c.devices_ids and set(c.devices_ids) <= known for c in message.container_requests)
    assert answer.ok == valid, f"Allocate of {shorten(str(message), 300)} got {answer}"
    if answer.ok:
        assert answer.payload is not None
        response = dp.AllocateResponse.FromString(answer.payload)
        assert len(response.container_responses) == len(message.container_requests)
        for req, resp in zip(message.container_requests, response.container_responses, strict=True):
            wanted = ",".join(dict.fromkeys(strip_replica(i) for i in req.devices_ids))
            assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == wanted


def check_preferred(target: DevicePluginTarget, resource: str, request: bytes, answer: Answer) -> None:
    judge(answer, [PREFERRED_REFUSED], request)
    message = decoded(dp.PreferredAllocationRequest, request, answer)
    if message is None:
        return
    known = set(target.ids[resource])

    def satisfiable(c: dp.ContainerPreferredAllocationRequest) -> bool:
        available, must = set(c.available_deviceIDs), set(c.must_include_deviceIDs)
        size = c.allocation_size
        return available <= known and must <= available and size > 0 and len(must) <= size <= len(available)

    valid = all(satisfiable(c) for c in message.container_requests)
    assert answer.ok == valid, f"GetPreferredAllocation of {shorten(str(message), 300)} got {answer}"
    if answer.ok:
        assert answer.payload is not None
        response = dp.PreferredAllocationResponse.FromString(answer.payload)
        assert len(response.container_responses) == len(message.container_requests)
        for req, resp in zip(message.container_requests, response.container_responses, strict=True):
            chosen = list(resp.deviceIDs)
            assert len(chosen) == len(set(chosen)) == req.allocation_size
            assert set(req.must_include_deviceIDs) <= set(chosen) <= set(req.available_deviceIDs)


def check_other(rpc: str, target: DevicePluginTarget, resource: str, request: bytes, answer: Answer) -> None:
    """GetDevicePluginOptions, ListAndWatch (first message) and PreStartContainer: nothing to refuse."""
    judge(answer, [], request)
    if decoded(dp.PreStartContainerRequest if rpc == "PreStartContainer" else dp.Empty, request, answer) is None:
        return
    assert answer.ok and answer.payload is not None, f"{rpc} got {answer}"
    if rpc == "GetDevicePluginOptions":
        assert answer.payload == target.options[resource]
    elif rpc == "PreStartContainer":
        assert answer.payload == b""
    else:
        devices = [d.ID for d in dp.ListAndWatchResponse.FromString(answer.payload).devices]
        assert devices == target.ids[resource]


async def still_serving_device_plugin(target: DevicePluginTarget, resource: str) -> None:
    async with unix_channel(target.socket[resource]) as channel:
        options = await unary_bytes(channel, DP + "GetDevicePluginOptions", b"")
        assert options.payload == target.options[resource], f"the plugin stopped answering: {options}"
        one = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=target.ids[resource][:1])])
        allocate = await unary_bytes(channel, DP + "Allocate", one.SerializeToString())
        assert allocate.ok, f"a normal Allocate failed after fuzzing: {allocate}"


DP_RPCS = ("GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate", "PreStartContainer")


@pytest.mark.parametrize("rpc", DP_RPCS)
async def test_device_plugin_rpc_fuzzed(rpc: str, dp_target: DevicePluginTarget, profile: Profile, caplog):
    target = dp_target
    builders: dict[str, Callable[[str], st.SearchStrategy[Message]]] = {
        "GetDevicePluginOptions": lambda r: st.just(dp.Empty()),
        "ListAndWatch": lambda r: st.just(dp.Empty()),
        "GetPreferredAllocation": lambda r: preferred_requests(target, r),
        "Allocate": lambda r: allocate_requests(target, r),
        "PreStartContainer": lambda r: pre_start_requests(target, r),
    }
    strategy = st.sampled_from(RESOURCES).flatmap(lambda r: st.tuples(st.just(r), payloads(builders[rpc](r))))
    baseline = Footprint.now()
    channels = {r: unix_channel(target.socket[r], UNLIMITED) for r in RESOURCES}

    async def check(example: tuple[str, Payload]) -> None:
        resource, request = example[0], example[1].data
        if rpc == "ListAndWatch":
            answer = await first_message_bytes(channels[resource], DP + rpc, request, CALL_TIMEOUT)
        else:
            answer = await unary_bytes(channels[resource], DP + rpc, request, CALL_TIMEOUT)
        if rpc == "Allocate":
            check_allocate(target, resource, request, answer)
        elif rpc == "GetPreferredAllocation":
            check_preferred(target, resource, request, answer)
        else:
            check_other(rpc, target, resource, request, answer)
        await still_serving_device_plugin(target, resource)

    try:
        await run_examples(profile, strategy, check)
    finally:
        for channel in channels.values():
            await channel.close()
    services = [target.node.plugins.servers[name].service for name in RESOURCES]
    await target.node.kubelet.wait_for(lambda: all(s.streams == 1 for s in services), 5.0, "fuzzed streams to end")
    assert target.node.synced()
    await no_leaks(baseline)
    no_tracebacks(caplog)


# --- registration (device plugin through plugins_registry, and the DRA driver) --------------------------


def registration_payloads() -> st.SearchStrategy[tuple[str, Payload]]:
    status = st.builds(
        lambda ok, error: reg.RegistrationStatus(plugin_registered=ok, error=error), st.booleans(), odd_strings()
    )
    return st.one_of(
        st.tuples(st.just("GetInfo"), payloads(st.just(reg.InfoRequest()))),
        st.tuples(st.just("NotifyRegistrationStatus"), payloads(status)),
    )


async def check_registration(socket: Path, info: bytes, example: tuple[str, Payload]) -> None:
    rpc, request = example[0], example[1].data
    async with unix_channel(socket, UNLIMITED) as channel:
        answer = await unary_bytes(channel, REG + rpc, request, CALL_TIMEOUT)
        judge(answer, [], request)
        if decoded(reg.InfoRequest if rpc == "GetInfo" else reg.RegistrationStatus, request, answer) is not None:
            assert answer.ok, answer
            assert answer.payload == (info if rpc == "GetInfo" else b"")
        again = await unary_bytes(channel, REG + "GetInfo", b"")
        assert again.payload == info, f"the registration server stopped answering: {again}"


async def test_device_plugin_registration_fuzzed(dp_target: DevicePluginTarget, profile: Profile, caplog):
    target = dp_target
    strategy = st.tuples(st.sampled_from(RESOURCES), registration_payloads())

    async def check(example: tuple[str, tuple[str, Payload]]) -> None:
        resource, call = example
        await check_registration(target.registration[resource], target.info[resource], call)
        await still_serving_device_plugin(target, resource)

    await run_examples(profile, strategy, check)
    assert target.node.synced()
    no_tracebacks(caplog)


async def test_dra_registration_fuzzed(dra_target: DraTarget, profile: Profile, caplog):
    target = dra_target

    async def check(example: tuple[str, Payload]) -> None:
        await check_registration(target.registration, target.info, example)

    await run_examples(profile, registration_payloads(), check)
    await check_dra_state(target)
    no_tracebacks(caplog)


# --- DRA --------------------------------------------------------------------------------------------------


def claim_refs(target: DraTarget) -> st.SearchStrategy[ClaimRef]:
    good = [ref for ref, _ in target.good.values()]
    known = good + target.bad
    short = st.one_of(st.text(max_size=40), st.sampled_from(SPECIAL_STRINGS))

    def with_long(ref: ClaimRef, field_name: str, long: str) -> ClaimRef:
        return dataclasses.replace(ref, **{field_name: long})

    return st.one_of(
        st.sampled_from(good),
        st.sampled_from(target.bad),
        st.sampled_from(known).map(lambda r: ClaimRef(r.namespace, r.name, r.uid + "-x")),  # a replaced claim
        st.sampled_from(known).map(lambda r: ClaimRef("other", r.name, r.uid)),
        st.sampled_from(known).map(lambda r: ClaimRef(r.namespace, r.name + "-gone", r.uid)),
        st.builds(ClaimRef, short, short, short),
        st.builds(
            ClaimRef,
            st.just("default"),
            st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
            st.uuids().map(str),
        ),
        st.builds(with_long, st.sampled_from(known), st.sampled_from(["namespace", "name", "uid"]), long_strings()),
    )


def claim_lists(target: DraTarget) -> st.SearchStrategy[list[ClaimRef]]:
    good = [ref for ref, _ in target.good.values()]

    def big(kind: str, count: int) -> list[ClaimRef]:
        if kind == "repeat":
            return [good[0]] * count
        if kind == "cycle":
            return [good[i % len(good)] for i in range(count)]
        return [ClaimRef("default", "", f"uid-{i}") for i in range(count)]  # no name: refused before any read

    return st.one_of(
        st.lists(claim_refs(target), max_size=8),
        st.builds(big, st.sampled_from(["repeat", "cycle", "nameless"]), st.sampled_from(BIG_COUNTS)),
    )


def dra_requests(target: DraTarget, module: Any, prepare: bool) -> st.SearchStrategy[Message]:
    kind = module.NodePrepareResourcesRequest if prepare else module.NodeUnprepareResourcesRequest
    return st.builds(
        lambda refs: kind(claims=[module.Claim(namespace=r.namespace, name=r.name, uid=r.uid) for r in refs]),
        claim_lists(target),
    )


MAX_CLAIM_ERROR = 2000
"""An error text is for a human reading ``kubectl describe``: it quotes what it must, not megabytes."""


_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_UID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")


def possible_uid(uid: str) -> bool:
    """Whether a Kubernetes object can have this UID (at most 128 safe characters; real ones are UUIDs)."""
    return len(uid) <= 128 and _UID.fullmatch(uid) is not None and ".." not in uid


def possible(namespace: str, name: str, uid: str) -> bool:
    """Whether a ResourceClaim can have this namespace (DNS label), name (DNS subdomain) and UID."""
    return (
        len(namespace) <= 63
        and _LABEL.fullmatch(namespace) is not None
        and len(name) <= 253
        and _SUBDOMAIN.fullmatch(name) is not None
        and possible_uid(uid)
    )


def check_claims_answer(
    target: DraTarget, module: Any, prepare: bool, request: bytes, answer: Answer, reads: int
) -> None:
    """One answer per claim; good claims prepared with their device (or unprepared); claims no object can
    be refused as such, without asking the API server; at most one read per distinct claim."""
    judge(answer, [], request)
    request_type = module.NodePrepareResourcesRequest if prepare else module.NodeUnprepareResourcesRequest
    message = decoded(request_type, request, answer)
    if message is None:
        assert reads == 0, "an undecodable request made the driver read claims"
        return
    assert answer.ok and answer.payload is not None, f"the whole call failed: {answer}"
    response_type = module.NodePrepareResourcesResponse if prepare else module.NodeUnprepareResourcesResponse
    response = response_type.FromString(answer.payload)
    assert set(response.claims) == {c.uid for c in message.claims}, "a claim got no answer, or an unasked one"
    asked: dict[str, set[tuple[str, str]]] = {}
    for c in message.claims:
        asked.setdefault(c.uid, set()).add((c.namespace, c.name))
    readable = {(c.namespace, c.name, c.uid) for c in message.claims if possible(c.namespace, c.name, c.uid)}
    assert reads <= (len(readable) if prepare else 0), f"{reads} claim reads for {len(readable)} distinct claims"
    for uid, result in response.claims.items():
        assert len(result.error) <= MAX_CLAIM_ERROR, f"an error text of {len(result.error)} characters"
        impossible = not possible_uid(uid) if not prepare else not any(possible(ns, n, uid) for ns, n in asked[uid])
        if impossible:
            assert result.error.startswith("invalid claim "), f"an impossible claim got {shorten(result.error)!r}"
            continue
        good = target.good.get(uid)
        if good is None:
            if prepare:
                assert result.error, f"claim {shorten(uid)} was prepared but does not exist"
            continue
        if asked[uid] != {(good[0].namespace, good[0].name)}:
            continue  # the same UID under another name too: which answer wins is not defined
        assert result.error == "", f"claim {uid} failed: {result.error}"
        if prepare:
            assert [(d.pool_name, d.device_name) for d in result.devices] == [(NODE, good[1])]


async def check_dra_state(target: DraTarget, *, prepare_good: bool = True) -> None:
    """The checkpoint holds only completed good claims with their devices, and a CDI spec each; a normal
    prepare still works (or, with ``prepare_good=False``, an unprepare of an unknown claim, which writes
    nothing: after an unprepare the prepare would redo a claim, and its fsyncs, every time)."""
    stored = target.checkpoint().load()
    for uid, entry in stored.items():
        assert uid in target.good, f"the checkpoint holds claim {shorten(uid)}, which cannot be prepared"
        assert entry.completed
        assert [r.device for r in entry.devices] == [target.good[uid][1]]
    specs = sorted(p.name for p in (target.root / "cdi").iterdir())
    assert specs == sorted(f"k8s.gpu.nvidia.com-claim_{uid}.yaml" for uid in stored)
    if not prepare_good:
        unknown = dra_v1.Claim(namespace="default", name="liveness", uid="liveness-check")
        request_bytes = dra_v1.NodeUnprepareResourcesRequest(claims=[unknown]).SerializeToString()
        async with unix_channel(target.socket) as channel:
            answer = await unary_bytes(channel, DRA_V1 + "NodeUnprepareResources", request_bytes)
        assert answer.ok and answer.payload is not None, f"the driver stopped answering: {answer}"
        done = dra_v1.NodeUnprepareResourcesResponse.FromString(answer.payload).claims
        assert {uid: r.error for uid, r in done.items()} == {"liveness-check": ""}
        return
    ref, device = next(iter(target.good.values()))
    claim = dra_v1.Claim(namespace=ref.namespace, name=ref.name, uid=ref.uid)
    request = dra_v1.NodePrepareResourcesRequest(claims=[claim])
    async with unix_channel(target.socket) as channel:
        answer = await unary_bytes(channel, DRA_V1 + "NodePrepareResources", request.SerializeToString())
    assert answer.ok and answer.payload is not None, f"the driver stopped answering: {answer}"
    result = dra_v1.NodePrepareResourcesResponse.FromString(answer.payload).claims[ref.uid]
    assert (result.error, [d.device_name for d in result.devices]) == ("", [device])


DRA_RPCS = [
    pytest.param(dra_v1, DRA_V1, True, id="v1-NodePrepareResources"),
    pytest.param(dra_v1, DRA_V1, False, id="v1-NodeUnprepareResources"),
    pytest.param(dra_v1beta1, DRA_V1BETA1, True, id="v1beta1-NodePrepareResources"),
    pytest.param(dra_v1beta1, DRA_V1BETA1, False, id="v1beta1-NodeUnprepareResources"),
]


@pytest.mark.parametrize(("module", "service", "prepare"), DRA_RPCS)
async def test_dra_rpc_fuzzed(
    module: Any, service: str, prepare: bool, dra_target: DraTarget, profile: Profile, caplog
):
    target = dra_target
    rpc = "NodePrepareResources" if prepare else "NodeUnprepareResources"
    baseline = Footprint.now()
    channel = unix_channel(target.socket, UNLIMITED)

    async def check(example: Payload) -> None:
        reads = target.claim_reads()
        answer = await unary_bytes(channel, service + rpc, example.data, CALL_TIMEOUT)
        check_claims_answer(target, module, prepare, example.data, answer, target.claim_reads() - reads)
        await check_dra_state(target, prepare_good=prepare)

    try:
        await run_examples(profile, payloads(dra_requests(target, module, prepare)), check)
    finally:
        await channel.close()
    await check_dra_state(target)
    await no_leaks(baseline)
    no_tracebacks(caplog)


async def test_dra_health_stream_fuzzed(dra_target: DraTarget, profile: Profile, caplog):
    target = dra_target
    baseline = Footprint.now()
    channel = unix_channel(target.socket, UNLIMITED)

    async def check(example: Payload) -> None:
        request = example.data
        answer = await first_message_bytes(channel, HEALTH + "NodeWatchResources", request, CALL_TIMEOUT)
        judge(answer, [], request)
        if decoded(health.NodeWatchResourcesRequest, request, answer) is None:
            return
        assert answer.ok and answer.payload is not None, f"NodeWatchResources sent nothing: {answer}"
        devices = health.NodeWatchResourcesResponse.FromString(answer.payload).devices
        assert [d.device.device_name for d in devices] == [f"gpu-{i}" for i in range(4)]

    try:
        await run_examples(profile, payloads(st.just(health.NodeWatchResourcesRequest())), check)
    finally:
        await channel.close()
    await check_dra_state(target)
    await no_leaks(baseline)
    no_tracebacks(caplog)


async def test_unknown_methods_are_unimplemented(dp_target: DevicePluginTarget, dra_target: DraTarget):
    """A path no service has: UNIMPLEMENTED, as from any gRPC server."""
    for socket in (dp_target.socket[RESOURCES[0]], dra_target.socket):
        async with unix_channel(socket) as channel:
            for path in (DP + "Nope", "/v1.DRAPlugin/Nope", "/nothing", "/"):
                answer = await unary_bytes(channel, path, b"\x00garbage")
                assert answer.code == grpc.StatusCode.UNIMPLEMENTED, (path, str(answer))


# --- what fuzzing found, pinned ---------------------------------------------------------------------------


async def test_undecodable_requests_get_grpc_gos_status_and_no_traceback(
    dp_target: DevicePluginTarget, dra_target: DraTarget, caplog
):
    """Bytes that are not the request message: grpc-python answered UNKNOWN ("Unexpected <class
    'DecodeError'>") and logged a traceback per call; now grpc-go's INTERNAL "error unmarshalling"."""
    garbage = b"\xff\xff\xff"
    calls = [(dp_target.socket[RESOURCES[0]], DP + rpc) for rpc in DP_RPCS] + [
        (dp_target.registration[RESOURCES[0]], REG + "NotifyRegistrationStatus"),
        (dra_target.registration, REG + "GetInfo"),
        (dra_target.socket, DRA_V1 + "NodePrepareResources"),
        (dra_target.socket, DRA_V1BETA1 + "NodeUnprepareResources"),
        (dra_target.socket, HEALTH + "NodeWatchResources"),
    ]
    for socket, path in calls:
        async with unix_channel(socket) as channel:
            if path.endswith(("ListAndWatch", "NodeWatchResources")):
                answer = await first_message_bytes(channel, path, garbage)
            else:
                answer = await unary_bytes(channel, path, garbage)
        assert answer.code == grpc.StatusCode.INTERNAL, (path, str(answer))
        assert answer.details.startswith("grpc: error unmarshalling request: Error parsing message"), answer.details
    no_tracebacks(caplog)


async def test_a_very_long_unknown_device_id_is_quoted_short(dp_target: DevicePluginTarget):
    """A 1 MB unknown ID used to come back whole in the status text, which travels in a trailer: the
    client dropped the call ("received metadata size exceeds hard limit") instead of showing the error."""
    long_id = "GPU-" + "x" * 1_000_000
    allocate = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=[long_id])])
    preferred = dp.PreferredAllocationRequest(
        container_requests=[dp.ContainerPreferredAllocationRequest(available_deviceIDs=[long_id], allocation_size=1)]
    )
    async with unix_channel(dp_target.socket["nvidia.com/gpu"]) as channel:
        refused = await unary_bytes(channel, DP + "Allocate", allocate.SerializeToString())
        not_preferred = await unary_bytes(channel, DP + "GetPreferredAllocation", preferred.SerializeToString())
    shown = "GPU-" + "x" * 196 + "... (1000004 characters)"
    assert (refused.code, refused.details) == (
        grpc.StatusCode.UNKNOWN,
        f'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: {shown}',
    )
    assert (not_preferred.code, not_preferred.details) == (
        grpc.StatusCode.UNKNOWN,
        f"error getting list of preferred allocation devices: unknown device: {shown}",
    )


async def test_impossible_claims_are_refused_without_asking_the_api_server(dra_target: DraTarget, caplog):
    """An empty name used to become a LIST of the namespace ("got replaced: the API server has UID
    (none)"), a 100 kB namespace an invalid URL (a traceback, and the whole URL in the error text)."""
    claims = [
        dra_v1.Claim(namespace="default", name="", uid="uid-1"),
        dra_v1.Claim(namespace="n" * 100_000, name="c", uid="uid-2"),
        dra_v1.Claim(namespace="default", name="c\x00", uid="uid-3"),
        dra_v1.Claim(namespace="default", name="c", uid="../uid-4"),
    ]
    reads = dra_target.claim_reads()
    async with unix_channel(dra_target.socket) as channel:
        prepared = await unary_bytes(
            channel,
            DRA_V1 + "NodePrepareResources",
            dra_v1.NodePrepareResourcesRequest(claims=claims).SerializeToString(),
        )
        unprepared = await unary_bytes(
            channel,
            DRA_V1 + "NodeUnprepareResources",
            dra_v1.NodeUnprepareResourcesRequest(claims=claims).SerializeToString(),
        )
    assert dra_target.claim_reads() == reads
    assert prepared.payload is not None and unprepared.payload is not None
    errors = {
        uid: r.error for uid, r in dra_v1.NodePrepareResourcesResponse.FromString(prepared.payload).claims.items()
    }
    dns_subdomain = "expected a DNS subdomain (at most 253 lowercase letters, digits, '-' and '.')"
    assert errors == {
        "uid-1": f"invalid claim name '': {dns_subdomain}",
        "uid-2": f"invalid claim namespace {'n' * 80!r}... (100000 characters): "
        "expected a DNS label (at most 63 lowercase letters, digits and '-')",
        "uid-3": f"invalid claim name 'c\\x00': {dns_subdomain}",
        "../uid-4": "invalid claim UID '../uid-4': expected at most 128 letters, digits, '-', '_' and '.' "
        "(a Kubernetes UID)",
    }
    unprepare_errors = dra_v1.NodeUnprepareResourcesResponse.FromString(unprepared.payload).claims
    assert {uid: r.error for uid, r in unprepare_errors.items()} == {
        "uid-1": "",
        "uid-2": "",
        "uid-3": "",
        "../uid-4": errors["../uid-4"],
    }
    no_tracebacks(caplog)


async def test_a_claim_listed_ten_thousand_times_is_read_once(dra_target: DraTarget):
    ref, device = next(iter(dra_target.good.values()))
    claim = dra_v1.Claim(namespace=ref.namespace, name=ref.name, uid=ref.uid)
    reads = dra_target.claim_reads()
    async with unix_channel(dra_target.socket) as channel:
        answer = await unary_bytes(
            channel,
            DRA_V1 + "NodePrepareResources",
            dra_v1.NodePrepareResourcesRequest(claims=[claim] * 10_000).SerializeToString(),
        )
    assert dra_target.claim_reads() == reads + 1
    assert answer.payload is not None
    result = dra_v1.NodePrepareResourcesResponse.FromString(answer.payload).claims
    assert list(result) == [ref.uid]
    assert (result[ref.uid].error, [d.device_name for d in result[ref.uid].devices]) == ("", [device])
    assert dra_target.driver.preparer.prepares == 1


async def test_claim_reads_in_flight_are_bounded(dra_target: DraTarget, monkeypatch):
    """10 000 distinct claims at once used to start 10 000 API reads: the HTTP client's pool (100
    connections) made those waiting over 10 s fail with ``PoolTimeout``. Now at most
    ``MAX_CONCURRENT_PREPARES`` preparations run at once, across concurrent calls too."""
    reader = dra_target.driver.preparer.reader
    real_get = reader.get
    in_flight = peak = 0

    async def counting_get(namespace: str, name: str) -> Mapping[str, Any]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            return await real_get(namespace, name)
        finally:
            in_flight -= 1

    monkeypatch.setattr(reader, "get", counting_get)
    calls = [
        dra_v1.NodePrepareResourcesRequest(
            claims=[dra_v1.Claim(namespace="default", name=f"c-{i}-{j}", uid=f"u-{i}-{j}") for j in range(100)]
        )
        for i in range(4)
    ]
    async with unix_channel(dra_target.socket) as channel:
        answers = await asyncio.gather(
            *(unary_bytes(channel, DRA_V1 + "NodePrepareResources", c.SerializeToString()) for c in calls)
        )
    for i, answer in enumerate(answers):
        assert answer.payload is not None, str(answer)
        claims = dra_v1.NodePrepareResourcesResponse.FromString(answer.payload).claims
        assert {uid: r.error for uid, r in claims.items()} == {
            f"u-{i}-{j}": f"claim default/c-{i}-{j} not found" for j in range(100)
        }
    assert 1 < peak <= MAX_CONCURRENT_PREPARES


DISTINCT_CLAIMS = {"short": 1_000, "long": 10_000}
"""Distinct claims in one request, each read from the API server (about 1.5 ms a read here)."""


async def test_thousands_of_distinct_claims_are_each_answered(dra_target: DraTarget, profile: Profile, caplog):
    count = DISTINCT_CLAIMS.get(profile.name, 1_000)
    unknown = [dra_v1.Claim(namespace="default", name=f"unknown-{i}", uid=f"uid-{i}") for i in range(count)]
    good = [dra_v1.Claim(namespace=r.namespace, name=r.name, uid=r.uid) for r, _ in dra_target.good.values()]
    request = dra_v1.NodePrepareResourcesRequest(claims=unknown[: count // 2] + good + unknown[count // 2 :])
    async with unix_channel(dra_target.socket, UNLIMITED) as channel:
        answer = await unary_bytes(channel, DRA_V1 + "NodePrepareResources", request.SerializeToString(), CALL_TIMEOUT)
    assert answer.payload is not None, str(answer)
    claims = dra_v1.NodePrepareResourcesResponse.FromString(answer.payload).claims
    assert len(claims) == count + len(good)
    for i in range(count):
        assert claims[f"uid-{i}"].error == f"claim default/unknown-{i} not found"
    for uid, (_, device) in dra_target.good.items():
        assert (claims[uid].error, [d.device_name for d in claims[uid].devices]) == ("", [device])
    await check_dra_state(dra_target)
    no_tracebacks(caplog)
