"""Wire compatibility with a real kubelet, checked without the project's generated code.

Every message here is hand-encoded and hand-decoded with a tiny protobuf codec (field number + wire
type), and every RPC is called by its upstream method path over a raw-bytes gRPC channel. Field
numbers come from the upstream protos (kubelet ``deviceplugin/v1beta1`` and ``pluginregistration/v1``);
if the project's .proto drifted from them, these tests would fail while stub-based tests still pass.
"""

from __future__ import annotations

import base64
from pathlib import Path

import grpc
import pytest

from tests.raw_wire import (
    LEN,
    VARINT,
    decode,
    decode_varint,
    encode_varint,
    int64,
    len_field,
    map_entry,
    messages,
    raw_channel,
    repeated_strings,
    string,
    string_map,
    strings,
    unary,
    varint,
    varint_field,
)

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


async def test_allocate_unknown_device_is_unknown(fakegpu_node):
    """NVIDIA/k8s-device-plugin internal/plugin/server.go: a plain Go error, sent by grpc-go as Unknown."""
    node = await fakegpu_node("2xh100-80gb")
    err = await rpc_error(plugin_socket(node), DP + "Allocate", allocate_request(["GPU-no-such-device"]))
    assert err.code() == grpc.StatusCode.UNKNOWN
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
