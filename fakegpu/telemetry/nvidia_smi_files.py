"""Keeps the fake nvidia-smi files on the host current: ``<dir>/nvidia-smi`` and ``<dir>/devices.json``.

Used by both daemons with ``--inject-nvidia-smi``: written at start and after every inventory change
(config reload, new MIG layout, GPUs added) and every fault or recovery that changes what nvidia-smi shows
(``LiveInventory.conditions()``: ECC counters, clocks, temperature, a GPU lost), each atomically so a
container starting at that moment bind-mounts either the old file or the new one, never half of one. A
container that already runs keeps the file it mounted (a bind mount follows the inode), which matches what
it was allocated.

The DRA driver with ``--mig-mode dynamic`` passes ``dynamic_mig=True``: its prepare hands out MIG devices
that do not exist in the inventory (``fakegpu.dra.device_map``: ``fakegpu.sharing.identifiers.mig_uuid`` of every
profile and placement), and the files then describe them too, shown only to a container given one.
"""

from __future__ import annotations

import json
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

    def update(
        self,
        inventory: Inventory,
        policies: GpuPolicies | None = None,
        conditions: Mapping[str, GpuCondition] | None = None,
    ) -> bool:
        """Write the files if they would change; True when written. Errors propagate."""
        rendered = render_files(inventory, dynamic_mig=self.dynamic_mig, policies=policies, conditions=conditions)
        if rendered == self._written and all((self.directory / name).exists() for name in (SCRIPT_FILE, DEVICES_FILE)):
            return False
        _write(self.directory, rendered)
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
