"""A device-plugin container copied from NVIDIA's chart starts under fakegpu: its env and NVIDIA's flag
names (primary names and aliases) parse with the real ``fakegpu plugin`` command line and resolve as
NVIDIA v0.20.0 resolves them.

The env below is what ``deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml``
(NVIDIA/k8s-device-plugin v0.20.0) renders for the ``nvidia-device-plugin-ctr`` container with every
optional value set; the flags follow ``cmd/nvidia-device-plugin/main.go`` and ``api/config/v1/flags.go``.
Written here from the template, not copied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.kubelet_socket_option import kubelet_target
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import load_config, load_inventory
from fakegpu.sharing.plugin_config import PluginConfig
from tests.deploy.manifests import container_env, parse_cli

NODE = "gpu-node-1"


def chart_container(config_file: Path) -> dict[str, Any]:
    """NVIDIA's chart's plugin container (values: migStrategy single, compatWithCPUManager, a driver
    container at /run/nvidia/driver, a config map), with fakegpu's image and command put in."""
    container: dict[str, Any] = yaml.safe_load(
        f"""
name: nvidia-device-plugin-ctr
image: fakegpu:dev
command: [fakegpu, plugin, --gpus, 2xh100-80gb]
env:
  - {{name: MPS_ROOT, value: /run/nvidia/mps}}
  - {{name: MIG_STRATEGY, value: single}}
  - {{name: FAIL_ON_INIT_ERROR, value: "true"}}
  - {{name: PASS_DEVICE_SPECS, value: "true"}}
  - {{name: DEVICE_LIST_STRATEGY, value: envvar}}
  - {{name: DEVICE_ID_STRATEGY, value: uuid}}
  - {{name: NVIDIA_DRIVER_ROOT, value: /run/nvidia/driver}}
  - {{name: NVIDIA_DEV_ROOT, value: "/"}}
  - {{name: NVIDIA_CDI_HOOK_PATH, value: /usr/local/nvidia/toolkit/nvidia-cdi-hook}}
  - {{name: GDRCOPY_ENABLED, value: "false"}}
  - {{name: GDS_ENABLED, value: "false"}}
  - {{name: MOFED_ENABLED, value: "false"}}
  - {{name: CONFIG_FILE, value: {config_file}}}
  - {{name: NVIDIA_MIG_MONITOR_DEVICES, value: all}}
  - {{name: DEVICE_DISCOVERY_STRATEGY, value: auto}}
  - {{name: NVIDIA_VISIBLE_DEVICES, value: all}}
  - {{name: NVIDIA_DRIVER_CAPABILITIES, value: "compute,utility"}}
  - name: NODE_NAME
    valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}
"""
    )
    return container


def start(argv: list[str], env: dict[str, str]) -> tuple[PluginConfig, KubeletPaths, str]:
    """What ``fakegpu plugin`` resolves before it serves: the config and the kubelet it registers with."""
    args = parse_cli(argv)
    inputs = inventory_inputs(args, env)
    config = load_config(inputs)
    assert load_inventory(inputs).resources, "the plugin would serve nothing"
    paths, registration = kubelet_target(args.kubelet_socket, args.kubelet_dir, args.registration, env)
    return config, paths, registration


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\nflags:\n  migStrategy: none\n")
    return path


def test_the_charts_env_starts_the_plugin(config_file: Path) -> None:
    container = chart_container(config_file)
    env = container_env(container, NODE)
    config, paths, registration = start(container["command"][1:], env)
    assert config.mig_strategy == "single"  # env over the config file, as in NVIDIA
    assert config.pass_device_specs is True and config.mps_root == "/run/nvidia/mps"
    assert (config.nvidia_driver_root, config.nvidia_dev_root) == ("/run/nvidia/driver", "/")
    assert config.nvidia_ctk_path == "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
    assert (paths, registration) == (KubeletPaths(Path("/var/lib/kubelet")), "kubelet")


PRIMARY = [
    "--driver-root=/run/nvidia/driver",
    "--dev-root=/host-dev",
    "--nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook",
    "--driver-root-ctr-path=/driver-root-in-ctr",
    "--imex-channel-ids=0",
    "--imex-required",
    "--kubelet-socket=/var/lib/kubelet/device-plugins/kubelet.sock",
    "--cdi-feature-flags=disable-nvsandboxutils,enable-coherent-annotations",
    "--cdi-disable-hooks=enable-cuda-compat",
]
ALIASES = [
    "--nvidia-driver-root=/run/nvidia/driver",
    "--nvidia-dev-root=/host-dev",
    "--nvidia-ctk-path=/usr/bin/nvidia-cdi-hook",
    "--container-driver-root=/driver-root-in-ctr",
    "--imex-channel-ids=0",
    "--imex-required=true",
]


