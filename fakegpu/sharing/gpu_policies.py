"""What a GPU driver keeps per physical GPU that a sharing strategy changes: compute mode and time slice.

NVIDIA's DRA kubelet plugin changes two settings of a full GPU through ``nvidia-smi``
(kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/sharing.go``): an MPS claim puts the GPU
in compute mode ``EXCLUSIVE_PROCESS`` while its control daemon runs and back to ``DEFAULT`` when the daemon
stops; a time-slicing claim sets the mode to ``DEFAULT`` and the time-slice interval
(``nvidia-smi compute-policy --set-timeslice``), which goes back to ``Default`` on unprepare. A fake GPU
keeps both here, one object per process beside the live inventory, so the fake nvidia-smi shows what a
real one would (``Exclusive_Process`` while MPS runs). Pure: no I/O; listeners are plain callbacks.

The values are nvidia-smi's spellings (``nvidia-smi -q``'s "Compute Mode", the ``compute_mode`` query
field); a GPU never named here is in its power-on state, ``Default`` and ``Default``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, Literal

from fakegpu.sharing.change_listeners import ChangeListeners, Listener

ComputeMode = Literal["Default", "Exclusive_Process", "Prohibited"]
DEFAULT_MODE: Final = "Default"
EXCLUSIVE_PROCESS: Final = "Exclusive_Process"
TABLE_ABBREVIATIONS: Final[dict[str, str]] = {
    "Default": "Default",
    "Exclusive_Process": "E. Process",
    "Prohibited": "Prohibited",
}
"""How nvidia-smi's table ("Compute M." column) abbreviates each mode."""
DEFAULT_TIME_SLICE: Final = "Default"
TIME_SLICES: Final = ("Default", "Short", "Medium", "Long")
"""NVIDIA's ``TimeSliceInterval`` names (``nvidia-smi compute-policy --set-timeslice`` 0 to 3)."""


class GpuPolicies:
    """Compute mode and time-slice interval per GPU UUID; every change is announced to the listeners."""

    def __init__(self) -> None:
        self._modes: dict[str, ComputeMode] = {}
        self._slices: dict[str, str] = {}
        self._listeners = ChangeListeners()

    def compute_mode(self, uuid: str) -> ComputeMode:
        return self._modes.get(uuid, DEFAULT_MODE)

    def time_slice(self, uuid: str) -> str:
        return self._slices.get(uuid, DEFAULT_TIME_SLICE)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` after every change; returns a function that unsubscribes."""
        return self._listeners.subscribe(listener)

    def set_compute_mode(self, uuids: Iterable[str], mode: ComputeMode) -> None:
        """``nvidia-smi -i <uuid> -c <mode>`` for each GPU (NVIDIA's ``setComputeMode``)."""
        if mode not in TABLE_ABBREVIATIONS:
            raise ValueError(f"compute mode {mode!r} is not one of {', '.join(TABLE_ABBREVIATIONS)}")
        changed = False
        for uuid in uuids:
            changed |= self.compute_mode(uuid) != mode
            self._modes[uuid] = mode
        if changed:
            self._announce()

    def set_time_slice(self, uuids: Iterable[str], interval: str) -> None:
        """NVIDIA's ``TimeSlicingManager.SetTimeSlice``: compute mode ``Default`` first, then the interval."""
        if interval not in TIME_SLICES:
            raise ValueError(f"time-slice interval {interval!r} is not one of {', '.join(TIME_SLICES)}")
        wanted = list(uuids)
        self.set_compute_mode(wanted, DEFAULT_MODE)
        changed = False
        for uuid in wanted:
            changed |= self.time_slice(uuid) != interval
            self._slices[uuid] = interval
        if changed:
            self._announce()

    def reset(self) -> None:
        """Every GPU back to its power-on settings (what a reboot does)."""
        changed = any(m != DEFAULT_MODE for m in self._modes.values()) or any(
            s != DEFAULT_TIME_SLICE for s in self._slices.values()
        )
        self._modes.clear()
        self._slices.clear()
        if changed:
            self._announce()

    def _announce(self) -> None:
        self._listeners.announce()
