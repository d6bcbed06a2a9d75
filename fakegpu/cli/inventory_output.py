"""Rendering an inventory and its labels as a table, JSON or YAML for ``fakegpu devices``/``labels``.

``-o`` is ``table|json|yaml`` for both; ``labels -o text`` is the older name of its table (``KEY=VALUE``
lines, what ``kubectl label`` takes).
"""

from __future__ import annotations

import json
from typing import Any

from fakegpu.cli.yaml_output import dump_yaml
from fakegpu.sharing.inventory import Inventory

OUTPUT_FORMATS = ("table", "json", "yaml")
LABEL_FORMATS = (*OUTPUT_FORMATS, "text")
"""``labels -o``: ``text`` stays as an alias of ``table``."""


def inventory_document(inventory: Inventory, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "resources": {
            r.name: [{"id": d.id, "health": d.health, "numa": d.numa, "parent": d.parent} for d in r.devices]
            for r in inventory.resources
        },
        "labels": labels,
    }


def render_inventory(inventory: Inventory, labels: dict[str, str], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(inventory_document(inventory, labels), indent=2) + "\n"
    if fmt == "yaml":
        return dump_yaml(inventory_document(inventory, labels))
    return render_table(inventory)


def render_table(inventory: Inventory) -> str:
    node = inventory.node
    lines = [
        f"Node {node.name}: {len(node.gpus)} GPU(s), driver {node.driver_version}, CUDA {node.cuda_driver_version}"
    ]
    lines.append("")
    header = f"{'RESOURCE':<34} {'CAPACITY':>8} {'HEALTHY':>8}  {'SHARING':<13} REPLICAS"
    lines.append(header)
    for r in inventory.resources:
        lines.append(f"{r.name:<34} {len(r.devices):>8} {r.healthy:>8}  {r.sharing:<13} {r.replicas}")
    for r in inventory.resources:
        lines.append("")
        lines.append(f"{r.name}:")
        lines.append(f"  {'ID':<46} {'HEALTH':<9} {'NUMA':>4}  {'INDEX':<6} {'PROFILE':<11} PARENT")
        for d in r.devices:
            numa = "-" if d.numa is None else str(d.numa)
            profile = d.mig_profile or "-"
            lines.append(f"  {d.id:<46} {d.health:<9} {numa:>4}  {d.index_id:<6} {profile:<11} {d.parent}")
    return "\n".join(lines) + "\n"


def render_labels(labels: dict[str, str], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(labels, indent=2) + "\n"
    if fmt == "yaml":
        return dump_yaml(labels, sort_keys=True)
    return "".join(f"{k}={v}\n" for k, v in labels.items())
