"""NVIDIA config v1: same defaults, same precedence, same validation texts as the real plugin."""

from __future__ import annotations

import re
from typing import Any

import pytest

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.nvidia_config import parse_nvidia_config
from fakegpu.sharing.plugin_config import resolve_plugin_config

SRC = "cfg.yaml"


def resolve(data: dict[str, Any] | None, cli=None, env=None, **kw):
    file, warnings = parse_nvidia_config(data, SRC) if data is not None else (None, [])
    return resolve_plugin_config(file, file_source=SRC, cli=cli, env=env, file_warnings=warnings, **kw)


def ts(resources: Any, **extra: Any) -> dict[str, Any]:
    return {"version": "v1", "sharing": {"timeSlicing": {**extra, "resources": resources}}}


ERRORS = [
    ({"version": "v2"}, "unknown version: v2"),
    (ts([{"name": "nvidia.com/gpu", "replicas": 1}]), "number of replicas must be >= 2"),
    (ts([{"name": "nvidia.com/gpu", "replicas": 0}]), "number of replicas must be >= 2"),
    (ts([{"name": "nvidia.com/gpu"}]), "no replicas specified"),
    (ts([{"replicas": 2}]), "no resource name specified"),
    (ts([]), "no resources specified"),
    ({"sharing": {"timeSlicing": {"renameByDefault": True}}}, "no resources specified"),
    (
        ts([{"name": "gpu", "replicas": 2, "devices": "some"}]),
        "devices set as 'some' but the only valid string input is 'all'",
    ),
    (ts([{"name": "gpu", "replicas": 2, "devices": 0}]), "devices set as '0' but a count of devices must be > 0"),
    (ts([{"name": "gpu", "replicas": 2, "devices": ["GPU-nope"]}]), "unsupported type for device in devices list"),
    (ts([{"name": "gpu", "replicas": "two"}]), "replicas: Input should be a valid integer"),
    ({"flags": {"migStrategy": "weird"}}, "unknown MIG strategy: weird"),
    (
        {"flags": {"plugin": {"deviceListStrategy": "smoke-signals"}}},
        "invalid --device-list-strategy option: invalid strategy: smoke-signals",
    ),
    ({"flags": {"plugin": {"deviceListStrategy": ["envvar", "bogus"]}}}, "invalid strategy: bogus"),
    ({"flags": {"plugin": {"deviceIDStrategy": "serial"}}}, "invalid --device-id-strategy option: serial"),
    (
        {"flags": {"plugin": {"sharedDevicesAllocationPolicy": "random"}}},
        "invalid --shared-devices-allocation-policy option: random",
    ),
    ({"flags": {"deviceDiscoveryStrategy": "magic"}}, "invalid --device-discovery-strategy option: magic"),
    (
        {"flags": {"deviceDiscoveryStrategy": "tegra", "plugin": {"deviceListStrategy": "cdi-cri"}}},
        "CDI --device-list-strategy options are only supported on NVML-based systems",
    ),
    (
        {"flags": {"migStrategy": "mixed"}, "sharing": {"mps": {"resources": [{"name": "gpu", "replicas": 2}]}}},
        "using --mig-strategy=mixed is not supported with MPS",
    ),
    (
        {"sharing": {"mps": {"resources": [{"name": "gpu", "replicas": 2}]}}},
        "using MPS requires --mps-root to be specified",
    ),
    ({"imex": {"channelIDs": [1]}}, "invalid IMEX channel IDs"),
    ({"resources": {"gpus": [{"name": "gpu"}]}}, "resources must have a 'pattern' field set"),
    ({"flags": {"failOnInitError": "sometimes"}}, "flags.failOnInitError: Input should be a valid boolean"),
    (
        {"flags": {"plugin": {"passDeviceSpecs": "yes"}}},
        "flags.plugin.passDeviceSpecs: Input should be a valid boolean",
    ),
    (ts([{"name": "gpu", "replicas": "3"}]), "replicas: Input should be a valid integer"),
    (ts([{"name": "gpu", "replicas": 4.0}]), "replicas: Input should be a valid integer"),
    (
        {"sharing": {"timeSlicing": {"renameByDefault": "true", "resources": [{"name": "gpu", "replicas": 2}]}}},
        "renameByDefault: Input should be a valid boolean",
    ),
    (ts([{"name": "Not_Valid!", "replicas": 2}]), "invalid resource name 'nvidia.com/Not_Valid!'"),
    (
        ts([{"name": "nvidia.com/gpu", "replicas": 2}, {"name": "gpu", "replicas": 3}]),
        "resource nvidia.com/gpu is listed twice",
    ),
]


