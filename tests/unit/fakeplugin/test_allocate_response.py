"""Allocate responses per device list / ID strategy, sharing mode and flag, pinned field by field."""

from __future__ import annotations

import base64
import itertools
import re
from typing import Any

import pytest

from fakegpu.fakeplugin.allocate_response import container_allocate_response, mig_cap_minors, validate_request
from fakegpu.fakeplugin.allocation_error import AllocationError
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2
from fakegpu.sharing.inventory import Inventory, Resource
from tests.inventory_builders import inventory, mps, time_slicing

CDI = "k8s.device-plugin.nvidia.com"
VM = "/var/run/nvidia-container-devices"
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]


def summary(resp: api_pb2.ContainerAllocateResponse) -> dict[str, Any]:
    """Every field of the response as plain data, so one equality pins all of it."""
    return {
        "envs": dict(resp.envs),
        "mounts": [(m.container_path, m.host_path, m.read_only) for m in resp.mounts],
        "devices": [(d.container_path, d.host_path, d.permissions) for d in resp.devices],
        "annotations": dict(resp.annotations),
        "cdi": [c.name for c in resp.cdi_devices],
    }


def expect(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"envs": {}, "mounts": [], "devices": [], "annotations": {}, "cdi": []}
    base.update(fields)
    return base


def resource(inv: Inventory, name: str = "nvidia.com/gpu") -> Resource:
    found = inv.resource(name)
    assert found is not None, inv.resource_names
    return found


def allocate(
    inv: Inventory, ids: list[str], name: str = "nvidia.com/gpu", present: tuple[str, ...] = tuple(CONTROL)
) -> dict[str, Any]:
    """Allocate on a node where the optional device nodes ``present`` exist (by default all of them)."""
    res = resource(inv, name)
    validate_request(res, ids)
    return summary(
        container_allocate_response(inv, res, ids, annotation_id=lambda: "fixed-id", device_exists=present.__contains__)
    )


# (device list strategies, expected fields with {g0} for GPU 0's UUID)
STRATEGY_CASES: list[tuple[str, dict[str, Any]]] = [
    ("envvar", expect(envs={"NVIDIA_VISIBLE_DEVICES": "{g0}"})),
    ("volume-mounts", expect(envs={"NVIDIA_VISIBLE_DEVICES": VM}, mounts=[(f"{VM}/{{g0}}", "/dev/null", False)])),
    (
        "cdi-annotations",
        expect(annotations={"cdi.k8s.io/nvidia-device-plugin_fixed-id": f"{CDI}/gpu={{g0}}"}),
    ),
    ("cdi-cri", expect(cdi=[f"{CDI}/gpu={{g0}}"])),
    ("envvar,cdi-cri", expect(envs={"NVIDIA_VISIBLE_DEVICES": "{g0}"}, cdi=[f"{CDI}/gpu={{g0}}"])),
    (
        "envvar,volume-mounts",
        expect(envs={"NVIDIA_VISIBLE_DEVICES": VM}, mounts=[(f"{VM}/{{g0}}", "/dev/null", False)]),
    ),
    (
        "cdi-annotations,cdi-cri",
        expect(
            annotations={"cdi.k8s.io/nvidia-device-plugin_fixed-id": f"{CDI}/gpu={{g0}}"},
            cdi=[f"{CDI}/gpu={{g0}}"],
        ),
    ),
    (
        "volume-mounts,cdi-annotations",
        expect(
            envs={"NVIDIA_VISIBLE_DEVICES": VM},
            mounts=[(f"{VM}/{{g0}}", "/dev/null", False)],
            annotations={"cdi.k8s.io/nvidia-device-plugin_fixed-id": f"{CDI}/gpu={{g0}}"},
        ),
    ),
]


