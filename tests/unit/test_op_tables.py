"""The faces' op tables against ``fakegpu ctl``'s (``fakegpu.control.operations``), without a daemon: each op
a face declares is one ctl knows and takes the fields ctl sends, and the faces' tables with the shared
health and fault ops are exactly ctl's ops.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fakegpu.control.fault_ops import fault_ops
from fakegpu.control.gpu_fault_ops import gpu_fault_ops
from fakegpu.control.health_ops import health_ops
from fakegpu.control.op_table import TargetOp, bind_ops
from fakegpu.control.operations import BY_NAME, DAEMON_OPERATIONS, KUBELET_OPERATIONS
from fakegpu.control.protocol import Field, op_fields
from fakegpu.dra.admin_ops import DRA_FAULTS, DRA_OPS
from fakegpu.fakeplugin.admin_ops import DEVICE_PLUGIN_OPS
from fakegpu.kubelet.admin_ops import KUBELET_OPS
from fakegpu.sharing.live_inventory import LiveInventory
from tests.inventory_builders import inventory

FACE_TABLES: dict[str, Mapping[str, TargetOp[Any]]] = {
    "device plugin": DEVICE_PLUGIN_OPS,
    "DRA driver": DRA_OPS,
    "kubelet": KUBELET_OPS,
}


def _request_fields(name: str, op: TargetOp[Any]) -> dict[str, Field]:
    """The fields an op of a table takes once served (binding does not call it, so no target is needed)."""
    return {f.name: f for f in op_fields(name, bind_ops(None, {name: op})[name])}


@pytest.mark.parametrize("face", FACE_TABLES)
def test_every_op_of_a_face_table_is_a_ctl_op_taking_the_fields_ctl_sends(face: str) -> None:
    for name, op in FACE_TABLES[face].items():
        assert name in BY_NAME, f"{face}: {name!r} is not in the ctl table"
        fields, sent = _request_fields(name, op), set(BY_NAME[name].fields)
        assert sent <= set(fields), f"{face}: ctl sends {sorted(sent - set(fields))} to {name!r}"
        required = {f for f, d in fields.items() if d.required}
        assert required <= sent, f"{face}: ctl cannot send {name!r} its required {sorted(required - sent)}"


def test_the_face_tables_and_the_shared_ops_are_every_ctl_op(tmp_path: Path) -> None:
    live = LiveInventory(inventory(tmp_path, "1xt4"))
    shared = {*health_ops(live), *gpu_fault_ops(live), *fault_ops(live.faults, DRA_FAULTS, list)}
    assert set(DEVICE_PLUGIN_OPS) | set(DRA_OPS) | shared == {op.name for op in DAEMON_OPERATIONS}
    assert set(KUBELET_OPS) == {op.name for op in KUBELET_OPERATIONS} | {"status"}
    assert not shared & (set(DEVICE_PLUGIN_OPS) | set(DRA_OPS)), "a face redefines a shared op"


async def test_a_bound_op_acts_on_its_target_and_takes_only_the_request_fields() -> None:
    async def rename(target: list[str], name: str, suffix: str = "") -> list[str]:
        target.append(name + suffix)
        return target

    names: list[str] = []
    op = bind_ops(names, {"rename": rename})["rename"]
    assert [(f.name, f.required) for f in op_fields("rename", op)] == [("name", True), ("suffix", False)]
    assert await op(name="a", suffix="-1") == ["a-1"]
    assert names == ["a-1"]


def test_ctl_sends_the_gpu_fault_ops_exactly_the_fields_they_take(tmp_path: Path) -> None:
    """``gpu-fault`` takes ``gpu`` and every field of ``GpuFault`` (``takes_model``), ``recover`` gpu and what;
    ctl has an option or argument for each, so no field is out of reach from the command line."""
    ops = gpu_fault_ops(LiveInventory(inventory(tmp_path, "1xt4")))
    for name, op in ops.items():
        taken = {f.name for f in op_fields(name, op)}
        assert set(BY_NAME[name].fields) == taken, name
