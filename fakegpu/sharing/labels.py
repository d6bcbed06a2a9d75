"""GPU Feature Discovery's node labels for a node under a plugin config.

GFD runs beside the device plugin and labels the node from NVML; these are the labels it would
write for the fake node, so selectors and affinities in real manifests match unchanged.
"""

from __future__ import annotations

import re

from fakegpu.sharing.catalog import GpuModel, MigProfile
from fakegpu.sharing.mig_naming import resource_suffix
from fakegpu.sharing.node import Node, PhysicalGpu
from fakegpu.sharing.plugin_config import PluginConfig

_PREFIX = "nvidia.com/"
_INVALID_LABEL_CHARS = re.compile(r"[^A-Za-z0-9\-_. ]")


def sanitize_product(name: str) -> str:
    """GFD's product form: characters outside ``[A-Za-z0-9-_. ]`` dropped, spaces become ``-``."""
    return _INVALID_LABEL_CHARS.sub("", name).replace(" ", "-")


def gpu_family(compute_capability: tuple[int, int]) -> str:
    """GFD's architecture family from the compute capability."""
    major, minor = compute_capability
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor >= 9 else "ampere"
    return {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }.get(major, "undefined")


def _version_parts(version: str) -> list[str]:
    return version.split(".")


def _replicas(config: PluginConfig, resource: str) -> tuple[int, str, bool]:
    """(replicas, sharing strategy, renamed) for a base resource name."""
    rule = config.sharing.rule_for(resource)
    if rule is None:
        return 1, "none", False
    return rule.replicas, config.sharing.strategy, bool(rule.rename)


def _shared_suffix(replicas: int, renamed: bool) -> str:
    return "-SHARED" if replicas > 1 and not renamed else ""


def _mig_labels(
    prefix: str, model: GpuModel, profile: MigProfile, count: int, replicas: int, strategy: str, renamed: bool
) -> dict[str, str]:
    return {
        f"{prefix}.count": str(count),
        f"{prefix}.replicas": str(replicas),
        f"{prefix}.sharing-strategy": strategy,
        f"{prefix}.product": f"{sanitize_product(model.product_name)}-MIG-{profile.name}"
        + _shared_suffix(replicas, renamed),
        f"{prefix}.memory": str(profile.memory_mib),
        f"{prefix}.multiprocessors": str(profile.multiprocessors),
        f"{prefix}.slices.gi": str(profile.compute_slices),
        f"{prefix}.slices.ci": str(profile.compute_slices),
        f"{prefix}.engines.copy": str(profile.copy_engines),
        f"{prefix}.engines.decoder": str(profile.decoders),
        f"{prefix}.engines.encoder": str(profile.encoders),
        f"{prefix}.engines.jpeg": str(profile.jpeg),
        f"{prefix}.engines.ofa": str(profile.ofa),
    }


def _single_is_valid(gpus: tuple[PhysicalGpu, ...]) -> bool:
    if not all(g.mig_enabled and g.mig_devices for g in gpus):
        return False
    return len({(g.model.key, m.profile.name) for g in gpus for m in g.mig_devices}) == 1


