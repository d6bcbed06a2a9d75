"""Per-node config selection as NVIDIA's config-manager does it: a node label names one of several configs.

NVIDIA's Helm chart mounts a ConfigMap of named configs as a directory; the node label
``nvidia.com/device-plugin.config=<name>`` picks the file, an unset label falls back to ``--default-config``
or to the fallback strategies. The rules and texts here follow ``cmd/config-manager/main.go``, except that a
failed choice never ends the process: the caller keeps serving the config it has.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fakegpu.sharing.errors import SpecError

DEFAULT_CONFIG_LABEL = "nvidia.com/device-plugin.config"
NAMED_CONFIG_FALLBACK = "default"
FallbackStrategy = Literal["named", "single", "empty"]
FALLBACK_STRATEGIES: tuple[FallbackStrategy, ...] = ("named", "single", "empty")
#: NVIDIA's Helm chart passes ``named,single`` when it runs the config-manager.
DEFAULT_FALLBACKS: tuple[FallbackStrategy, ...] = ("named", "single")
#: The "empty" config: a file with no settings, as config-manager's symlink to /dev/null.
EMPTY_CONFIG = os.devnull


def parse_fallback_strategies(text: str, source: str = "--fallback-strategies") -> tuple[FallbackStrategy, ...]:
    """``named,single`` -> ("named", "single"); an unknown name is an error up front, not at the first label."""
    out: list[FallbackStrategy] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part not in FALLBACK_STRATEGIES:
            raise SpecError(source, f"unknown fallback strategy: {part} (expected one of named, single, empty)")
        out.append(part)
    return tuple(out)


def available_configs(directory: Path) -> list[str]:
    """Config names in a mounted ConfigMap: regular entries, not dirs, not the ``..data`` bookkeeping links."""
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise SpecError(str(directory), f"error reading directory: {exc.strerror or exc}") from exc
    return [e.name for e in entries if not e.name.startswith("..") and not e.is_dir()]


@dataclass(frozen=True)
class ConfigChoice:
    """The config a label value selects: a file in the directory, or the empty config."""

    name: str
    path: str

    @property
    def describe(self) -> str:
        return f"config {self.name}" if self.name else "the empty config"


def choose_config(
    label_value: str,
    directory: Path,
    *,
    default_config: str = "",
    fallbacks: Sequence[FallbackStrategy] = DEFAULT_FALLBACKS,
    label: str = DEFAULT_CONFIG_LABEL,
) -> ConfigChoice:
    """Pick the config for a node whose ``label`` has ``label_value`` ("" when unset); SpecError says why not."""
    source = f"node label {label}"
    names = available_configs(directory)
    if not names:
        raise SpecError(str(directory), "no configuration files available")

    def chosen(name: str) -> ConfigChoice:
        return ConfigChoice(name, str(directory / name))

    if label_value:
        if label_value not in names:
            raise SpecError(source, f"specified config {label_value} does not exist (available: {', '.join(names)})")
        return chosen(label_value)
    if default_config:
        if default_config not in names:
            raise SpecError(
                "--default-config", f"specified config {default_config} does not exist (available: {', '.join(names)})"
            )
        return chosen(default_config)
    for fallback in fallbacks:
        if fallback == "named" and NAMED_CONFIG_FALLBACK in names:
            return chosen(NAMED_CONFIG_FALLBACK)
        if fallback == "single" and len(names) == 1:
            return chosen(names[0])
        if fallback == "empty":
            return ConfigChoice("", EMPTY_CONFIG)
    raise SpecError(
        source,
        "no config was set, no default was provided, and all fallbacks failed "
        f"(fallbacks: {','.join(fallbacks) or 'none'}; available: {', '.join(names)})",
    )
