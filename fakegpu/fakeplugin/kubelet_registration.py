"""Registering a device plugin with the kubelet: ``/v1beta1.Registration/Register`` on kubelet.sock."""

from __future__ import annotations

from pathlib import Path

import grpc

from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

API_VERSION = "v1beta1"


class RegistrationError(Exception):
    """The kubelet refused or could not be reached; the text says which."""


_DIAL_OPTIONS = [
    # A kubelet.sock re-created a moment later is dialled again within milliseconds, not after gRPC's
    # default one-second backoff (the kubelet's own dials use the same figures).
    ("grpc.initial_reconnect_backoff_ms", 20),
    ("grpc.min_reconnect_backoff_ms", 20),
    ("grpc.max_reconnect_backoff_ms", 200),
]


async def register_with_kubelet(
    kubelet_socket: Path,
    resource_name: str,
    endpoint: str,
    options: api_pb2.DevicePluginOptions,
    timeout: float = 5.0,
) -> None:
    """Call Register; the kubelet dials back and calls GetDevicePluginOptions before it returns."""
    request = api_pb2.RegisterRequest(
        version=API_VERSION, endpoint=endpoint, resource_name=resource_name, options=options
    )
    try:
        async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}", options=_DIAL_OPTIONS) as channel:
            stub = api_pb2_grpc.RegistrationStub(channel)
            await stub.Register(request, timeout=timeout, wait_for_ready=True)
    except grpc.aio.AioRpcError as exc:
        raise RegistrationError(
            f"registering {resource_name} with {kubelet_socket} failed: {exc.code().name}: {exc.details()}"
        ) from None