@pytest.mark.parametrize("flags", [PRIMARY, ALIASES], ids=["primary-names", "aliases"])
def test_nvidias_flag_names_and_aliases(flags: list[str]) -> None:
    """NVIDIA v0.20.0 main.go: --driver-root (alias --nvidia-driver-root), --dev-root (--nvidia-dev-root),
    --nvidia-cdi-hook-path (--nvidia-ctk-path), --driver-root-ctr-path (--container-driver-root)."""
    config, paths, registration = start(["plugin", "--gpus", "1xh100-80gb", *flags], {"NODE_NAME": NODE})
    assert (config.nvidia_driver_root, config.nvidia_dev_root) == ("/run/nvidia/driver", "/host-dev")
    assert (config.nvidia_ctk_path, config.container_driver_root) == ("/usr/bin/nvidia-cdi-hook", "/driver-root-in-ctr")
    assert (config.imex_channel_ids, config.imex_required) == ((0,), True)
    assert (paths.kubelet_socket, registration) == (Path("/var/lib/kubelet/device-plugins/kubelet.sock"), "kubelet")


def test_new_flags_from_their_environment_variables() -> None:
    """NVIDIA v0.20.0 main.go EnvVars: IMEX_CHANNEL_IDS, IMEX_REQUIRED, KUBELET_SOCKET, CDI_FEATURE_FLAGS."""
    env = {
        "NODE_NAME": NODE,
        "IMEX_CHANNEL_IDS": "0",
        "IMEX_REQUIRED": "true",
        "KUBELET_SOCKET": "/srv/kubelet/device-plugins/kubelet.sock",
        "CDI_FEATURE_FLAGS": "a,b",
    }
    config, paths, registration = start(["plugin", "--gpus", "1xl4"], env)
    assert (config.imex_channel_ids, config.imex_required, config.cdi_feature_flags) == ((0,), True, ("a", "b"))
    assert (paths.root, registration) == (Path("/srv/kubelet"), "kubelet")


def test_imex_from_the_config_file_and_flag_precedence(tmp_path: Path) -> None:
    """NVIDIA v0.20.0 api/config/v1/config.go: imex.channelIDs / imex.required, overridden when the flag
    (or its env) is set."""
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\nimex:\n  channelIDs: [0]\n  required: true\n")
    config, _, _ = start(["plugin", "--gpus", "1xl4", "--config-file", str(path)], {"NODE_NAME": NODE})
    assert (config.imex_channel_ids, config.imex_required) == ((0,), True)
    config, _, _ = start(
        ["plugin", "--gpus", "1xl4", "--config-file", str(path), "--imex-required=false"],
        {"NODE_NAME": NODE, "IMEX_CHANNEL_IDS": ""},
    )
    assert (config.imex_channel_ids, config.imex_required) == ((0,), False)


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--imex-channel-ids=1"], {}, "--imex-channel-ids: invalid IMEX channel IDs"),
        ([], {"IMEX_CHANNEL_IDS": "0,1"}, "environment variable IMEX_CHANNEL_IDS: invalid IMEX channel IDs"),
        (["--imex-channel-ids=zero"], {}, "--imex-channel-ids: could not parse 'zero'"),
    ],
)
def test_invalid_imex_channels_are_refused(flags: list[str], env: dict[str, str], message: str) -> None:
    """NVIDIA v0.20.0 main.go validateFlags: AssertChannelIDsValid allows no channel or channel 0."""
    with pytest.raises(SpecError, match=message):
        start(["plugin", "--gpus", "1xl4", *flags], {"NODE_NAME": NODE, **env})


def test_empty_kubelet_socket_serves_without_registering() -> None:
    """NVIDIA v0.20.0 main.go: "if this is empty, no connection with the kubelet is attempted"."""
    _, paths, registration = start(["plugin", "--gpus", "1xl4", "--kubelet-socket="], {"NODE_NAME": NODE})
    assert (paths.root, registration) == (Path("/var/lib/kubelet"), "none")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kubelet-socket=/run/kubelet.sock"], "expected an absolute <kubelet dir>/device-plugins/kubelet.sock"),
        (
            ["--kubelet-dir=/a", "--kubelet-socket=/b/device-plugins/kubelet.sock"],
            "is not in --kubelet-dir /a",
        ),
    ],
)
def test_kubelet_socket_fakegpu_cannot_serve_beside(argv: list[str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        start(["plugin", "--gpus", "1xl4", *argv], {"NODE_NAME": NODE})
