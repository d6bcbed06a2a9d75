"""Host-managed IMEX (gate ``HostManagedIMEXDaemon``, alpha, with ``--imex-mode hostManaged``): the cluster admin
runs ``nvidia-imex`` as a host service, the driver creates no daemons, and the compute-domain plugin asks the
host daemon over its command socket whether it is ready before it hands out an IMEX channel.

Follows kubernetes-sigs/dra-driver-nvidia-gpu at main (after v0.4.1): ``pkg/imex/imex.go`` (modes,
isolation, ``Validate`` and its texts; added between commits 64a8903 and e254b82), ``cmd/compute-domain-kubelet-
plugin/nvlib.go`` ``checkHostIMEXReady`` at commit 6807cc7 (``nvidia-imex-ctl -q --u=<socket>``, ready when the
output holds ``READY``) and ``main.go`` at 89aa5bb (``--imex-mode``, ``--imex-isolation``,
``--imex-host-socket-path``, default ``/etc/nvidia-imex/imex_ctrl.sock``).

fakegpu has no ``nvidia-imex-ctl``: the check connects to the socket itself and reads the one status line the
emulated host daemon (``HostImexDaemon``, which ``fakegpu dra`` serves in this mode unless told not to) answers:
``READY`` while no GPU of the node is in the way (``fakegpu.dra.compute_domain.imex_readiness``: unhealthy, lost,
off the bus or off the NVLink fabric), ``UNAVAILABLE`` otherwise. A socket nothing listens on fails
as the command would, with NVIDIA's wrapping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Final

from fakegpu.dra.compute_domain.imex_readiness import imex_blockers
from fakegpu.sharing.go_quote import go_quote
from fakegpu.sharing.live_inventory import LiveInventory

log = logging.getLogger(__name__)

DRIVER_MANAGED: Final = "driverManaged"
HOST_MANAGED: Final = "hostManaged"
MODES: Final = (DRIVER_MANAGED, HOST_MANAGED)
ISOLATION_DOMAIN: Final = "domain"
ISOLATION_CHANNEL: Final = "channel"
ISOLATIONS: Final = (ISOLATION_DOMAIN, ISOLATION_CHANNEL)
DEFAULT_HOST_SOCKET: Final = Path("/etc/nvidia-imex/imex_ctrl.sock")
IMEX_CTL: Final = "nvidia-imex-ctl"
READY: Final = "READY"
UNAVAILABLE: Final = "UNAVAILABLE"
"""What the emulated daemon answers when not ready (NVIDIA's IMEX guide; the exact word is UNVERIFIED: the
plugin only looks for ``READY``)."""
QUERY_TIMEOUT: Final = 5.0


def validate_imex_config(mode: str, isolation: str, host_managed_gate: bool) -> None:
    """``imex.Config.Validate``, wrapped as both binaries wrap it; ValueError with NVIDIA's text."""
    problem = None
    if mode == HOST_MANAGED and not host_managed_gate:
        problem = f'imex.mode="{HOST_MANAGED}" requires the HostManagedIMEXDaemon feature gate to be enabled'
    elif mode not in MODES:
        problem = f'unknown imex.mode "{mode}"'
    elif isolation == ISOLATION_CHANNEL:
        problem = (
            f'imex.isolation="{ISOLATION_CHANNEL}" is not supported yet: per-workload IMEX channel allocation is '
            "not implemented"
        )
    elif isolation not in ("", ISOLATION_DOMAIN):
        problem = f'unknown imex.isolation "{isolation}": must be "{ISOLATION_DOMAIN}" or "{ISOLATION_CHANNEL}"'
    if problem is not None:
        raise ValueError(f"imex configuration validation failed: {problem}")


class HostImexError(RuntimeError):
    """The host daemon is missing or not ready; the message is ``checkHostIMEXReady``'s."""


async def check_host_imex_ready(socket: Path, timeout: float = QUERY_TIMEOUT) -> None:
    """``checkHostIMEXReady``: query the host daemon once over ``socket``; ``HostImexError`` unless it is ready."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_unix_connection(str(socket))
            try:
                writer.write(b"-q\n")
                await writer.drain()
                output = (await reader.read()).decode("utf-8", "replace")
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else "timed out"
        raise HostImexError(
            f"error running {IMEX_CTL} (socket {go_quote(str(socket))}): exit status 1, output: cannot connect to "
            f"the IMEX command service: {detail}"
        ) from None
    if READY not in output.split():
        raise HostImexError(f"host nvidia-imex daemon not ready: {output}")


class HostImexDaemon:
    """The host ``nvidia-imex`` service's command socket, emulated: one status line per query."""

    def __init__(self, socket: Path, live: LiveInventory) -> None:
        self.socket = socket
        self.live = live
        self._server: asyncio.Server | None = None

    def status(self) -> str:
        return UNAVAILABLE if imex_blockers(self.live) else READY

    async def start(self) -> None:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()  # a stale socket of an earlier run
        self._server = await asyncio.start_unix_server(self._answer, str(self.socket))
        os.chmod(self.socket, 0o600)
        log.info("emulated host nvidia-imex command service on %s", self.socket)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.readline(), QUERY_TIMEOUT)
            writer.write(f"{self.status()}\n".encode())
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
