"""Wire compatibility with a real kubelet, checked without the project's generated code.

Every message here is hand-encoded and hand-decoded with a tiny protobuf codec (field number + wire
type), and every RPC is called by its upstream method path over a raw-bytes gRPC channel. Field
numbers come from the upstream protos (kubelet ``deviceplugin/v1beta1`` and ``pluginregistration/v1``);
if the project's .proto drifted from them, these tests would fail while stub-based tests still pass.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

# ---------------------------------------------------------------------------------------------------
# A tiny protobuf codec: just enough of the wire format for the kubelet APIs.
# ---------------------------------------------------------------------------------------------------

VARINT = 0
I64 = 1
LEN = 2
I32 = 5

WireValue = int | bytes
"""A decoded field value: an int for VARINT/I64/I32, the raw payload for LEN."""


def encode_varint(value: int) -> bytes:
    """Base-128 varint; negative numbers as 64-bit two's complement (10 bytes), as int32/int64 do."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def tag(field: int, wire_type: int) -> bytes:
    return encode_varint(field << 3 | wire_type)


def varint_field(field: int, value: int | bool) -> bytes:
    return tag(field, VARINT) + encode_varint(int(value))


def len_field(field: int, value: bytes | str) -> bytes:
    payload = value.encode() if isinstance(value, str) else value
    return tag(field, LEN) + encode_varint(len(payload)) + payload


def repeated_strings(field: int, values: list[str]) -> bytes:
    return b"".join(len_field(field, v) for v in values)


def map_entry(field: int, key: str, value: str) -> bytes:
    """One ``map<string,string>`` entry: a nested message with key = 1, value = 2."""
    return len_field(field, len_field(1, key) + len_field(2, value))


def decode(data: bytes) -> list[tuple[int, int, WireValue]]:
    """All fields of a message in wire order as (field number, wire type, value)."""
    fields: list[tuple[int, int, WireValue]] = []
    pos = 0
    while pos < len(data):
        key, pos = decode_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        value: WireValue
        if wire_type == VARINT:
            value, pos = decode_varint(data, pos)
        elif wire_type == LEN:
            size, pos = decode_varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated length-delimited field")
            value, pos = data[pos : pos + size], pos + size
        elif wire_type == I64:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire_type == I32:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        fields.append((number, wire_type, value))
    if pos != len(data):
        raise ValueError("trailing bytes")
    return fields


def _values(data: bytes, field: int, wire_type: int) -> list[WireValue]:
    out: list[WireValue] = []
    for number, wt, value in decode(data):
        if number != field:
            continue
        if wt != wire_type:
            raise AssertionError(f"field {field}: wire type {wt}, expected {wire_type}")
        out.append(value)
    return out


def messages(data: bytes, field: int) -> list[bytes]:
    return [v for v in _values(data, field, LEN) if isinstance(v, bytes)]


def strings(data: bytes, field: int) -> list[str]:
    return [m.decode() for m in messages(data, field)]


def string(data: bytes, field: int) -> str:
    """A singular string field (last one wins, as in protobuf); "" when absent."""
    found = strings(data, field)
    return found[-1] if found else ""


def varint(data: bytes, field: int) -> int:
    """A singular varint field; 0 when absent (proto3 default)."""
    found = [v for v in _values(data, field, VARINT) if isinstance(v, int)]
    return found[-1] if found else 0


def int64(data: bytes, field: int) -> int:
    value = varint(data, field)
    return value - (1 << 64) if value >= 1 << 63 else value


def string_map(data: bytes, field: int) -> dict[str, str]:
    return {string(entry, 1): string(entry, 2) for entry in messages(data, field)}


# ---------------------------------------------------------------------------------------------------
# Codec unit tests
# ---------------------------------------------------------------------------------------------------

# A ContainerAllocateResponse from a real kubelet's device checkpoint (PodDeviceEntries[].AllocResp).
REAL_ALLOC_RESP = "CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS0wMDAwMDAwMC1hYWFhLWJiYmItY2NjYy0wMDAwMDAwMDAwMDA="
REAL_UUID = "GPU-00000000-aaaa-bbbb-cccc-000000000000"


def test_codec_matches_real_kubelet_alloc_resp():
    raw = base64.b64decode(REAL_ALLOC_RESP)
    assert decode(raw)[0][:2] == (1, LEN)
    assert string_map(raw, 1) == {"NVIDIA_VISIBLE_DEVICES": REAL_UUID}
    assert map_entry(1, "NVIDIA_VISIBLE_DEVICES", REAL_UUID) == raw


