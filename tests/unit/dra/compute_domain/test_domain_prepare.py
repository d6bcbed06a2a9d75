"""What the compute-domain plugin reads from a claim before it asks the API server anything, and how many IMEX
channels a channel claim gets.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-kubelet-plugin/device_state.go``
(``prepareDevices``: this driver's results, their configs by precedence, one daemon device per claim;
``applyComputeDomainChannelConfigDriverManaged``: channel 0, or every channel with ``allocationMode: All``).
The error texts are wrapped here as far as this step goes; the claim's prefix (``error preparing devices for
claim '<ns>/<name>:<uid>'``) comes after, and is checked by tests/integration/test_compute_domain_plugin.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.compute_domain.domain_configs import DomainConfig
from fakegpu.dra.compute_domain.domain_prepare import AllocatedDevice, allocated_devices, channel_count
from fakegpu.dra.prepared_claims import ClaimRef
from tests.claim_builders import COMPUTE_DOMAIN_DRIVER, allocated_claim, channel_claim, daemon_claim, opaque_config

NODE = "gb200-rack0-1"
DOMAIN = "5e0c1a52-0000-4000-8000-00000000000a"
CLAIM_UID = "2e800b5e-0000-4000-8000-000000000001"
REF = ClaimRef("default", "wl", CLAIM_UID)
CHANNEL = "ComputeDomainChannelConfig"
DAEMON = "ComputeDomainDaemonConfig"


def devices_of(claim: dict[str, Any], ref: ClaimRef = REF, node: str = NODE) -> list[AllocatedDevice]:
    return allocated_devices(ref, claim, driver=COMPUTE_DOMAIN_DRIVER, node=node)


def refusal(claim: dict[str, Any], ref: ClaimRef = REF) -> str:
    with pytest.raises(ClaimError) as info:
        devices_of(claim, ref)
    return str(info.value)


def test_a_channel_claim_gives_channel_0_with_its_domain_config():
    (device,) = devices_of(channel_claim("wl", NODE, DOMAIN, allocation_mode="All"))
    assert device == AllocatedDevice("channel", "channel-0", DomainConfig(CHANNEL, DOMAIN, "All", "config[0]"))


def test_a_daemon_claim_gives_the_daemon_device_with_its_domain_config():
    (device,) = devices_of(daemon_claim("d", NODE, DOMAIN, namespace="fakegpu"))
    assert device == AllocatedDevice("daemon", "daemon", DomainConfig(DAEMON, DOMAIN, "", "config[0]"))


def test_results_of_other_drivers_are_not_this_plugins():
    """A pod's one claim may hold GPUs of gpu.nvidia.com beside the channel; those are the GPU plugin's."""
    claim = channel_claim("wl", NODE, DOMAIN)
    results = claim["status"]["allocation"]["devices"]["results"]
    results.insert(0, {"request": "gpus", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"})
    assert [d.device for d in devices_of(claim)] == ["channel-0"]
    assert devices_of(allocated_claim("gpus", NODE, ("gpu-0", "gpu-1"))) == []


@pytest.mark.parametrize(("device", "pool"), [("channel-0", "another-node"), ("channel-1", NODE), ("gpu-0", NODE)])
def test_a_device_this_node_does_not_publish_is_not_allocatable(device, pool):
    claim = allocated_claim("wl", NODE, (device,), driver=COMPUTE_DOMAIN_DRIVER, pool=pool, request="channel")
    assert refusal(claim) == f"prepare devices failed: requested device is not allocatable: {device}"


def test_a_claim_without_allocation_is_refused():
    claim = channel_claim("wl", NODE, DOMAIN)
    del claim["status"]["allocation"]
    assert refusal(claim) == "no allocation set in ResourceClaim wl in namespace default"


def test_a_claim_with_two_daemon_devices_is_refused():
    configs = [
        opaque_config(
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": DAEMON, "domainID": DOMAIN},
            (),
            driver=COMPUTE_DOMAIN_DRIVER,
        )
    ]
    claim = allocated_claim("d", NODE, ("daemon",), driver=COMPUTE_DOMAIN_DRIVER, config=configs, request="b")
    results = claim["status"]["allocation"]["devices"]["results"]
    results.append({**results[0], "request": "a"})
    assert refusal(claim) == f"only expected 1 device for requests '['a', 'b']' in claim '{CLAIM_UID}'"


def test_a_claim_uid_that_cannot_name_a_cdi_device_is_refused_first():
    """The UID becomes the spec file's and the CDI devices' name: checked before anything else is read."""
    message = refusal({"status": {}}, ClaimRef("default", "wl", "../x"))
    assert message.startswith("claim UID '../x' is not usable in a CDI spec")


def test_config_errors_say_the_prepare_failed():
    broken = channel_claim("wl", NODE, DOMAIN)
    broken["status"]["allocation"]["devices"]["config"] = {"not": "a list"}
    assert refusal(broken) == (
        "prepare devices failed: claim default/wl: status.allocation.devices.config must be a list"
    )
    bad_mode = channel_claim("wl", NODE, DOMAIN, allocation_mode="Many")
    assert refusal(bad_mode) == (
        "prepare devices failed: error validating config: unknown allocationMode 'Many' (expected one of Single, All)"
    )


def test_a_config_named_for_another_request_leaves_the_default():
    """The config names ``channel``; the result was allocated for request ``imex``: NVIDIA's default channel
    config applies, with no domain."""
    claim = channel_claim("wl", NODE, DOMAIN)
    claim["status"]["allocation"]["devices"]["results"][0]["request"] = "imex"
    assert refusal(claim) == "prepare devices failed: error validating config: domainID cannot be empty"


# --- how many channels ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "node_channels", "expected"), [("Single", 2048, 1), ("", 2048, 1), ("All", 2048, 2048), ("All", 4, 4)]
)
def test_channel_count(mode, node_channels, expected):
    assert channel_count(mode, node_channels) == expected


@pytest.mark.parametrize("mode", ["Single", "All"])
def test_a_node_without_imex_channels_refuses_either_mode(mode):
    with pytest.raises(ClaimError) as info:
        channel_count(mode, 0)
    assert str(info.value) == (
        "applyComputeDomainChannelConfigDriverManaged: requested 1 channels, but node has 0 IMEX channels"
    )