@pytest.mark.parametrize(("data", "message"), ERRORS)
def test_nvidia_validation_errors(data, message):
    with pytest.raises(SpecError) as err:
        resolve(data)
    assert message in str(err.value)
    assert str(err.value).startswith(SRC) or "--" in str(err.value) or "default" in str(err.value)


def test_error_names_the_field_path():
    with pytest.raises(SpecError) as err:
        resolve(ts([{"name": "gpu", "replicas": 2}, {"name": "gpu2", "replicas": 1}]))
    assert str(err.value) == "cfg.yaml: sharing.timeSlicing.resources[1]: number of replicas must be >= 2"


def test_defaults_match_nvidia():
    c = resolve(None)
    assert c.mig_strategy == "none"
    assert c.fail_on_init_error is True
    assert c.device_list_strategy == ("envvar",)
    assert c.device_id_strategy == "uuid"
    assert c.pass_device_specs is False
    assert c.cdi_annotation_prefix == "cdi.k8s.io/"
    assert c.nvidia_ctk_path == "/usr/bin/nvidia-ctk"
    assert c.container_driver_root == "/driver-root"
    assert c.shared_devices_allocation_policy == "distributed"
    assert c.nvidia_dev_root == "/" == c.nvidia_driver_root
    assert c.sharing.strategy == "none"


@pytest.mark.parametrize(
    ("cli", "env", "expected"),
    [
        ({"mig_strategy": "none"}, {"MIG_STRATEGY": "single"}, "none"),
        ({}, {"MIG_STRATEGY": "single"}, "single"),
        ({}, {}, "mixed"),
    ],
)
def test_precedence_flag_over_env_over_file(cli, env, expected):
    assert resolve({"flags": {"migStrategy": "mixed"}}, cli=cli, env=env).mig_strategy == expected


def test_default_when_nothing_is_set_and_error_names_the_env_var():
    assert resolve({}).mig_strategy == "none"
    with pytest.raises(SpecError, match="environment variable MIG_STRATEGY: unknown MIG strategy: x"):
        resolve({}, env={"MIG_STRATEGY": "x"})
    with pytest.raises(SpecError, match="--device-id-strategy: invalid --device-id-strategy option: y"):
        resolve({}, cli={"device_id_strategy": "y"})


def test_device_list_strategy_forms():
    assert resolve({"flags": {"plugin": {"deviceListStrategy": ["envvar", "cdi-cri"]}}}).device_list_strategy == (
        "envvar",
        "cdi-cri",
    )
    assert resolve({}, env={"DEVICE_LIST_STRATEGY": "volume-mounts,cdi-annotations"}).device_list_strategy == (
        "volume-mounts",
        "cdi-annotations",
    )


def test_bool_env_parsing():
    assert resolve({}, env={"PASS_DEVICE_SPECS": "true"}).pass_device_specs is True
    with pytest.raises(SpecError, match="PASS_DEVICE_SPECS: could not parse 'yes' as bool"):
        resolve({}, env={"PASS_DEVICE_SPECS": "yes"})


def test_misplaced_rename_by_default_is_ignored_with_a_warning():
    """NVIDIA issue #1433: renameByDefault under flags does nothing."""
    c = resolve({"flags": {"renameByDefault": True}, **ts([{"name": "gpu", "replicas": 2}])})
    assert c.sharing.rules[0].rename == ""
    assert any("unknown field flags.renameByDefault" in w for w in c.warnings)


@pytest.mark.parametrize("strategy", ["roundrobin", "round-robin", "packed"])
def test_removed_time_slicing_strategy_is_accepted_and_ignored(strategy):
    """NVIDIA/k8s-device-plugin api/config/v1/replicas.go (v0.20.0): ReplicatedResources has no
    ``strategy`` any more (removed in v0.12), so the key is dropped like any unknown one."""
    c = resolve(ts([{"name": "gpu", "replicas": 2}], strategy=strategy))
    assert c.sharing.strategy == "time-slicing" and c.sharing.rules[0].replicas == 2
    assert any("unknown field sharing.timeSlicing.strategy is ignored" in w for w in c.warnings)


