"""gRPC errors as the kubelet prints them (Go's ``status.Error`` text)."""

from __future__ import annotations

import grpc


def go_code_name(code: grpc.StatusCode) -> str:
    """``INVALID_ARGUMENT`` -> ``InvalidArgument``, as Go's codes.Code String()."""
    if code == grpc.StatusCode.OK:
        return "OK"
    return "".join(part.capitalize() for part in code.name.split("_"))


def go_rpc_error(exc: grpc.aio.AioRpcError) -> str:
    """``rpc error: code = InvalidArgument desc = ...``"""
    return f"rpc error: code = {go_code_name(exc.code())} desc = {exc.details() or ''}"
