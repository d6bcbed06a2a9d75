"""GPU Feature Discovery's node labels for a node under a plugin config.

GFD runs beside the device plugin and labels the node from NVML; these are the labels it would
write for the fake node, so selectors and affinities in real manifests match unchanged.
"""

from __future__ import annotations

import re

from fakegpu.sharing.catalog import GpuModel, MigProfile
from fakegpu.sharing.label_syntax import fit_label_value
from fakegpu.sharing.mig_naming import resource_suffix
from fakegpu.sharing.node import MigInstance, Node, PhysicalGpu
from fakegpu.sharing.plugin_config import PluginConfig

_PREFIX = "nvidia.com/"
_GPU = _PREFIX + "gpu"
TIMESTAMP_LABEL = _PREFIX + "gfd.timestamp"
"""Unix seconds of the GFD run that wrote the labels (``internal/lm/timestamp.go``)."""
CLIQUE_LABEL = _GPU + ".clique"
"""``<cluster UUID>.<clique ID>`` on a node whose GPUs sit on a multi-node NVLink fabric (``internal/lm/imex.go``).
GFD v0.17.0 also wrote ``nvidia.com/gpu.imex-domain``; v0.17.1 removed it, so fakegpu never writes it."""
_INVALID_LABEL_CHARS = re.compile(r"[^A-Za-z0-9\-_. ]")


def sanitize_product(name: str) -> str:
    """GFD's ``sanitise``: characters outside ``[A-Za-z0-9-_. ]`` dropped, runs of spaces become one ``-``."""
    return "-".join(_INVALID_LABEL_CHARS.sub("", name).split())


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


def _product(*parts: str, shared: bool) -> str:
    """GFD's ``getProductName``: each part sanitised, joined by ``-``, ``-SHARED`` when shared and not renamed.

    Cut to a label value's 63 characters, where GFD writes the whole name and the API server refuses it
    (``NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-1g.24gb.me-SHARED`` is 66)."""
    return fit_label_value("-".join([*(sanitize_product(p) for p in parts if p), *(["SHARED"] if shared else [])]))


def _base(resource: str, config: PluginConfig | None, count: int, *parts: str) -> dict[str, str]:
    """GFD's ``baseLabeler``: product, count, replicas and sharing strategy of one resource.

    ``config`` None is GFD's labeler "without sharing" (a MIG-enabled GPU under ``nvidia.com/gpu``):
    replicas 0, strategy ``none``, never ``-SHARED``. Otherwise replicas come from the resource's sharing
    rule (1 without one) and the strategy is named only when replicas > 1 (``internal/lm/resource.go``).
    """
    replicas, strategy, shared = 0, "none", False
    if config is not None:
        rule = config.sharing.rule_for(resource)
        replicas = rule.replicas if rule is not None and rule.replicas > 0 else 1
        if replicas > 1:
            strategy = config.sharing.strategy
            shared = rule is not None and not rule.rename
    return {
        f"{resource}.product": _product(*parts, shared=shared),
        f"{resource}.count": str(count),
        f"{resource}.replicas": str(replicas),
        f"{resource}.sharing-strategy": strategy,
    }


def _mig_labels(
    resource: str, config: PluginConfig, model: GpuModel, profile: MigProfile, count: int
) -> dict[str, str]:
    """GFD's ``NewMIGResourceLabeler``: the base labels (product ``<model>-MIG-<profile>``, where the
    profile's ``+`` became ``.`` as in ``nvml-mig-device.go`` ``GetName``) and the MIG attributes."""
    return {
        **_base(resource, config, count, model.product_name, "MIG", resource_suffix(profile.name)),
        f"{resource}.memory": str(profile.memory_mib),
        f"{resource}.multiprocessors": str(profile.multiprocessors),
        f"{resource}.slices.gi": str(profile.compute_slices),
        f"{resource}.slices.ci": str(profile.compute_slices),
        f"{resource}.engines.copy": str(profile.copy_engines),
        f"{resource}.engines.decoder": str(profile.decoders),
        f"{resource}.engines.encoder": str(profile.encoders),
        f"{resource}.engines.jpeg": str(profile.jpeg),
        f"{resource}.engines.ofa": str(profile.ofa),
    }