@pytest.mark.parametrize("key", ["timeSlicing", "mps"])
def test_rename_by_default_is_prefilled_without_a_warning(key):
    """NVIDIA/k8s-device-plugin api/config/v1/replicas.go: decoding renameByDefault fills every empty
    rename with ``<name>.shared``, so DisableResourceNamingInConfig finds nothing to override."""
    data = {
        "flags": {"mpsRoot": "/run/nvidia/mps"},
        "sharing": {key: {"renameByDefault": True, "resources": [{"name": "gpu", "replicas": 2}]}},
    }
    c = resolve(data)
    assert c.sharing.rules[0].rename == "nvidia.com/gpu.shared"
    assert c.warnings == ()


def test_rename_by_default_with_another_rename_is_overridden_with_a_warning():
    """NVIDIA/k8s-device-plugin api/config/v1 (DisableResourceNamingInConfig): a rename other than
    ``<name>.shared`` under renameByDefault is reset to the default, with NVIDIA's warning."""
    c = resolve(ts([{"name": "gpu", "replicas": 2, "rename": "gpu-ts"}], renameByDefault=True))
    assert c.sharing.rules[0].rename == "nvidia.com/gpu.shared"
    assert "Setting the 'rename' field in sharing.timeSlicing.resources is not yet supported" in " ".join(c.warnings)


def test_rename_and_devices_are_overridden_like_nvidia():
    c = resolve(ts([{"name": "gpu", "replicas": 2, "rename": "gpu-ts", "devices": [0, "1"]}]))
    rule = c.sharing.rules[0]
    assert (rule.name, rule.rename, rule.devices) == ("nvidia.com/gpu", "", "all")
    assert "Setting the 'rename' field in sharing.timeSlicing.resources is not yet supported" in " ".join(c.warnings)
    assert "Customizing the 'devices' field in sharing.timeSlicing.resources" in " ".join(c.warnings)


def test_rename_and_devices_honoured_when_asked():
    c = resolve(
        ts([{"name": "gpu", "replicas": 2, "rename": "gpu-ts", "devices": [0, "1"]}]), honor_sharing_rename_devices=True
    )
    rule = c.sharing.rules[0]
    assert (rule.rename, rule.devices) == ("nvidia.com/gpu-ts", ("0", "1"))


def test_custom_resources_ignored_with_nvidias_message():
    c = resolve({"resources": {"gpus": [{"pattern": "*", "name": "fast-gpu"}]}})
    assert c.gpu_resource_rules == ()
    assert "Customizing the 'resources' field is not yet supported in the config. Ignoring..." in c.warnings


def test_fail_requests_greater_than_one_defaults():
    assert resolve(ts([{"name": "gpu", "replicas": 2}])).sharing.fail_requests_greater_than_one is False
    mps = {"flags": {"mpsRoot": "/run/nvidia/mps"}, "sharing": {"mps": {"resources": [{"name": "gpu", "replicas": 2}]}}}
    assert resolve(mps).sharing.fail_requests_greater_than_one is True
    mps["sharing"]["mps"]["failRequestsGreaterThanOne"] = False  # type: ignore[index]
    assert resolve(mps).sharing.fail_requests_greater_than_one is False


def test_mps_wins_over_time_slicing():
    data = {
        "flags": {"mpsRoot": "/run/nvidia/mps"},
        "sharing": {
            "timeSlicing": {"resources": [{"name": "gpu", "replicas": 4}]},
            "mps": {"resources": [{"name": "gpu", "replicas": 2}]},
        },
    }
    c = resolve(data)
    assert c.sharing.strategy == "mps"
    assert c.sharing.rules[0].replicas == 2


@pytest.mark.parametrize(
    "ref",
    [
        "0",
        "0:1",
        "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763",
        "MIG-b1028956-cfa2-0990-bf4a-5da9abb51763",
        "MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0",
    ],
)
def test_device_reference_forms(ref):
    c = resolve(ts([{"name": "gpu", "replicas": 2, "devices": [ref]}]), honor_sharing_rename_devices=True)
    assert c.sharing.rules[0].devices == (ref,)


# --- imex (NVIDIA v0.17 api/config/v1/imex.go, api/config/v1/config.go NewConfig, main.go validateFlags) ---


