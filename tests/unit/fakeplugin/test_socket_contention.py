"""Waiting for a live peer on a socket path, and pacing re-serves of a socket removed again and again."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fakegpu.fakeplugin.socket_contention import PeerWaits, ReservePacing, wait_line
from fakegpu.runtime.unix_socket import SocketInUse, listening_pid, remove_stale


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_peer_waits_back_off_to_a_cap_and_log_each_look() -> None:
    clock = Clock()
    waits = PeerWaits(first=1.0, cap=4.0, clock=clock)
    path = Path("/var/lib/kubelet/device-plugins/nvidia-gpu.sock")
    pauses = [waits.found_peer("nvidia.com/gpu", path, 4321).pause for _ in range(5)]
    assert pauses == [1.0, 2.0, 4.0, 4.0, 4.0]
    wait = waits.waiting["nvidia.com/gpu"]
    assert wait_line(wait) == (
        "another plugin serves /var/lib/kubelet/device-plugins/nvidia-gpu.sock (pid 4321); waiting for it to stop"
        " (attempt 5, next look in 4 s)"
    )
    assert waits.due() == []
    clock.now += 4.0
    assert waits.due() == ["nvidia.com/gpu"]
    assert waits.done("nvidia.com/gpu") is wait
    assert waits.due() == [] and waits.done("nvidia.com/gpu") is None


def test_an_unknown_pid_is_not_shown() -> None:
    wait = PeerWaits().found_peer("nvidia.com/gpu", Path("/d/x.sock"), 0)
    assert wait.describe() == "another plugin serves /d/x.sock; waiting for it to stop"


def test_a_lone_removal_is_served_again_at_once_repeated_ones_after_a_doubling_pause() -> None:
    clock = Clock()
    pacing = ReservePacing(first=0.5, cap=2.0, calm=30.0, clock=clock)
    assert pacing.wait_before_reserving("gpu") == 0.0  # a kubelet restart: serve again now
    assert pacing.reserved("gpu") == 1
    clock.now += 0.1
    assert pacing.wait_before_reserving("gpu") == pytest.approx(0.4)
    clock.now += 0.4
    assert pacing.wait_before_reserving("gpu") == 0.0
    assert pacing.reserved("gpu") == 2
    assert pacing.wait_before_reserving("gpu") == pytest.approx(1.0)
    clock.now += 1.0
    pacing.reserved("gpu")
    pacing.reserved("gpu")
    assert pacing.wait_before_reserving("gpu") == pytest.approx(2.0)  # capped
    clock.now += 30.0  # calm again: the next removal is a new series
    assert pacing.wait_before_reserving("gpu") == 0.0
    assert pacing.reserved("gpu") == 1
    assert pacing.wait_before_reserving("other") == 0.0


def test_a_live_listener_is_named_with_its_pid_and_never_removed(root: Path) -> None:
    path = root / "peer.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    try:
        assert listening_pid(path) == os.getpid()
        with pytest.raises(
            SocketInUse, match=rf"peer\.sock is in use by another running process \(pid {os.getpid()}\)"
        ):
            remove_stale(path, keep_live=True)
        assert path.exists()
    finally:
        listener.close()
    assert listening_pid(path) is None  # a dead process's socket: stale
    assert remove_stale(path, keep_live=True) is True
    assert not path.exists()
    assert listening_pid(path) is None


def test_a_listener_too_busy_to_accept_is_still_alive(root: Path) -> None:
    """A full backlog (a hung peer) times the probe out: that peer is alive, not a stale file to take over."""
    path = root / "busy.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    waiting = []
    try:
        for _ in range(3):  # fill the backlog: nobody accepts
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            try:
                client.connect(str(path))
            except BlockingIOError:
                client.close()
                break
            waiting.append(client)
        assert listening_pid(path) == 0
        with pytest.raises(SocketInUse, match=r"busy\.sock is in use by another running process; choose"):
            remove_stale(path, keep_live=True)
    finally:
        for client in waiting:
            client.close()
        listener.close()
