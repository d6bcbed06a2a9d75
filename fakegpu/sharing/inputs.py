"""Everything that describes one node's inventory, and the one function that turns it into devices.

The CLI, the device plugin, the DRA driver and the tests all go through ``load_inventory``, so the
same flags, files and environment always give the same devices.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.expansion import build_inventory
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.labels import gfd_labels
from fakegpu.sharing.mig_parted import MigLayoutChoice, choose_from_file, choose_generated, load_mig_parted
from fakegpu.sharing.node import Node, build_node
from fakegpu.sharing.node_spec import DEFAULT_GPUS, FabricSpec, NodeSpec, load_node_spec, parse_gpus_shorthand
from fakegpu.sharing.nvidia_config import load_nvidia_config
from fakegpu.sharing.nvlink_fabric import parse_clique
from fakegpu.sharing.plugin_config import PluginConfig, resolve_plugin_config


@dataclass(frozen=True)
class InventoryInputs:
    node_name: str
    node_spec: str | None = None
    gpus: tuple[str, ...] = ()
    mig_config: str | None = None
    mig_layout: str | None = None
    config_file: str | None = None
    cli_flags: Mapping[str, str | bool | None] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    honor_custom_resources: bool = False
    honor_sharing_rename_devices: bool = False
    id_salt: str = ""
    """Mixed into device identities; empty for stable IDs (only the random-device-ids bug mode sets it)."""
    nvlink_clique: str | None = None
    """``--nvlink-clique <clusterUUID>.<cliqueID>``: the node's place on a multi-node NVLink fabric when no
    node spec says it (``fabric:``); None leaves the node off any fabric."""
    nvidia_smi_dir: str | None = None
    """fakegpu extension (``--inject-nvidia-smi``): host directory of the fake nvidia-smi and devices.json
    that Allocate and CDI specs mount into containers; None leaves containers as NVIDIA's plugin does."""


def load_spec(inputs: InventoryInputs) -> tuple[NodeSpec, str]:
    """The node spec the inputs describe, with ``--nvlink-clique`` as its fabric when given."""
    spec, source = _described_spec(inputs)
    if inputs.nvlink_clique is None:
        return spec, source
    if spec.fabric is not None:
        raise SpecError(
            "--nvlink-clique",
            f"cannot be combined with {source}, whose fabric already places the node on an NVLink clique; "
            "drop one of them",
        )
    try:
        cluster_uuid, clique_id = parse_clique(inputs.nvlink_clique, "--nvlink-clique")
    except ValueError as exc:
        raise SpecError("--nvlink-clique", str(exc).removeprefix("--nvlink-clique: ")) from None
    fabric = FabricSpec.model_validate({"clusterUUID": cluster_uuid, "cliqueID": clique_id})
    return spec.model_copy(update={"fabric": fabric}), source


def _described_spec(inputs: InventoryInputs) -> tuple[NodeSpec, str]:
    if inputs.node_spec and inputs.gpus:
        raise SpecError("--gpus", "cannot be combined with --node-spec; describe the GPUs in the node spec")
    if inputs.node_spec:
        return load_node_spec(inputs.node_spec), inputs.node_spec
    if inputs.gpus:
        return parse_gpus_shorthand(inputs.gpus), "--gpus"
    return parse_gpus_shorthand([DEFAULT_GPUS]), f"default node ({DEFAULT_GPUS})"


def load_node(inputs: InventoryInputs) -> Node:
    spec, source = load_spec(inputs)
    models = [CATALOG[g.model] for g in spec.gpus for _ in range(g.count)]
    choices: dict[int, MigLayoutChoice] | None = None
    if inputs.mig_config and not inputs.mig_layout:
        raise SpecError("--mig-config", "needs --mig-layout to pick one of its layouts")
    if inputs.mig_layout:
        if inputs.mig_config:
            parted = load_mig_parted(inputs.mig_config)
            choices = choose_from_file(parted, inputs.mig_layout, models, inputs.mig_config)
        else:
            choices = choose_generated(inputs.mig_layout, models)
    if not inputs.node_name:
        raise SpecError("--node-name", "node name is empty")
    return build_node(
        spec,
        inputs.node_name,
        source=source,
        xid_policy=XidPolicy.from_env(inputs.env),
        mig_choices=choices,
        identity_seed=inputs.node_name + inputs.id_salt,
    )


def load_config(inputs: InventoryInputs) -> PluginConfig:
    config_path = inputs.config_file or inputs.env.get("CONFIG_FILE") or None
    file = None
    warnings: list[str] = []
    if config_path:
        file, warnings = load_nvidia_config(config_path)
    config = resolve_plugin_config(
        file,
        file_source=config_path or "config file",
        cli=inputs.cli_flags,
        env=inputs.env,
        file_warnings=warnings,
        honor_custom_resources=inputs.honor_custom_resources,
        honor_sharing_rename_devices=inputs.honor_sharing_rename_devices,
    )
    # Not an NVIDIA setting, so it never comes from NVIDIA's file or flags: carried over as given.
    return replace(config, nvidia_smi_dir=inputs.nvidia_smi_dir) if inputs.nvidia_smi_dir else config


def load_inventory(inputs: InventoryInputs) -> Inventory:
    """Node + config -> Inventory; every bad input raises SpecError."""
    node = load_node(inputs)
    config = load_config(inputs)
    return build_inventory(node, config)


def load_labels(inputs: InventoryInputs, timestamp: int | None = None) -> dict[str, str]:
    return gfd_labels(load_node(inputs), load_config(inputs), timestamp)


@dataclass
class CurrentInputs:
    """The inputs a running daemon serves from; live reconfiguration (GPUs added or removed, a new MIG
    layout, fresh device IDs) swaps them only once the new inventory has been built successfully."""

    inputs: InventoryInputs

    def load(self) -> Inventory:
        return load_inventory(self.inputs)

    def candidate(
        self,
        *,
        gpus: str | None = None,
        mig_layout: str | None = None,
        mig_strategy: str | None = None,
        new_ids: bool = False,
    ) -> InventoryInputs:
        """The inputs with some changes; build an inventory from them before committing to them."""
        changed = self.inputs
        if gpus is not None:
            changed = replace(changed, gpus=(gpus,), node_spec=None)
        if mig_layout is not None:
            changed = replace(changed, mig_layout=mig_layout or None)
        if mig_strategy is not None:
            changed = replace(changed, cli_flags={**changed.cli_flags, "mig_strategy": mig_strategy})
        if new_ids:
            changed = replace(changed, id_salt=uuid.uuid4().hex)
        return changed
