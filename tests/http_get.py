"""A plain HTTP GET for the tests of fakegpu's metrics and DCGM endpoints."""

from __future__ import annotations

import asyncio
import re


async def http_get(url: str) -> tuple[int, dict[str, str], str]:
    """GET ``url`` (``http://host:port/path``) over a fresh connection; (status, headers, body).

    Raw asyncio, no HTTP library: the tests see exactly the bytes the daemon's endpoint wrote."""
    match = re.fullmatch(r"http://([^/:]+):(\d+)(/.*)", url)
    assert match, url
    reader, writer = await asyncio.open_connection(match.group(1), int(match.group(2)))
    writer.write(f"GET {match.group(3)} HTTP/1.1\r\nHost: {match.group(1)}\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), 5.0)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status.split()[1]), headers, body.decode()
