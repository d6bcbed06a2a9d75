"""The daemons' shared lifecycle: start order, reverse stop order, signals, and stops after a failed start."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from fakegpu.runtime.daemon_lifecycle import DaemonLifecycle


class Recorder:
    def __init__(self, name: str, log: list[str], *, fail_start: bool = False) -> None:
        self.name, self.log, self.fail_start = name, log, fail_start

    async def start(self) -> None:
        self.log.append(f"start {self.name}")
        if self.fail_start:
            raise OSError(f"{self.name} cannot start")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")


def endpoints(log: list[str], *, fail: str = ""):
    """Like ``TelemetrySettings.endpoints``: each made only once the one before it has started."""
    for name in ("metrics", "dcgm"):
        log.append(f"make {name}")
        yield Recorder(name, log, fail_start=name == fail)


async def test_start_in_order_stop_in_reverse_endpoints_last():
    log: list[str] = []
    stop = asyncio.Event()
    async with DaemonLifecycle(stop) as daemon:
        daemon.cleanup(lambda: log.append("unfollow nvidia-smi"))
        face, sync = Recorder("face", log), Recorder("sync", log)
        await daemon.serve(face, sync, admin=Recorder("admin", log), endpoints=endpoints(log))
        stop.set()
        await daemon.wait()
    assert log == [
        "make metrics",
        "start metrics",
        "make dcgm",
        "start dcgm",
        "start admin",
        "start face",
        "start sync",
        "stop sync",
        "stop face",
        "stop admin",
        "stop metrics",
        "stop dcgm",
        "unfollow nvidia-smi",
    ]


async def test_a_failed_start_still_stops_everything_handed_over():
    log: list[str] = []
    with pytest.raises(OSError, match="metrics cannot start"):
        async with DaemonLifecycle() as daemon:
            daemon.cleanup(lambda: log.append("unfollow nvidia-smi"))
            await daemon.serve(
                Recorder("face", log), admin=Recorder("admin", log), endpoints=endpoints(log, fail="metrics")
            )
    assert log == [
        "make metrics",
        "start metrics",
        "stop face",
        "stop admin",
        "stop metrics",
        "unfollow nvidia-smi",
    ]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT])
async def test_stop_signals_end_wait_and_sighup_reloads(sig):
    reloads: list[int] = []
    async with DaemonLifecycle() as daemon:
        daemon.on_reload(lambda: reloads.append(1))
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(daemon.wait(), 5.0)
    assert reloads == [1]


async def test_signal_handlers_are_removed_before_anything_stops():
    loop = asyncio.get_running_loop()
    seen: list[bool] = []

    class Face(Recorder):
        async def stop(self) -> None:
            # Still installed, remove_signal_handler would say True: it must have been removed already.
            seen.append(loop.remove_signal_handler(signal.SIGTERM) or loop.remove_signal_handler(signal.SIGHUP))

    async with DaemonLifecycle() as daemon:
        daemon.on_reload(lambda: None)
        await daemon.serve(Face("face", []))
    assert seen == [False]
    assert not loop.remove_signal_handler(signal.SIGINT)
