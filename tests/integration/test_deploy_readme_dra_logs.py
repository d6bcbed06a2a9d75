"""deploy/README.md's `kubectl logs` outputs of the DRA examples are what the dra overlay's driver hands the
examples' claims: the driver runs with the DaemonSet's own arguments and environment, prepares each example's
claim on the device the README names, and the container environment its CDI spec gives, filtered and sorted
by the example pod's own `env | grep ... | sort`, must be the lines the README shows (a real Kubernetes v1.36.2
cluster printed FAKEGPU_DEVICES_FILE, which the README had left out)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.nvidia_smi_command import apply_inject_flags
from fakegpu.cli.slice_commands import dra_feature_gates
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.cdi_runtime import resolve
from tests.claim_builders import allocated_claim
from tests.deploy.manifests import (
    EXAMPLES,
    container_env,
    fakegpu_argv,
    load_docs,
    one,
    only_container,
    parse_cli,
    render,
)
from tests.dra_kubelet_client import prepare

NODE = "fakegpu-worker2"
README = EXAMPLES.parent / "README.md"
# pod -> (example file, the device deploy/README.md says the scheduler picks)
EXAMPLE_PODS = {
    "dra-mig": ("dra-mig-claim.yaml", "gpu-0-mig-1g10gb-19-0"),
    "dra-mps-0": ("dra-mps-claim.yaml", "gpu-1"),
}


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        yield server


def readme_logs(pod: str) -> list[str]:
    match = re.search(rf"^\$ kubectl logs {pod}\n(.*?)\n```", README.read_text(), flags=re.M | re.S)
    assert match is not None, f"deploy/README.md shows no `kubectl logs {pod}`"
    return match.group(1).splitlines()


def claim_and_filter(pod: str) -> tuple[dict[str, Any], str]:
    """The example's claim spec (from its ResourceClaim or ResourceClaimTemplate) and its pod's grep pattern."""
    docs = load_docs(EXAMPLES / EXAMPLE_PODS[pod][0])
    claim = next(d for d in docs if d["kind"] in ("ResourceClaim", "ResourceClaimTemplate"))
    spec = claim["spec"]["spec"] if claim["kind"] == "ResourceClaimTemplate" else claim["spec"]
    command = only_container(one(docs, "Pod", pod))["command"][-1]
    grep = re.search(r"grep -E '([^']+)'", command)
    assert grep is not None and "| sort" in command, f"{pod} prints its env through grep -E and sort"
    return spec, grep.group(1)


async def test_dra_example_logs_are_what_the_overlays_driver_injects(apiserver: FakeApiServer, root: Path) -> None:
    container = only_container(one(render("dra"), "DaemonSet", "fakegpu-dra"))
    args = parse_cli(fakegpu_argv(container))
    env = container_env(container, NODE)
    gates, mig_mode = dra_feature_gates(args, env)
    inputs = apply_inject_flags(args, inventory_inputs(args, env))
    assert inputs.nvidia_smi_dir, "the overlay injects the fake nvidia-smi"
    settings = DraSettings(cdi_root=root / "cdi", mig_mode=mig_mode, feature_gates=gates)
    driver = DraDriver(
        LiveInventory(load_inventory(inputs)), KubeletPaths(root / "kubelet"), settings, apiserver.client
    )
    await driver.start()
    try:
        await driver.wait_published()
        for pod, (_, device) in EXAMPLE_PODS.items():
            spec, pattern = claim_and_filter(pod)
            (request,) = spec["devices"]["requests"]
            config = [{"source": "FromClaim", **c} for c in spec["devices"].get("config", [])]
            body = allocated_claim(pod, NODE, [device], config=config, request=request["name"])
            uid = apiserver.create_direct(body)["metadata"]["uid"]
            response = await prepare(driver.plugin.dra_socket, [("default", pod, uid)])
            assert response.claims[uid].error == ""
            ids = [i for d in response.claims[uid].devices for i in d.cdi_device_ids]
            environment = resolve(root / "cdi", ids).env
            printed = sorted(f"{k}={v}" for k, v in environment.items() if re.search(pattern, f"{k}={v}"))
            assert readme_logs(pod) == printed, f"kubectl logs {pod}"
    finally:
        await driver.stop()
