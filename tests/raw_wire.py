"""The kubelet APIs on the wire, without the project's generated code: a tiny protobuf codec (field number
and wire type, just enough for the kubelet APIs) and raw-bytes gRPC calls by upstream method path.

Tests built on it fail if the project's .proto files drift from the upstream field numbers, where tests
that use the generated stubs would still pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc

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