def gfd_labels(node: Node, config: PluginConfig, timestamp: int | None = None) -> dict[str, str]:
    """The full GFD label set; ``gfd.timestamp`` only when a timestamp is given (GFD's ``noTimestamp``)."""
    labels: dict[str, str] = {}
    if timestamp is not None:
        labels[_PREFIX + "gfd.timestamp"] = str(timestamp)
    drv = [*_version_parts(node.driver_version), "", ""]
    labels.update(
        {
            _PREFIX + "cuda.driver.major": drv[0],
            _PREFIX + "cuda.driver.minor": drv[1],
            _PREFIX + "cuda.driver.rev": drv[2],
            _PREFIX + "cuda.driver-version.major": drv[0],
            _PREFIX + "cuda.driver-version.minor": drv[1],
            _PREFIX + "cuda.driver-version.revision": drv[2],
            _PREFIX + "cuda.driver-version.full": node.driver_version,
        }
    )
    cuda = [*_version_parts(node.cuda_driver_version), ""]
    labels.update(
        {
            _PREFIX + "cuda.runtime.major": cuda[0],
            _PREFIX + "cuda.runtime.minor": cuda[1],
            _PREFIX + "cuda.runtime-version.major": cuda[0],
            _PREFIX + "cuda.runtime-version.minor": cuda[1],
            _PREFIX + "cuda.runtime-version.full": f"{cuda[0]}.{cuda[1]}",
            _PREFIX + "gpu.machine": sanitize_product(node.machine) or "unknown",
            _PREFIX + "vgpu.present": "false",
        }
    )
    gpus = node.gpus
    labels[_PREFIX + "mig.capable"] = "true" if any(g.model.mig_capable for g in gpus) else "false"
    any_mig = any(g.mig_enabled for g in gpus)
    strategy = config.mig_strategy
    if strategy in ("single", "mixed"):
        labels[_PREFIX + "mig.strategy"] = strategy
    replicas, sharing, renamed = _replicas(config, "nvidia.com/gpu")
    labels[_PREFIX + "mps.capable"] = "true" if config.sharing.strategy == "mps" and not any_mig else "false"

    first = gpus[0]
    # GFD merges one labeler per device, later ones overriding earlier ones, and full (non-MIG) GPUs
    # override MIG-enabled ones: the labels describe the last full GPU's model, counted per model.
    full = [g for g in gpus if not (strategy == "mixed" and g.mig_enabled)]
    described = (full or list(gpus))[-1]
    model = described.model if strategy != "single" else first.model
    common = {
        _PREFIX + "gpu.family": gpu_family(model.compute_capability),
        _PREFIX + "gpu.compute.major": str(model.compute_capability[0]),
        _PREFIX + "gpu.compute.minor": str(model.compute_capability[1]),
        _PREFIX + "gpu.mode": "compute",
    }
    if strategy == "single" and any_mig:
        labels.update(common)
        if not _single_is_valid(gpus):
            labels.update(
                {
                    _PREFIX + "gpu.product": f"{sanitize_product(model.product_name)}-MIG-INVALID",
                    _PREFIX + "gpu.count": "0",
                    _PREFIX + "gpu.replicas": "0",
                    _PREFIX + "gpu.memory": "0",
                    _PREFIX + "gpu.sharing-strategy": "none",
                }
            )
            return dict(sorted(labels.items()))
        profile = first.mig_devices[0].profile
        count = sum(len(g.mig_devices) for g in gpus)
        mig = _mig_labels(_PREFIX + "gpu", model, profile, count, replicas, sharing, renamed)
        labels.update(mig)
        return dict(sorted(labels.items()))

    labels.update(common)
    full_replicas = replicas if full else 0
    same_model = [g for g in (full or gpus) if g.model.product_name == model.product_name]
    labels.update(
        {
            _PREFIX + "gpu.count": str(len(same_model)),
            _PREFIX + "gpu.product": sanitize_product(model.product_name) + _shared_suffix(full_replicas, renamed),
            _PREFIX + "gpu.memory": str(model.memory_mib),
            _PREFIX + "gpu.replicas": str(full_replicas),
            _PREFIX + "gpu.sharing-strategy": sharing if full_replicas > 1 else "none",
        }
    )
    if strategy == "mixed":
        seen: dict[str, tuple[GpuModel, MigProfile, int]] = {}
        for g in gpus:
            for m in g.mig_devices if g.mig_enabled else ():
                key = resource_suffix(m.profile.name)
                prev = seen.get(key)
                seen[key] = (g.model, m.profile, (prev[2] if prev else 0) + 1)
        for key, (mig_model, profile, count) in sorted(seen.items()):
            r, s, ren = _replicas(config, f"nvidia.com/mig-{key}")
            labels.update(_mig_labels(f"{_PREFIX}mig-{key}", mig_model, profile, count, r, s, ren))
    return dict(sorted(labels.items()))