def test_codec_varints_round_trip():
    for value in (0, 1, 127, 128, 300, 2**31 - 1, 2**63 - 1):
        assert decode_varint(encode_varint(value), 0) == (value, len(encode_varint(value)))
    assert encode_varint(300) == b"\xac\x02"
    assert len(encode_varint(-1)) == 10
    assert int64(varint_field(1, -1), 1) == -1
    assert decode(varint_field(2, True) + len_field(3, "x")) == [(2, VARINT, 1), (3, LEN, b"x")]
    with pytest.raises(ValueError):
        decode(b"\x0a\x05ab")


# ---------------------------------------------------------------------------------------------------
# Raw gRPC helpers
# ---------------------------------------------------------------------------------------------------

DP = "/v1beta1.DevicePlugin/"
PLUGIN_SOCKET = "nvidia-gpu.sock"


@asynccontextmanager
async def raw_channel(socket: Path) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        yield channel


async def unary(socket: Path, path: str, request: bytes = b"", timeout: float = 5.0) -> bytes:
    async with raw_channel(socket) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            path, request_serializer=None, response_deserializer=None
        )
        response = await call(request, timeout=timeout)
    assert isinstance(response, bytes)
    return response


async def first_list_and_watch(socket: Path) -> bytes:
    async with raw_channel(socket) as channel:
        call: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
            DP + "ListAndWatch", request_serializer=None, response_deserializer=None
        )
        stream = call(b"", timeout=5.0)
        try:
            first = await stream.read()
        finally:
            stream.cancel()
    assert isinstance(first, bytes)
    return first


async def rpc_error(socket: Path, path: str, request: bytes) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await unary(socket, path, request)
    return info.value


def plugin_socket(node) -> Path:
    return Path(node.kubelet.paths.device_plugins) / PLUGIN_SOCKET


def gpu_ids(node) -> list[str]:
    resource = node.inventory.resource("nvidia.com/gpu")
    assert resource is not None
    return [d.id for d in resource.devices]


def decode_devices(response: bytes) -> list[tuple[str, str, list[int] | None]]:
    """ListAndWatchResponse -> [(ID, health, NUMA node IDs or None when topology is absent)]."""
    out: list[tuple[str, str, list[int] | None]] = []
    for device in messages(response, 1):
        topologies = messages(device, 3)
        numa = [int64(node, 1) for node in messages(topologies[-1], 1)] if topologies else None
        out.append((string(device, 1), string(device, 2), numa))
    return out


def allocate_request(*containers: list[str]) -> bytes:
    return b"".join(len_field(1, repeated_strings(1, ids)) for ids in containers)


# ---------------------------------------------------------------------------------------------------
# DevicePlugin service
# ---------------------------------------------------------------------------------------------------


