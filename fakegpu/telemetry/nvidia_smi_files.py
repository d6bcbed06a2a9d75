"""Keeps the fake nvidia-smi files on the host current: ``<dir>/nvidia-smi`` and ``<dir>/devices.json``.

Used by both daemons with ``--inject-nvidia-smi``: written at start and after every inventory change
(config reload, new MIG layout, GPUs added) and every fault or recovery that changes what nvidia-smi shows
(``LiveInventory.conditions()``: ECC counters, clocks, temperature, a GPU lost). The first write is atomic
(a temp file renamed over the target). Later ones rewrite the same files in place: containers bind-mount
them, a bind mount follows the inode, and a container that already runs must see a fault struck after it
started, as NVML answers live on a real node. A reader that straddles such a rewrite is caught: the script's
data section starts and ends with its generation, awk refuses a file whose two differ and the script's shell
part (the same bytes in every rewrite) reads it again (``shell_script``); ``fakegpu nvidia-smi`` re-reads a
devices.json that does not parse. Files someone else replaced (another inode) are written atomically again.

The DRA driver with ``--mig-mode dynamic`` passes ``dynamic_mig=True``: its prepare hands out MIG devices
that do not exist in the inventory (``fakegpu.dra.device_map``: ``fakegpu.sharing.identifiers.mig_uuid`` of every
profile and placement), and the files then describe them too, shown only to a container given one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from fakegpu.runtime.atomic_files import atomic_write
from fakegpu.runtime.change_stream import keep_current
from fakegpu.sharing.gpu_condition import GpuCondition
from fakegpu.sharing.gpu_policies import GpuPolicies
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.nvidia_smi.devices import from_inventory, to_json
from fakegpu.telemetry.nvidia_smi.injection import DEVICES_FILE, SCRIPT_FILE
from fakegpu.telemetry.nvidia_smi.shell_script import render_script

SCRIPT_MODE: Final = 0o755
"""Executed by whatever user the container runs as."""
DEVICES_MODE: Final = 0o644


def render_files(
    inventory: Inventory,
    *,
    dynamic_mig: bool = False,
    policies: GpuPolicies | None = None,
    conditions: Mapping[str, GpuCondition] | None = None,
) -> tuple[bytes, bytes]:
    """(script, devices.json) for the inventory's node (with its dynamic MIG devices if ``dynamic_mig``, each
    GPU in the compute mode ``policies`` has for it and with the faults ``conditions`` record)."""
    node = from_inventory(inventory, dynamic_mig=dynamic_mig, policies=policies, conditions=conditions)
    devices = json.dumps(to_json(node), indent=2, ensure_ascii=False) + "\n"
    return render_script(node).encode("utf-8"), devices.encode("utf-8")


def _write(directory: Path, rendered: tuple[bytes, bytes]) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    script, devices = rendered
    # devices.json first: a container that finds the new script finds the matching JSON too.
    atomic_write(directory / DEVICES_FILE, devices, DEVICES_MODE)
    atomic_write(directory / SCRIPT_FILE, script, SCRIPT_MODE)
    return directory / SCRIPT_FILE, directory / DEVICES_FILE


def rewrite_in_place(path: Path, blob: bytes) -> None:
    """The new content over the old, in the same inode: written whole, then cut to its length (a reader in
    between sees the new data followed by the old tail, whose generation record gives it away)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(blob))
        os.fsync(fd)
    finally:
        os.close(fd)


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:  # absent, or its directory is not one any more
        return None
    return st.st_dev, st.st_ino


def write_nvidia_smi_files(directory: Path, inventory: Inventory, *, dynamic_mig: bool = False) -> tuple[Path, Path]:
    """Write both files atomically (creating ``directory``); returns (script path, devices.json path)."""
    return _write(directory, render_files(inventory, dynamic_mig=dynamic_mig))


class NvidiaSmiFiles:
    """The files of one directory, rewritten only when their content changes (a health change nvidia-smi does
    not show, such as a device marked unhealthy by hand, costs a render and no write; a fault's condition
    changes the content and is written)."""

    def __init__(self, directory: Path, *, dynamic_mig: bool = False) -> None:
        self.directory = directory
        self.dynamic_mig = dynamic_mig
        self.writes = 0
        self._written: tuple[bytes, bytes] | None = None
        self._inodes: tuple[tuple[int, int] | None, ...] = ()
        """The inodes of the files as this object last wrote them: rewritten in place while they are still there."""

    def update(
        self,
        inventory: Inventory,
        policies: GpuPolicies | None = None,
        conditions: Mapping[str, GpuCondition] | None = None,
    ) -> bool:
        """Write the files if they would change; True when written. Errors propagate."""
        rendered = render_files(inventory, dynamic_mig=self.dynamic_mig, policies=policies, conditions=conditions)
        paths = (self.directory / DEVICES_FILE, self.directory / SCRIPT_FILE)
        inodes = tuple(_inode(p) for p in paths)
        if rendered == self._written and None not in inodes:
            return False
        if self._written is not None and inodes == self._inodes and None not in inodes:
            script, devices = rendered
            # devices.json first, as in _write: a container that finds the new script finds the new JSON.
            rewrite_in_place(paths[0], devices)
            rewrite_in_place(paths[1], script)
        else:
            _write(self.directory, rendered)
            self._inodes = tuple(_inode(p) for p in paths)
        self._written = rendered
        self.writes += 1
        return True

    def follow(self, live: LiveInventory) -> Callable[[], None]:
        """Write now and after every change of ``live`` (faults included) or of its GPUs' compute modes
        (``keep_current``); returns the unsubscribe function."""
        what = f"the fake nvidia-smi files in {self.directory}"

        def current() -> bool:
            return self.update(live.inventory, live.gpu_policies, live.conditions())

        unfollow = [keep_current(live, current, what), keep_current(live.gpu_policies, current, what)]

        def unsubscribe() -> None:
            for stop in unfollow:
                stop()

        return unsubscribe
