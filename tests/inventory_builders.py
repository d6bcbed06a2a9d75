"""Small builders so table-driven tests can state a node and a config in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fakegpu.sharing.inputs import InventoryInputs, load_config, load_inventory, load_node
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.labels import gfd_labels

NODE = "node-a"


def inputs(
    tmp_path: Path,
    gpus: str | tuple[str, ...] = "8xh100-80gb",
    *,
    layout: str | None = None,
    config: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    cli: dict[str, str | bool | None] | None = None,
    node_spec: dict[str, Any] | None = None,
    node_name: str = NODE,
    honor_rename: bool = False,
) -> InventoryInputs:
    config_file = None
    if config is not None:
        config_path = tmp_path / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        config_file = str(config_path)
    spec_file = None
    if node_spec is not None:
        spec_path = tmp_path / "node.yaml"
        spec_path.write_text(yaml.safe_dump(node_spec))
        spec_file = str(spec_path)
    return InventoryInputs(
        node_name=node_name,
        node_spec=spec_file,
        gpus=() if spec_file else ((gpus,) if isinstance(gpus, str) else gpus),
        mig_layout=layout,
        config_file=config_file,
        cli_flags=cli or {},
        env=env or {},
        honor_sharing_rename_devices=honor_rename,
    )


def inventory(tmp_path: Path, gpus: str | tuple[str, ...] = "8xh100-80gb", **kw: Any) -> Inventory:
    return load_inventory(inputs(tmp_path, gpus, **kw))


def labels(tmp_path: Path, gpus: str | tuple[str, ...] = "8xh100-80gb", **kw: Any) -> dict[str, str]:
    i = inputs(tmp_path, gpus, **kw)
    return gfd_labels(load_node(i), load_config(i))


def counts(inv: Inventory) -> dict[str, int]:
    return {r.name: len(r.devices) for r in inv.resources}


def time_slicing(replicas: int, name: str = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    return {"version": "v1", "sharing": {"timeSlicing": {**extra, "resources": [{"name": name, "replicas": replicas}]}}}


def mps(replicas: int, name: str = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    return {
        "version": "v1",
        "flags": {"mpsRoot": "/run/nvidia/mps"},
        "sharing": {"mps": {**extra, "resources": [{"name": name, "replicas": replicas}]}},
    }
