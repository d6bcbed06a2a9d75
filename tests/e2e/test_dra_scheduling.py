"""On a real cluster: publish a node's dynamic-MIG slices and let the real scheduler allocate a claim.

Needs a 1.34+ cluster with DRA (and DRAPartitionableDevices before 1.36) and permission to create
ResourceSlices, DeviceClasses, ResourceClaims and Pods. The pod is never started on a real GPU: it
targets the first node and is deleted after the scheduler allocated the claim.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim

from fakegpu.dra.device_classes import device_classes
from fakegpu.dra.resource_slices import SliceOptions
from fakegpu.dra.slice_publisher import SlicePublisher
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.eventually import eventually


async def test_scheduler_allocates_a_mig_device_from_our_pool():
    client = AsyncClient()
    # A schedulable worker: the control plane of a kind cluster is tainted NoSchedule.
    workers = [
        n.metadata.name
        async for n in client.list(Node)
        if n.metadata
        and "node-role.kubernetes.io/control-plane" not in (n.metadata.labels or {})
        and not any(t.effect == "NoSchedule" for t in ((n.spec.taints if n.spec else None) or []))
    ]
    assert workers, "the cluster has no schedulable worker node"
    node_name = str(workers[0])
    driver = f"e2e-{uuid.uuid4().hex[:6]}.fakegpu.example.com"
    live = LiveInventory(load_inventory(InventoryInputs(node_name=node_name, gpus=("1xh100-80gb",))))
    publisher = SlicePublisher(client, live, SliceOptions(driver=driver, mig_mode="dynamic"))
    # No extendedResourceName: a test class must not take nvidia.com/gpu pods from the cluster's real ones.
    classes: list[Any] = [DeviceClass.from_dict(c) for c in device_classes(driver, extended_resource_name=None)]
    claim_name = f"fakegpu-e2e-{uuid.uuid4().hex[:6]}"
    await publisher.start()
    try:
        for c in classes:
            c.metadata.name = f"{c.metadata.name}.{driver}"
            await client.create(c)
        mig_class = classes[1].metadata.name
        claim: Any = ResourceClaim.from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": claim_name, "namespace": "default"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "mig",
                                "exactly": {
                                    "deviceClassName": mig_class,
                                    "selectors": [
                                        {"cel": {"expression": f"device.attributes['{driver}'].profile == '1g.10gb'"}}
                                    ],
                                },
                            }
                        ]
                    }
                },
            }
        )
        await client.create(claim)
        pod: Any = Pod.from_dict(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": claim_name, "namespace": "default"},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node_name},
                    "resourceClaims": [{"name": "mig", "resourceClaimName": claim_name}],
                    "containers": [
                        {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "mig"}]}}
                    ],
                },
            }
        )
        await client.create(pod)

        async def allocation() -> Any:
            got: Any = await client.get(ResourceClaim, claim_name, namespace="default")
            return got.status and got.status.allocation

        allocated = await eventually(allocation, "the scheduler to allocate the claim", 60.0, interval=1.0)
        (result,) = allocated.devices.results
        assert result.driver == driver and result.pool == node_name
        assert result.device.startswith("gpu-0-mig-1g10gb-")
    finally:
        for kind, name, ns in ((Pod, claim_name, "default"), (ResourceClaim, claim_name, "default")):
            with contextlib.suppress(ApiError):
                await client.delete(kind, name, namespace=ns)
        for c in classes:
            with contextlib.suppress(ApiError):
                await client.delete(DeviceClass, c.metadata.name)
        await publisher.delete_all()
        await publisher.stop()
        await client.close()