@pytest.mark.parametrize(
    ("imex", "expected"),
    [
        (None, ((), False)),
        ({}, ((), False)),
        ({"channelIDs": None}, ((), False)),
        ({"channelIDs": []}, ((), False)),
        ({"channelIDs": [0]}, ((0,), False)),
        ({"channelIDs": [0], "required": True}, ((0,), True)),
        ({"required": True}, ((), True)),
    ],
)
def test_imex_config_forms(imex, expected):
    """imex_test.go: ``{}`` and ``channelIDs: null`` are empty, ``[]`` and ``[0]`` valid."""
    data = {"version": "v1"} if imex is None else {"version": "v1", "imex": imex}
    config = resolve(data)
    assert (config.imex_channel_ids, config.imex_required) == expected


@pytest.mark.parametrize(
    ("data", "cli", "env", "where", "found"),
    [
        ({"imex": {"channelIDs": [1]}}, None, None, f"{SRC}: imex.channelIDs", "[1]"),
        ({"imex": {"channelIDs": [0, 1]}}, None, None, f"{SRC}: imex.channelIDs", "[0 1]"),
        ({"imex": {"channelIDs": [0, 0]}}, None, None, f"{SRC}: imex.channelIDs", "[0 0]"),
        ({}, {"imex_channel_ids": "2"}, None, "--imex-channel-ids", "[2]"),
        ({}, None, {"IMEX_CHANNEL_IDS": "0,1"}, "environment variable IMEX_CHANNEL_IDS", "[0 1]"),
    ],
)
def test_invalid_imex_channel_ids_with_nvidias_text(data, cli, env, where, found):
    with pytest.raises(SpecError) as err:
        resolve({"version": "v1", **data}, cli=cli, env=env)
    assert str(err.value) == (
        f"{where}: invalid IMEX channel IDs: invalid IMEX config: channelIDs must be [] or [0]; found {found}"
    )


@pytest.mark.parametrize(
    ("imex", "message"),
    [
        ({"channelIDs": "0"}, "imex.channelIDs: Input should be a valid list"),
        ({"channelIDs": ["zero"]}, "imex.channelIDs[0]: Input should be a valid integer"),
        ({"required": "yes"}, "imex.required: Input should be a valid boolean"),
    ],
)
def test_bad_imex_field_types_name_the_field(imex, message):
    with pytest.raises(SpecError, match=re.escape(message)) as err:
        resolve({"version": "v1", "imex": imex})
    assert str(err.value).startswith(SRC)


@pytest.mark.parametrize(
    ("cli", "env", "ids", "required", "origin"),
    [
        # The file says [0] and required: flag and env override it (NewConfig: c.IsSet(...) after the file).
        (None, None, (0,), True, f"{SRC}: imex.required"),
        (None, {"IMEX_CHANNEL_IDS": "", "IMEX_REQUIRED": "false"}, (0,), False, "environment variable IMEX_REQUIRED"),
        ({"imex_required": "false"}, {"IMEX_REQUIRED": "true"}, (0,), False, "--imex-required"),
        ({"imex_required": True}, {"IMEX_REQUIRED": "false"}, (0,), True, "--imex-required"),
    ],
)
def test_imex_precedence_flag_over_env_over_file(cli, env, ids, required, origin):
    config = resolve({"version": "v1", "imex": {"channelIDs": [0], "required": True}}, cli=cli, env=env)
    assert (config.imex_channel_ids, config.imex_required, config.imex_required_origin) == (ids, required, origin)


def test_imex_flags_win_over_an_invalid_file_value():
    """The file's channelIDs are replaced before validation, so a flag can fix a bad file."""
    config = resolve({"version": "v1", "imex": {"channelIDs": [3]}}, cli={"imex_channel_ids": "0"})
    assert config.imex_channel_ids == (0,)


def test_imex_required_env_that_is_not_a_bool_names_the_variable():
    with pytest.raises(SpecError, match="environment variable IMEX_REQUIRED: could not parse 'maybe' as bool"):
        resolve(None, env={"IMEX_REQUIRED": "maybe"})


def test_the_later_default_channel_strategy_form_is_not_read_and_says_so():
    """Post-v0.17 ``imex.defaultChannelStrategy`` is another schema; this plugin follows v0.17's."""
    _, warnings = parse_nvidia_config({"imex": {"defaultChannelStrategy": "auto"}}, SRC)
    assert warnings == [
        f"{SRC}: unknown field imex.defaultChannelStrategy is ignored (the NVIDIA device plugin ignores it silently)"
    ]
