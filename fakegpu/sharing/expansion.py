"""Turning a resolved node and a plugin config into an Inventory, following NVIDIA's device map.

Order as in NVIDIA's ``rm`` package: full GPUs and MIG devices are mapped to resource names by the
MIG strategy, then time-slicing or MPS replicates the devices of the named resources.
"""

from __future__ import annotations

from collections import defaultdict

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.identifiers import replica_id
from fakegpu.sharing.inventory import Device, Inventory, Resource
from fakegpu.sharing.mig_naming import resource_suffix
from fakegpu.sharing.node import MigInstance, Node, PhysicalGpu
from fakegpu.sharing.plugin_config import PluginConfig, ReplicaRule, ResourcePatternRule


def _full_device(gpu: PhysicalGpu) -> Device:
    return Device(
        id=gpu.uuid,
        health=gpu.health,
        numa=gpu.numa,
        parent=gpu.uuid,
        parent_index=gpu.index,
        base_id=gpu.uuid,
        index_id=str(gpu.index),
        mig_profile=None,
        replica=None,
        replicas=1,
        memory_mib=gpu.model.memory_mib,
    )


def _mig_device(gpu: PhysicalGpu, mig: MigInstance) -> Device:
    return Device(
        id=mig.uuid,
        health=gpu.health,
        numa=gpu.numa,
        parent=gpu.uuid,
        parent_index=gpu.index,
        base_id=mig.uuid,
        index_id=mig.index_id,
        mig_profile=mig.profile.name,
        replica=None,
        replicas=1,
        memory_mib=mig.profile.memory_mib,
    )


def _match(rules: tuple[ResourcePatternRule, ...], value: str) -> str | None:
    for rule in rules:
        if rule.matches(value):
            return rule.name
    return None


def _check_single(node: Node, source: str) -> None:
    """NVIDIA's single strategy on a node with MIG: every GPU in MIG mode, each with MIG devices, all of one
    profile (they are advertised as one resource, so they must be interchangeable)."""
    if not all(g.mig_enabled for g in node.gpus):
        raise SpecError(source, "all devices on the node must be configured with the same migEnabled value")
    for gpu in node.gpus:
        if not gpu.mig_devices:
            raise SpecError(source, f"device {gpu.index} has no MIG devices configured")
    kinds = {(g.model.key, m.profile.name) for g in node.gpus for m in g.mig_devices}
    if len(kinds) > 1:
        found = ", ".join(sorted({p for _, p in kinds}))
        raise SpecError(source, f"more than one MIG device type present on node (found {found})")


def _strategy_devices(node: Node, config: PluginConfig, warnings: list[str]) -> dict[str, list[Device]]:
    """Resource name -> devices before sharing, per migStrategy."""
    source = f"migStrategy={config.mig_strategy}"
    gpu_rules = config.gpu_resource_rules or (ResourcePatternRule("*", "nvidia.com/gpu"),)
    out: dict[str, list[Device]] = defaultdict(list)

    def add_full(gpu: PhysicalGpu) -> None:
        name = _match(gpu_rules, gpu.model.product_name)
        if name is None:
            raise SpecError(source, f"GPU name '{gpu.model.product_name}' does not match any resource patterns")
        out[name].append(_full_device(gpu))

    def add_mig(gpu: PhysicalGpu, mig: MigInstance, default: str) -> None:
        rules = config.mig_resource_rules or (ResourcePatternRule(mig.profile.name, default),)
        name = _match(rules, mig.profile.name)
        if name is None:
            raise SpecError(source, f"MIG profile '{mig.profile.name}' does not match any resource patterns")
        out[name].append(_mig_device(gpu, mig))

    strategy = config.mig_strategy
    any_mig = any(g.mig_enabled for g in node.gpus)
    if strategy == "none" or not any_mig:
        for gpu in node.gpus:
            add_full(gpu)
    elif strategy == "single":
        _check_single(node, source)
        for gpu in node.gpus:
            for mig in gpu.mig_devices:
                add_mig(gpu, mig, "nvidia.com/gpu")
    else:
        for gpu in node.gpus:
            if not gpu.mig_enabled:
                add_full(gpu)
                continue
            if not gpu.mig_devices:
                warnings.append(f"GPU {gpu.index} ({gpu.uuid}) has MIG enabled but no MIG devices configured")
            for mig in gpu.mig_devices:
                add_mig(gpu, mig, f"nvidia.com/mig-{resource_suffix(mig.profile.name)}")
    return out


def _selected(rule: ReplicaRule, devices: list[Device]) -> list[Device]:
    if rule.devices == "all":
        return devices
    if isinstance(rule.devices, int):
        return devices[: rule.devices]
    refs = set(rule.devices)
    return [d for d in devices if d.base_id in refs or d.index_id in refs]


def _replicate(device: Device, replicas: int, mps: bool, node: Node) -> list[Device]:
    gpu = node.gpus[device.parent_index]
    extra: dict[str, int | None] = {}
    if mps:
        extra = {
            "mps_memory_limit_mib": gpu.model.memory_mib // replicas,
            "mps_thread_percentage": 100 // replicas,
        }
    return [
        Device(
            id=replica_id(device.id, n),
            health=device.health,
            numa=device.numa,
            parent=device.parent,
            parent_index=device.parent_index,
            base_id=device.base_id,
            index_id=device.index_id,
            mig_profile=device.mig_profile,
            replica=n,
            replicas=replicas,
            memory_mib=device.memory_mib,
            mps_memory_limit_mib=extra.get("mps_memory_limit_mib"),
            mps_thread_percentage=extra.get("mps_thread_percentage"),
        )
        for n in range(replicas)
    ]


def build_inventory(node: Node, config: PluginConfig) -> Inventory:
    """The resources and devices this node advertises under this config."""
    warnings = list(config.warnings)
    base = _strategy_devices(node, config, warnings)
    sharing = config.sharing
    resources: dict[str, Resource] = {}

    def put(resource: Resource) -> None:
        if resource.name in resources:
            merged = resources[resource.name].devices + resource.devices
            resource = Resource(
                resource.name,
                resource.base_name,
                merged,
                resource.sharing,
                resource.replicas,
                resource.fail_requests_greater_than_one,
            )
        resources[resource.name] = resource

    for listed in sharing.rules:
        if listed.name not in base:
            warnings.append(
                f"sharing.{'mps' if sharing.strategy == 'mps' else 'timeSlicing'}: resource {listed.name} "
                "is not advertised on this node; nothing to share"
            )
    for name, devices in base.items():
        rule = sharing.rule_for(name)
        if rule is None:
            put(Resource(name, name, tuple(devices), "none", 1, False))
            continue
        mps = sharing.strategy == "mps"
        # No cap on MPS replicas here: NVIDIA's config accepts any count and its MPS control daemon refuses
        # too many clients at start (fakegpu.sharing.mps_daemon, checked where the plugin starts).
        if mps and any(d.is_mig for d in devices):
            raise SpecError(sharing.source, "sharing using MPS is not supported for MIG devices", "sharing.mps")
        chosen = _selected(rule, devices)
        rest = [d for d in devices if d not in chosen]
        shared = tuple(r for d in chosen for r in _replicate(d, rule.replicas, mps, node))
        put(
            Resource(
                rule.rename or name,
                name,
                shared,
                sharing.strategy,
                rule.replicas,
                sharing.fail_requests_greater_than_one,
            )
        )
        if rest:
            put(Resource(name, name, tuple(rest), "none", 1, False))
    ordered = tuple(resources[name] for name in sorted(resources))
    return Inventory(node=node, config=config, resources=ordered, warnings=tuple(warnings))