async def test_get_device_plugin_options(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    options = await unary(plugin_socket(node), DP + "GetDevicePluginOptions")
    assert varint(options, 2) == 1  # get_preferred_allocation_available
    assert varint(options, 1) == 0  # pre_start_required
    assert {number for number, _, _ in decode(options)} <= {1, 2}


async def test_get_device_plugin_options_pre_start_required(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb", pre_start_required=True)
    options = await unary(plugin_socket(node), DP + "GetDevicePluginOptions")
    assert varint(options, 1) == 1
    assert varint(options, 2) == 1


async def test_list_and_watch_first_message(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    devices = decode_devices(await first_list_and_watch(plugin_socket(node)))
    assert [d[0] for d in devices] == gpu_ids(node)
    assert all(d[0].startswith("GPU-") for d in devices)
    assert [d[1] for d in devices] == ["Healthy", "Healthy"]
    resource = node.inventory.resource("nvidia.com/gpu")
    assert [d[2] for d in devices] == [None if d.numa is None else [d.numa] for d in resource.devices]


async def test_list_and_watch_numa_ids_on_the_wire(fakegpu_node):
    spec = {"version": "v1", "numaNodes": 2, "gpus": [{"model": "h100-80gb", "count": 2, "numa": [0, 1]}]}
    node = await fakegpu_node(node_spec=spec)
    devices = decode_devices(await first_list_and_watch(plugin_socket(node)))
    assert [d[2] for d in devices] == [[0], [1]]
    # NUMA 0 is the proto3 default, so its NUMANode is present but empty; NUMA 1 carries field 1.
    device_msgs = messages(await first_list_and_watch(plugin_socket(node)), 1)
    assert messages(messages(device_msgs[0], 3)[0], 1) == [b""]
    assert messages(messages(device_msgs[1], 3)[0], 1) == [varint_field(1, 1)]


async def test_get_preferred_allocation(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    ids = gpu_ids(node)
    container = repeated_strings(1, ids) + repeated_strings(2, [ids[1]]) + varint_field(3, 1)
    response = await unary(plugin_socket(node), DP + "GetPreferredAllocation", len_field(1, container))
    containers = messages(response, 1)
    assert len(containers) == 1
    assert strings(containers[0], 1) == [ids[1]]

    container = repeated_strings(1, ids) + varint_field(3, 2)
    response = await unary(plugin_socket(node), DP + "GetPreferredAllocation", len_field(1, container))
    assert sorted(strings(messages(response, 1)[0], 1)) == sorted(ids)


async def test_allocate_envvar(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    ids = gpu_ids(node)
    response = await unary(plugin_socket(node), DP + "Allocate", allocate_request([ids[0]]))
    containers = messages(response, 1)
    assert len(containers) == 1
    assert string_map(containers[0], 1)["NVIDIA_VISIBLE_DEVICES"] == ids[0]
    resource = node.inventory.resource("nvidia.com/gpu")
    assert ids[0] == resource.devices[0].parent


async def test_allocate_one_response_per_container(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    ids = gpu_ids(node)
    response = await unary(plugin_socket(node), DP + "Allocate", allocate_request([ids[0]], [ids[1]]))
    visible = [string_map(c, 1)["NVIDIA_VISIBLE_DEVICES"] for c in messages(response, 1)]
    assert visible == ids


async def test_allocate_cdi_cri(fakegpu_node):
    config = {"version": "v1", "flags": {"plugin": {"deviceListStrategy": ["cdi-cri"]}}}
    node = await fakegpu_node("2xh100-80gb", config=config)
    ids = gpu_ids(node)
    response = await unary(plugin_socket(node), DP + "Allocate", allocate_request([ids[1]]))
    container = messages(response, 1)[0]
    cdi = [string(device, 1) for device in messages(container, 5)]
    assert cdi == [f"k8s.device-plugin.nvidia.com/gpu={ids[1]}"]


async def test_allocate_unknown_device_is_invalid_argument(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    err = await rpc_error(plugin_socket(node), DP + "Allocate", allocate_request(["GPU-no-such-device"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device" in (err.details() or "")


async def test_pre_start_container(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb", pre_start_required=True)
    ids = gpu_ids(node)
    response = await unary(plugin_socket(node), DP + "PreStartContainer", repeated_strings(1, ids))
    assert response == b""


# ---------------------------------------------------------------------------------------------------
# The kubelet emulator's v1beta1.Registration
# ---------------------------------------------------------------------------------------------------


def register_request(version: str, endpoint: str, resource_name: str) -> bytes:
    options = varint_field(2, True)
    return len_field(1, version) + len_field(2, endpoint) + len_field(3, resource_name) + len_field(4, options)


async def test_register_rejects_unsupported_version(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    request = register_request("v1", "raw-wire.sock", "nvidia.com/gpu")
    err = await rpc_error(Path(node.kubelet.paths.kubelet_socket), "/v1beta1.Registration/Register", request)
    assert err.code() == grpc.StatusCode.UNKNOWN  # the kubelet returns a plain Go error
    assert err.details() == 'requested API version "v1" is not supported by kubelet. Supported version is ["v1beta1"]'


async def test_register_rejects_resource_name_without_domain(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    request = register_request("v1beta1", "raw-wire.sock", "gpu")
    err = await rpc_error(Path(node.kubelet.paths.kubelet_socket), "/v1beta1.Registration/Register", request)
    assert err.details() == 'the ResourceName "gpu" is invalid'


# ---------------------------------------------------------------------------------------------------
# pluginregistration.Registration (plugins_registry)
# ---------------------------------------------------------------------------------------------------


async def test_plugins_registry_get_info(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb", registration="plugins-registry")
    registry = Path(node.kubelet.paths.plugins_registry)
    socket = registry / "nvidia.com-gpu-reg.sock"
    assert socket.is_socket(), sorted(p.name for p in registry.iterdir())
    info = await unary(socket, "/pluginregistration.Registration/GetInfo")
    assert string(info, 1) == "DevicePlugin"
    assert string(info, 2) == "nvidia.com/gpu"
    endpoint = string(info, 3)
    assert Path(endpoint).is_absolute()
    assert Path(endpoint) == plugin_socket(node).absolute()
    assert Path(endpoint).is_socket()
    assert strings(info, 4) == ["v1beta1"]
