"""The compute-domain plugin's CDI edits and specs: IMEX channel device nodes, the daemon's environment and
directory, the base spec.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-kubelet-plugin/cdi.go`` and
``computedomain.go``: vendor ``k8s.compute-domain.nvidia.com``, base spec ``...-device_base`` with device
``all``, per-claim specs of class ``claim``. A prepared claim's spec resolved by a runtime is checked in
tests/integration/test_compute_domain_plugin.py; here the edits themselves, at the edges.
"""

from __future__ import annotations

import pytest

from fakegpu.dra.claim_cdi_specs import claim_device_name, write_spec
from fakegpu.dra.compute_domain.cdi_edits import (
    VENDOR,
    channel_edits,
    claim_spec,
    daemon_edits,
    daemon_env,
    write_base_spec,
)
from fakegpu.runtime.cdi_spec_model import validate_spec
from tests.cdi_runtime import read_spec_file, resolve

UID = "5e0c1a52-0000-4000-8000-00000000000a"
CLAIM = "2e800b5e-0000-4000-8000-000000000001"


def test_the_vendor_is_nvidia_compute_domain_vendor():
    assert VENDOR == "k8s.compute-domain.nvidia.com"


@pytest.mark.parametrize("channels", [1, 3, 2048])
def test_channel_edits_are_character_devices_channel0_to_n_minus_1(channels):
    """``/dev/nvidia-caps-imex-channels/channel<n>``, minor ``n``, one fixed major, readable by anyone."""
    nodes = channel_edits(channels)["deviceNodes"]
    assert [n["path"] for n in nodes] == [f"/dev/nvidia-caps-imex-channels/channel{i}" for i in range(channels)]
    assert [n["minor"] for n in nodes] == list(range(channels))
    assert {(n["type"], n["major"], n["fileMode"]) for n in nodes} == {("c", 234, 0o666)}
    assert all("hostPath" not in n for n in nodes), "the runtime creates the node; the host has no such file"


def test_no_channels_no_device_nodes():
    assert channel_edits(0) == {"deviceNodes": []}


def test_the_daemon_environment_names_its_clique_and_domain_in_this_order():
    """What ``cmd/compute-domain-daemon/main.go`` reads from its environment."""
    domain = {"metadata": {"name": "cd", "namespace": "team", "uid": UID}}
    assert daemon_env("cluster-a.3", domain) == (
        "CLIQUE_ID=cluster-a.3",
        f"COMPUTE_DOMAIN_UUID={UID}",
        "COMPUTE_DOMAIN_NAME=cd",
        "COMPUTE_DOMAIN_NAMESPACE=team",
    )


def test_the_daemon_environment_of_a_node_off_the_fabric_has_an_empty_clique():
    assert daemon_env("", {"metadata": None})[0] == "CLIQUE_ID="
    assert daemon_env("", {}) == (
        "CLIQUE_ID=",
        "COMPUTE_DOMAIN_UUID=",
        "COMPUTE_DOMAIN_NAME=",
        "COMPUTE_DOMAIN_NAMESPACE=",
    )


def test_the_daemon_gets_its_domain_directory_at_imexd_read_write(tmp_path):
    """The daemon's config directory moved to ``/imexd`` in driver 25.8 (PR #674)."""
    edits = daemon_edits(("A=1",), tmp_path / "domains" / UID)
    assert edits == {
        "env": ["A=1"],
        "mounts": [
            {
                "containerPath": "/imexd",
                "hostPath": str(tmp_path / "domains" / UID),
                "options": ["rw", "nosuid", "nodev", "bind"],
            }
        ],
    }


def test_a_claim_spec_of_channel_and_daemon_devices_resolves_as_a_runtime_does(tmp_path):
    """The claim spec and the base spec side by side in one CDI directory, as on a node running both claims."""
    write_base_spec(tmp_path)
    channel, daemon = claim_device_name(CLAIM, "channel-0"), claim_device_name(CLAIM, "daemon")
    env = ("CLIQUE_ID=c.1",)
    spec = claim_spec(
        [
            {"name": channel, "containerEdits": channel_edits(2)},
            {"name": daemon, "containerEdits": daemon_edits(env, tmp_path / "d")},
        ]
    )
    assert spec["kind"] == f"{VENDOR}/claim"
    assert "containerEdits" not in spec, "no common edits: the base spec carries NVIDIA_VISIBLE_DEVICES=void"
    validate_spec(spec)
    write_spec(tmp_path, spec, CLAIM)
    channels = resolve(tmp_path, [f"{VENDOR}/claim={channel}"])
    assert channels.node_paths == ["/dev/nvidia-caps-imex-channels/channel0", "/dev/nvidia-caps-imex-channels/channel1"]
    assert channels.env == {}
    both = resolve(tmp_path, [f"{VENDOR}/device=all", f"{VENDOR}/claim={daemon}"])
    assert both.env == {"NVIDIA_VISIBLE_DEVICES": "void", "CLIQUE_ID": "c.1"}
    assert both.mount_targets == ["/imexd"]


def test_the_base_spec_is_one_device_all_with_nothing_visible(tmp_path):
    path = write_base_spec(tmp_path)
    assert path == tmp_path / "k8s.compute-domain.nvidia.com-device_base.yaml"
    spec = read_spec_file(path)
    assert spec["kind"] == "k8s.compute-domain.nvidia.com/device"
    assert spec["devices"] == [{"name": "all", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}]


def test_writing_the_base_spec_again_at_the_next_start_leaves_one_identical_file(tmp_path):
    first = write_base_spec(tmp_path).read_bytes()
    assert write_base_spec(tmp_path).read_bytes() == first
    assert [p.name for p in tmp_path.iterdir()] == ["k8s.compute-domain.nvidia.com-device_base.yaml"]