def _full_gpu_labels(gpus: tuple[PhysicalGpu, ...], config: PluginConfig) -> dict[str, str]:
    """GFD's ``newGPULabelers``, the same under every MIG strategy.

    GFD counts GPUs per model, MIG-enabled or not, and merges one labeler per model, full GPUs last, so
    a full GPU's labels win; a MIG-enabled GPU is labelled without sharing (replicas 0, strategy ``none``).
    GFD's order among models is Go's map order (random); fakegpu describes the last full GPU's model, else
    the last GPU's (``internal/lm/mig-strategy.go``).
    """
    full = [g for g in gpus if not g.mig_enabled]
    model = (full or list(gpus))[-1].model
    count = sum(1 for g in gpus if g.model.product_name == model.product_name)
    return {
        **_base(_GPU, config if full else None, count, model.product_name),
        f"{_GPU}.memory": str(model.memory_mib),
        f"{_GPU}.family": gpu_family(model.compute_capability),
        f"{_GPU}.compute.major": str(model.compute_capability[0]),
        f"{_GPU}.compute.minor": str(model.compute_capability[1]),
        f"{_GPU}.mode": "compute",
    }


def _mig_resources(gpus: tuple[PhysicalGpu, ...]) -> dict[str, tuple[GpuModel, MigInstance, int]]:
    """MIG devices by GFD's name for them (the profile with ``+`` as ``.``): the first device's parent
    model and the device, and how many there are (``newMigStrategyMixedLabeler``)."""
    found: dict[str, tuple[GpuModel, MigInstance, int]] = {}
    for gpu in gpus:
        for mig in gpu.mig_devices if gpu.mig_enabled else ():
            name = resource_suffix(mig.profile.name)
            model, first, count = found.get(name, (gpu.model, mig, 0))
            found[name] = (model, first, count + 1)
    return found


def _single_labels(gpus: tuple[PhysicalGpu, ...], config: PluginConfig) -> dict[str, str]:
    """GFD's ``newMigStrategySingleLabeler``, over the full-GPU labels.

    Valid only when every GPU is MIG-enabled with MIG devices of one profile; else the product is
    ``<first MIG-enabled model>-MIG-INVALID`` with count, replicas and memory 0, and the other labels
    (the sharing strategy among them) stay as the full-GPU labels set them.
    """
    enabled = [g for g in gpus if g.mig_enabled]
    if not enabled:
        return {}
    resources = _mig_resources(gpus)
    if any(not g.mig_devices for g in enabled) or len(enabled) != len(gpus) or len(resources) != 1:
        invalid = _product(enabled[0].model.product_name, "MIG", "INVALID", shared=False)
        return {f"{_GPU}.product": invalid, f"{_GPU}.count": "0", f"{_GPU}.replicas": "0", f"{_GPU}.memory": "0"}
    ((model, first, count),) = resources.values()
    return _mig_labels(_GPU, config, model, first.profile, count)


def _mixed_labels(gpus: tuple[PhysicalGpu, ...], config: PluginConfig) -> dict[str, str]:
    """GFD's ``newMigStrategyMixedLabeler``: ``nvidia.com/mig-<profile>.*`` per profile (MIG-enabled GPUs
    without MIG devices add nothing)."""
    labels: dict[str, str] = {}
    for name, (model, first, count) in sorted(_mig_resources(gpus).items()):
        labels.update(_mig_labels(f"{_PREFIX}mig-{name}", config, model, first.profile, count))
    return labels


def gfd_labels(node: Node, config: PluginConfig, timestamp: int | None = None) -> dict[str, str]:
    """The full GFD label set; ``gfd.timestamp`` only when a timestamp is given (GFD's ``--no-timestamp``)."""
    labels: dict[str, str] = {}
    if timestamp is not None:
        labels[TIMESTAMP_LABEL] = str(timestamp)
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
            # GFD only turns spaces into "-"; fakegpu also makes it a valid label value.
            _PREFIX + "gpu.machine": fit_label_value(sanitize_product(node.machine)) or "unknown",
            _PREFIX + "vgpu.present": "false",
        }
    )
    gpus = node.gpus
    labels[_PREFIX + "mig.capable"] = "true" if any(g.model.mig_capable for g in gpus) else "false"
    any_mig = any(g.mig_enabled for g in gpus)
    labels[_PREFIX + "mps.capable"] = "true" if config.sharing.strategy == "mps" and not any_mig else "false"
    labels.update(_full_gpu_labels(gpus, config))
    if node.fabric is not None:
        # GFD's imex labeler: every GPU of a node reports the same fabric IDs, so the label is always written
        # (GFD omits it only when the GPUs disagree, which a fakegpu node cannot express).
        labels[CLIQUE_LABEL] = node.fabric.clique
    if config.mig_strategy == "single":
        labels[_PREFIX + "mig.strategy"] = "single"
        labels.update(_single_labels(gpus, config))
    elif config.mig_strategy == "mixed":
        labels[_PREFIX + "mig.strategy"] = "mixed"
        labels.update(_mixed_labels(gpus, config))
    return dict(sorted(labels.items()))