def fill(value: Any, **ids: str) -> Any:
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {fill(k, **ids): fill(v, **ids) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(fill(v, **ids) for v in value)
    return value


@pytest.mark.parametrize(("strategies", "expected"), STRATEGY_CASES)
def test_device_list_strategies(tmp_path, strategies, expected):
    inv = inventory(tmp_path, "2xh100-80gb", cli={"device_list_strategy": strategies})
    g0 = inv.node.gpus[0].uuid
    assert allocate(inv, [g0]) == fill(expected, g0=g0)


@pytest.mark.parametrize(
    ("id_strategy", "strategies", "expected"),
    [
        ("uuid", "envvar", {"NVIDIA_VISIBLE_DEVICES": "{g1},{g0}"}),
        ("index", "envvar", {"NVIDIA_VISIBLE_DEVICES": "1,0"}),
        ("index", "cdi-cri", {}),
    ],
)
def test_id_strategy_full_gpus(tmp_path, id_strategy, strategies, expected):
    inv = inventory(
        tmp_path, "2xh100-80gb", cli={"device_id_strategy": id_strategy, "device_list_strategy": strategies}
    )
    g0, g1 = (g.uuid for g in inv.node.gpus)
    got = allocate(inv, [g1, g0])
    assert got["envs"] == fill(expected, g0=g0, g1=g1)
    if strategies == "cdi-cri":
        assert got["cdi"] == [f"{CDI}/gpu=1", f"{CDI}/gpu=0"]


@pytest.mark.parametrize(
    ("id_strategy", "strategies", "env", "cdi"),
    [
        ("uuid", "envvar", "{m}", []),
        ("index", "envvar", "0:1", []),
        ("index", "envvar,cdi-cri", "0:1", [f"{CDI}/gpu=0:1"]),
        ("uuid", "envvar,cdi-cri", "{m}", [f"{CDI}/gpu={{m}}"]),
    ],
)
def test_id_strategy_mig_devices(tmp_path, id_strategy, strategies, env, cdi):
    inv = inventory(
        tmp_path,
        "2xh100-80gb",
        layout="all-3g.40gb",
        cli={"mig_strategy": "mixed", "device_id_strategy": id_strategy, "device_list_strategy": strategies},
    )
    mig = inv.node.gpus[0].mig_devices[1]
    assert mig.index_id == "0:1"
    assert mig.uuid.startswith("MIG-")
    got = allocate(inv, [mig.uuid], "nvidia.com/mig-3g.40gb")
    assert got["envs"] == {"NVIDIA_VISIBLE_DEVICES": fill(env, m=mig.uuid)}
    assert got["cdi"] == fill(cdi, m=mig.uuid)


@pytest.mark.parametrize(
    ("id_strategy", "strategies", "envs", "mounts"),
    [
        ("uuid", "envvar", {"NVIDIA_VISIBLE_DEVICES": "{g0}"}, []),
        ("index", "envvar", {"NVIDIA_VISIBLE_DEVICES": "0"}, []),
        ("uuid", "volume-mounts", {"NVIDIA_VISIBLE_DEVICES": VM}, [(f"{VM}/{{g0}}", "/dev/null", False)]),
    ],
)
def test_two_replicas_of_one_gpu_show_it_once(tmp_path, id_strategy, strategies, envs, mounts):
    inv = inventory(
        tmp_path,
        "2xh100-80gb",
        config=time_slicing(4),
        cli={"device_id_strategy": id_strategy, "device_list_strategy": strategies},
    )
    g0 = inv.node.gpus[0].uuid
    got = allocate(inv, [f"{g0}::0", f"{g0}::3"])
    assert got["envs"] == fill(envs, g0=g0)
    assert got["mounts"] == fill(mounts, g0=g0)


def test_replicas_on_two_gpus_keep_request_order(tmp_path):
    inv = inventory(tmp_path, "2xh100-80gb", config=time_slicing(2))
    g0, g1 = (g.uuid for g in inv.node.gpus)
    got = allocate(inv, [f"{g1}::1", f"{g0}::0", f"{g1}::0"])
    assert got["envs"] == {"NVIDIA_VISIBLE_DEVICES": f"{g1},{g0}"}


def specs(root: str, paths: list[str]) -> list[tuple[str, str, str]]:
    return [(p, root + p, "rw") for p in paths]


@pytest.mark.parametrize(
    ("cli", "host_prefix"),
    [
        ({}, ""),
        ({"nvidia_dev_root": "/"}, ""),
        ({"nvidia_dev_root": "/run/nvidia/driver"}, "/run/nvidia/driver"),
        ({"nvidia_dev_root": "/run/nvidia/driver/"}, "/run/nvidia/driver"),
        ({"nvidia_driver_root": "/run/nvidia/driver"}, "/run/nvidia/driver"),
        ({"nvidia_driver_root": "/run/nvidia/driver", "nvidia_dev_root": "/host"}, "/host"),
    ],
)
def test_pass_device_specs_dev_root(tmp_path, cli, host_prefix):
    inv = inventory(tmp_path, "2xh100-80gb", cli={"pass_device_specs": True, **cli})
    g1 = inv.node.gpus[1].uuid
    got = allocate(inv, [g1])
    assert got["devices"] == specs(host_prefix, [*CONTROL, "/dev/nvidia1"])
    assert got["envs"] == {"NVIDIA_VISIBLE_DEVICES": g1}


def test_device_specs_off_by_default(tmp_path):
    inv = inventory(tmp_path, "2xh100-80gb")
    assert allocate(inv, [inv.node.gpus[0].uuid])["devices"] == []


def test_device_specs_not_sent_with_only_cdi(tmp_path):
    inv = inventory(tmp_path, "2xh100-80gb", cli={"pass_device_specs": True, "device_list_strategy": "cdi-cri"})
    g0 = inv.node.gpus[0].uuid
    assert allocate(inv, [g0]) == expect(cdi=[f"{CDI}/gpu={g0}"])


def test_device_specs_repeat_per_replica(tmp_path):
    """NVIDIA/k8s-device-plugin internal/rm/nvml_manager.go GetDevicePaths: ``Devices().Subset(ids).GetPaths()``
    collects every requested (replica) device's paths, so two replicas of GPU 1 give /dev/nvidia1 twice."""
    inv = inventory(tmp_path, "2xh100-80gb", config=time_slicing(3), cli={"pass_device_specs": True})
    g0, g1 = (g.uuid for g in inv.node.gpus)
    got = allocate(inv, [f"{g1}::2", f"{g0}::0", f"{g1}::0"])
    assert got["devices"] == specs("", [*CONTROL, "/dev/nvidia1", "/dev/nvidia0", "/dev/nvidia1"])


@pytest.mark.parametrize(
    "present",
    [(), ("/dev/nvidiactl",), ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"), tuple(CONTROL)],
)
def test_device_specs_pass_only_the_control_nodes_that_exist(tmp_path, present):
    """NVIDIA/k8s-device-plugin internal/plugin/server.go apiDeviceSpecs: nvidiactl, nvidia-uvm,
    nvidia-uvm-tools and nvidia-modeset are optional and skipped when ``os.Stat`` fails; the GPU's own
    node is always passed."""
    inv = inventory(tmp_path, "2xh100-80gb", cli={"pass_device_specs": True})
    got = allocate(inv, [inv.node.gpus[0].uuid], present=present)
    assert got["devices"] == specs("", [p for p in CONTROL if p in present] + ["/dev/nvidia0"])


@pytest.mark.parametrize(
    ("picks", "paths"),
    [
        # (gpu, mig) pairs; all-3g.40gb gives GI IDs 1 and 2 with CI 0 on each GPU.
        ([(0, 0)], ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"]),
        ([(0, 1)], ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"]),
        ([(1, 1)], ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap156", "/dev/nvidia-caps/nvidia-cap157"]),
        (
            [(0, 1), (0, 0)],
            # Each MIG device carries its parent's node, so two MIG devices of GPU 0 repeat it (NVIDIA's
            # GetPaths appends every device's paths).
            [
                "/dev/nvidia0",
                "/dev/nvidia-caps/nvidia-cap21",
                "/dev/nvidia-caps/nvidia-cap22",
                "/dev/nvidia0",
                "/dev/nvidia-caps/nvidia-cap12",
                "/dev/nvidia-caps/nvidia-cap13",
            ],
        ),
    ],
)
def test_mig_device_specs_include_caps(tmp_path, picks, paths):
    inv = inventory(
        tmp_path,
        "2xh100-80gb",
        layout="all-3g.40gb",
        cli={"mig_strategy": "mixed", "pass_device_specs": True, "nvidia_dev_root": "/run/nvidia/driver"},
    )
    assert [m.gi_id for m in inv.node.gpus[0].mig_devices] == [1, 2]
    ids = [inv.node.gpus[g].mig_devices[m].uuid for g, m in picks]
    got = allocate(inv, ids, "nvidia.com/mig-3g.40gb")
    assert got["devices"] == specs("/run/nvidia/driver", [*CONTROL, *paths])


def test_mig_replicas_share_caps(tmp_path):
    inv = inventory(
        tmp_path,
        "1xh100-80gb",
        layout="all-3g.40gb",
        config=time_slicing(2, "nvidia.com/mig-3g.40gb"),
        cli={"mig_strategy": "mixed", "pass_device_specs": True, "device_id_strategy": "index"},
    )
    mig = inv.node.gpus[0].mig_devices[0].uuid
    got = allocate(inv, [f"{mig}::0", f"{mig}::1"], "nvidia.com/mig-3g.40gb")
    assert got["envs"] == {"NVIDIA_VISIBLE_DEVICES": "0:0"}
    caps = ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"]
    assert got["devices"] == specs("", [*CONTROL, *caps, *caps])


def test_mig_cap_minors_match_driver_numbering_and_are_unique():
    assert mig_cap_minors(0, 0, 0) == (3, 4)
    assert mig_cap_minors(0, 0, 7) == (3, 11)
    assert mig_cap_minors(0, 1, 0) == (12, 13)
    assert mig_cap_minors(0, 14, 7) == (129, 137)
    assert mig_cap_minors(1, 0, 0) == (138, 139)
    gi_minors = {mig_cap_minors(g, gi, 0)[0] for g in range(32) for gi in range(15)}
    ci_minors = {mig_cap_minors(g, gi, ci)[1] for g, gi, ci in itertools.product(range(32), range(15), range(8))}
    assert len(gi_minors) == 32 * 15
    assert len(ci_minors) == 32 * 15 * 8
    assert not gi_minors & ci_minors
    assert min(gi_minors) == 3


@pytest.mark.parametrize(
    ("config_extra", "cli", "short", "visible", "limit_key"),
    [
        ({}, {}, "gpu", "{g0}", "{g0}"),
        ({}, {"device_id_strategy": "index"}, "gpu", "0", "0"),
        ({"renameByDefault": True}, {}, "gpu.shared", "{g0}", "{g0}"),
    ],
)
def test_mps_env_and_mounts(tmp_path, config_extra, cli, short, visible, limit_key):
    inv = inventory(tmp_path, "2xh100-80gb", config=mps(2, **config_extra), cli=cli)
    g0 = inv.node.gpus[0].uuid
    got = allocate(inv, [f"{g0}::1"], f"nvidia.com/{short}")
    assert got == expect(
        envs={
            "CUDA_MPS_PIPE_DIRECTORY": f"/mps/nvidia.com/{short}/pipe",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": fill(f"{limit_key}=40779M", g0=g0),
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
            "NVIDIA_VISIBLE_DEVICES": fill(visible, g0=g0),
        },
        mounts=[
            (f"/mps/nvidia.com/{short}/pipe", f"/run/nvidia/mps/nvidia.com/{short}/pipe", False),
            ("/dev/shm", "/run/nvidia/mps/shm", False),
        ],
    )


def test_mps_with_cdi_only_keeps_mps_fields(tmp_path):
    config = mps(4)
    config["flags"]["mpsRoot"] = "/var/mps/"
    inv = inventory(tmp_path, "1xh100-80gb", config=config, cli={"device_list_strategy": "cdi-cri"})
    g0 = inv.node.gpus[0].uuid
    got = allocate(inv, [f"{g0}::2"])
    assert got == expect(
        envs={
            "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"{g0}={81559 // 4}M",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        },
        mounts=[
            ("/mps/nvidia.com/gpu/pipe", "/var/mps/nvidia.com/gpu/pipe", False),
            ("/dev/shm", "/var/mps/shm", False),
        ],
        cdi=[f"{CDI}/gpu={g0}"],
    )


def test_mps_two_gpus_when_allowed(tmp_path):
    inv = inventory(tmp_path, "2xh100-80gb", config=mps(2, failRequestsGreaterThanOne=False))
    g0, g1 = (g.uuid for g in inv.node.gpus)
    got = allocate(inv, [f"{g1}::0", f"{g0}::0", f"{g1}::1"])
    assert got["envs"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{g1}=40779M,{g0}=40779M"
    assert got["envs"]["NVIDIA_VISIBLE_DEVICES"] == f"{g1},{g0}"


def test_time_slicing_has_no_mps_fields(tmp_path):
    inv = inventory(tmp_path, "1xh100-80gb", config=time_slicing(2))
    g0 = inv.node.gpus[0].uuid
    assert allocate(inv, [f"{g0}::0"]) == expect(envs={"NVIDIA_VISIBLE_DEVICES": g0})


@pytest.mark.parametrize(
    ("cli", "envs", "cdi_extra"),
    [
        ({"gds_enabled": True}, {"NVIDIA_GDS": "enabled"}, ["gds=all"]),
        ({"mofed_enabled": True}, {"NVIDIA_MOFED": "enabled"}, ["mofed=all"]),
        ({"gdrcopy_enabled": True}, {"NVIDIA_GDRCOPY": "enabled"}, ["gdrcopy=all"]),
        (
            {"gds_enabled": True, "mofed_enabled": True, "gdrcopy_enabled": True},
            {"NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "enabled", "NVIDIA_GDRCOPY": "enabled"},
            ["gdrcopy=all", "gds=all", "mofed=all"],
        ),
    ],
)
@pytest.mark.parametrize("strategies", ["envvar", "cdi-cri", "envvar,cdi-annotations"])
def test_gds_mofed_gdrcopy(tmp_path, cli, envs, cdi_extra, strategies):
    """CDI names after the GPUs in NVIDIA's ``additionalModes`` order gdrcopy, gds, mofed
    (NVIDIA/k8s-device-plugin ``internal/cdi/cdi.go`` ``New`` and ``AdditionalDevices``)."""
    inv = inventory(tmp_path, "1xh100-80gb", cli={"device_list_strategy": strategies, **cli})
    g0 = inv.node.gpus[0].uuid
    got = allocate(inv, [g0])
    expected_envs = dict(envs)
    if "envvar" in strategies:
        expected_envs["NVIDIA_VISIBLE_DEVICES"] = g0
    assert got["envs"] == expected_envs
    names = [f"{CDI}/gpu={g0}", *(f"{CDI}/{e}" for e in cdi_extra)]
    assert got["cdi"] == (names if "cdi-cri" in strategies else [])
    expected_annotations = {"cdi.k8s.io/nvidia-device-plugin_fixed-id": ",".join(names)}
    assert got["annotations"] == (expected_annotations if "cdi-annotations" in strategies else {})


FABRIC_UUID = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"
IMEX_CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"


def fabric_node(imex_channels: int | None = None) -> dict[str, Any]:
    """A GB200-style tray: 4 B200 GPUs on an NVLink fabric (whose driver makes the IMEX channels)."""
    fabric: dict[str, Any] = {"clusterUUID": FABRIC_UUID, "cliqueID": 1}
    if imex_channels is not None:
        fabric["imexChannels"] = imex_channels
    return {"version": "v1", "gpus": [{"model": "b200", "count": 4}], "fabric": fabric}


@pytest.mark.parametrize(
    ("strategies", "pass_specs", "expected"),
    [
        ("envvar", False, expect(envs={"NVIDIA_VISIBLE_DEVICES": "{g0}", "NVIDIA_IMEX_CHANNELS": "0"})),
        (
            "volume-mounts",
            False,
            expect(
                envs={"NVIDIA_VISIBLE_DEVICES": VM},
                mounts=[(f"{VM}/{{g0}}", "/dev/null", False), (f"{VM}/imex/0", "/dev/null", False)],
            ),
        ),
        ("cdi-cri", False, expect(cdi=[f"{CDI}/gpu={{g0}}", f"{CDI}/imex-channel=0"])),
        (
            "cdi-annotations",
            False,
            expect(annotations={"cdi.k8s.io/nvidia-device-plugin_fixed-id": f"{CDI}/gpu={{g0}},{CDI}/imex-channel=0"}),
        ),
        (
            "envvar",
            True,
            expect(
                envs={"NVIDIA_VISIBLE_DEVICES": "{g0}", "NVIDIA_IMEX_CHANNELS": "0"},
                devices=[
                    *((p, p, "rw") for p in CONTROL),
                    ("/dev/nvidia0", "/dev/nvidia0", "rw"),
                    (IMEX_CHANNEL0, IMEX_CHANNEL0, "rw"),
                ],
            ),
        ),
        # Only CDI strategies: NVIDIA returns before the device specs, the channel comes through CDI alone.
        ("cdi-cri", True, expect(cdi=[f"{CDI}/gpu={{g0}}", f"{CDI}/imex-channel=0"])),
    ],
)
def test_imex_channel_on_a_fabric_node(tmp_path, strategies, pass_specs, expected):
    """NVIDIA v0.17 internal/plugin/server.go getAllocateResponse: NVIDIA_IMEX_CHANNELS (envvar), the marker
    mount .../imex/0 (volume-mounts), k8s.device-plugin.nvidia.com/imex-channel=0 after the GPUs (CDI) and a
    DeviceSpec for /dev/nvidia-caps-imex-channels/channel0 after the GPUs' (passDeviceSpecs)."""
    config = {"version": "v1", "imex": {"channelIDs": [0]}}
    cli = {"device_list_strategy": strategies, "pass_device_specs": pass_specs}
    inv = inventory(tmp_path, config=config, cli=cli, node_spec=fabric_node())
    g0 = inv.node.gpus[0].uuid
    assert allocate(inv, [g0]) == fill(expected, g0=g0)


def test_imex_device_spec_host_path_is_under_the_dev_root(tmp_path):
    config = {"version": "v1", "imex": {"channelIDs": [0]}, "flags": {"plugin": {"passDeviceSpecs": True}}}
    inv = inventory(tmp_path, config=config, cli={"nvidia_dev_root": "/run/nvidia/driver"}, node_spec=fabric_node())
    devices = allocate(inv, [inv.node.gpus[1].uuid], present=())["devices"]
    assert devices == [
        ("/dev/nvidia1", "/run/nvidia/driver/dev/nvidia1", "rw"),
        (IMEX_CHANNEL0, f"/run/nvidia/driver{IMEX_CHANNEL0}", "rw"),
    ]


@pytest.mark.parametrize(
    ("node_spec", "imex"),
    [
        (None, {"channelIDs": [0]}),  # a node off any NVLink fabric has no channel: optional, nothing injected
        (fabric_node(imex_channels=0), {"channelIDs": [0], "required": False}),
        (fabric_node(), {}),  # a fabric node, IMEX not configured: unchanged
        (fabric_node(), {"channelIDs": []}),
    ],
)
@pytest.mark.parametrize("strategies", ["envvar", "volume-mounts", "cdi-cri", "cdi-annotations"])
def test_no_imex_channel_injects_nothing(tmp_path, node_spec, imex, strategies):
    config = {"version": "v1", "imex": imex}
    cli = {"device_list_strategy": strategies, "pass_device_specs": True}
    inv = inventory(tmp_path, "4xb200", config=config, cli=cli, node_spec=node_spec)
    (tmp_path / "plain").mkdir()
    plain = inventory(tmp_path / "plain", "4xb200", cli=cli, node_spec=node_spec)
    got = allocate(inv, [inv.node.gpus[0].uuid])
    assert got == allocate(plain, [plain.node.gpus[0].uuid])
    assert "NVIDIA_IMEX_CHANNELS" not in got["envs"]
    assert not any("imex" in path for path, _, _ in got["mounts"] + got["devices"])
    assert not any("imex" in name for name in got["cdi"] + list(got["annotations"].values()))


def test_cdi_annotation_prefix_and_random_id(tmp_path):
    inv = inventory(
        tmp_path,
        "1xh100-80gb",
        cli={"device_list_strategy": "cdi-annotations", "cdi_annotation_prefix": "nvidia.cdi.k8s.io/"},
    )
    g0 = inv.node.gpus[0].uuid
    res = resource(inv)
    first = container_allocate_response(inv, res, [g0])
    second = container_allocate_response(inv, res, [g0])
    (key,) = first.annotations
    assert re.fullmatch(r"nvidia\.cdi\.k8s\.io/nvidia-device-plugin_[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", key)
    assert len(key.split("/", 1)[1]) <= 63
    assert first.annotations[key] == f"{CDI}/gpu={g0}"
    assert set(second.annotations) != {key}
    assert dict(first.envs) == {}


UNKNOWN = 'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: GPU-nope'
TOO_MANY = (
    'invalid allocation request for "nvidia.com/gpu": invalid request: '
    "maximum request size for shared resources is 1; found 2"
)


@pytest.mark.parametrize(
    ("config", "ids", "message"),
    [
        (None, ["{g0}", "GPU-nope"], UNKNOWN),
        (time_slicing(2), ["{g0}"], UNKNOWN.replace("GPU-nope", "{g0}")),
        (time_slicing(2, failRequestsGreaterThanOne=True), ["{g0}::0", "{g1}::1"], TOO_MANY),
        (time_slicing(2, failRequestsGreaterThanOne=True), ["{g0}::0", "{g0}::1"], TOO_MANY),
        (mps(2), ["{g0}::0", "{g1}::0"], TOO_MANY),
        (time_slicing(2, failRequestsGreaterThanOne=True), ["{g0}::0", "GPU-nope"], UNKNOWN),
        (None, [], 'invalid allocation request for "nvidia.com/gpu": invalid request: no devices requested'),
    ],
)
def test_validate_request_errors(tmp_path, config, ids, message):
    inv = inventory(tmp_path, "2xh100-80gb", config=config)
    g0, g1 = (g.uuid for g in inv.node.gpus)
    with pytest.raises(AllocationError) as err:
        validate_request(resource(inv), fill(ids, g0=g0, g1=g1))
    assert str(err.value) == fill(message, g0=g0)


@pytest.mark.parametrize(
    ("config", "ids"),
    [
        (None, ["{g0}", "{g1}"]),
        (time_slicing(2), ["{g0}::0", "{g0}::1"]),
        (time_slicing(2, failRequestsGreaterThanOne=True), ["{g1}::1"]),
        (mps(2), ["{g0}::1"]),
        (mps(2, failRequestsGreaterThanOne=False), ["{g0}::0", "{g1}::0"]),
    ],
)
def test_validate_request_accepts(tmp_path, config, ids):
    inv = inventory(tmp_path, "2xh100-80gb", config=config)
    g0, g1 = (g.uuid for g in inv.node.gpus)
    validate_request(resource(inv), fill(ids, g0=g0, g1=g1))  # raises on refusal


def test_response_for_unknown_device_raises_same_text(tmp_path):
    inv = inventory(tmp_path, "1xh100-80gb")
    with pytest.raises(AllocationError, match="^" + re.escape(UNKNOWN) + "$"):
        container_allocate_response(inv, resource(inv), ["GPU-nope"])


KUBELET_ALLOC_RESP = "CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS0wMDAwMDAwMC1hYWFhLWJiYmItY2NjYy0wMDAwMDAwMDAwMDA="


def test_kubelet_checkpoint_alloc_resp_bytes():
    """The AllocResp a real kubelet checkpointed for an envvar-only response, byte for byte."""
    uuid = "GPU-00000000-aaaa-bbbb-cccc-000000000000"
    msg = api_pb2.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": uuid})
    assert base64.b64encode(msg.SerializeToString()).decode() == KUBELET_ALLOC_RESP
    parsed = api_pb2.ContainerAllocateResponse.FromString(base64.b64decode(KUBELET_ALLOC_RESP))
    assert summary(parsed) == expect(envs={"NVIDIA_VISIBLE_DEVICES": uuid})


def test_envvar_response_serializes_like_kubelet_checkpoint(tmp_path):
    """Our envvar response for one GPU has exactly the kubelet's shape: one envs entry, nothing else."""
    inv = inventory(tmp_path, "1xh100-80gb")
    g0 = inv.node.gpus[0].uuid
    resp = container_allocate_response(inv, resource(inv), [g0])
    expected = api_pb2.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": g0})
    assert resp.SerializeToString() == expected.SerializeToString()
    assert len(resp.SerializeToString()) == len(base64.b64decode(KUBELET_ALLOC_RESP))
