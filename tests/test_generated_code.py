"""The checked-in generated modules are exactly what protos/ produces with the pinned tools."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2 as dp
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_is_current():
    proc = subprocess.run(
        [sys.executable, "-m", "fakegpu.kubeletapi.generate", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_wire_names_match_upstream():
    assert dp.DESCRIPTOR.package == "v1beta1"
    assert dp.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == "v1beta1.DevicePlugin"
    assert dp.DESCRIPTOR.services_by_name["Registration"].full_name == "v1beta1.Registration"
    assert reg.DESCRIPTOR.services_by_name["Registration"].full_name == "pluginregistration.Registration"
    fields = {f.name: f.number for f in dp.ContainerAllocateResponse.DESCRIPTOR.fields}
    assert fields == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
    fields = {f.name: f.number for f in dp.ContainerPreferredAllocationRequest.DESCRIPTOR.fields}
    assert fields == {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}
    assert {f.name: f.number for f in dp.RegisterRequest.DESCRIPTOR.fields} == {
        "version": 1,
        "endpoint": 2,
        "resource_name": 3,
        "options": 4,
    }
    assert {f.name: f.number for f in reg.PluginInfo.DESCRIPTOR.fields} == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }


def test_golden_checkpoint_alloc_resp_decodes():
    """The AllocResp a real kubelet stored decodes with our ContainerAllocateResponse."""
    raw = base64.b64decode(
        "CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS0wMDAwMDAwMC1hYWFhLWJiYmItY2NjYy0wMDAwMDAwMDAwMDA="
    )
    msg = dp.ContainerAllocateResponse.FromString(raw)
    assert dict(msg.envs) == {"NVIDIA_VISIBLE_DEVICES": "GPU-00000000-aaaa-bbbb-cccc-000000000000"}
