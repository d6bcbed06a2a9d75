"""The admin socket client: what ``fakegpu ctl`` and the live scenario runner use to ask a daemon."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fakegpu.control.protocol import MAX_RESPONSE, AdminError, encode, read_answer

EXIT_NO_DAEMON = 3
"""Exit status of a command that found no daemon on the admin socket (``fakegpu ctl``, ``scenario run
--socket``): distinct from a refusal (1) and bad usage (2), so a script can start the daemon and retry."""


class NoDaemonError(AdminError):
    """Nobody listens on the admin socket (no file, or a stale one): the daemon is not running."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"no fakegpu daemon is listening on {path}")
        self.path = path


async def admin_request(path: Path | str, request: Mapping[str, Any], timeout: float = 60.0) -> Any:
    """Send one request; the result, or AdminError with the daemon's text or why nobody answered."""
    path = Path(path)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path, limit=MAX_RESPONSE), timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        raise NoDaemonError(path) from None
    except PermissionError:
        raise AdminError(
            f"permission denied on {path}: the admin socket is owner-only; run as the daemon's user or root"
        ) from None
    except TimeoutError:
        raise AdminError(f"the fakegpu daemon on {path} did not accept the connection within {timeout:g}s") from None
    except OSError as exc:
        raise AdminError(f"cannot connect to {path}: {exc.strerror or exc}") from None
    try:
        try:
            writer.write(encode(request))
            await writer.drain()
        except ConnectionError:
            pass  # the daemon may have refused the connection and closed it: its answer is still there to read
        line = await asyncio.wait_for(reader.readline(), timeout)
    except TimeoutError:
        raise AdminError(f"the fakegpu daemon on {path} did not answer within {timeout:g}s") from None
    except (ConnectionError, ValueError, asyncio.LimitOverrunError) as exc:
        raise AdminError(f"the connection to {path} failed: {exc}") from None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return read_answer(line, path)


async def admin_call(path: Path | str, op: str, /, **args: Any) -> Any:
    """``await admin_call(sock, "health", target="3", healthy=False)``: the op's result or AdminError."""
    return await admin_request(path, {"op": op, **args})
