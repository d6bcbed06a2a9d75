"""On a real cluster: three virtual nodes with a unique name prefix, their allocatable and their
ResourceSlices as the API server stores them, a second run that writes nothing, then ``--delete``.

Needs permission to create, patch and delete Nodes (and ResourceSlices on 1.32+). The nodes are KWOK
nodes: without KWOK in the cluster they stay NotReady, which does not matter here. Whatever happens, the
nodes are deleted at the end.
"""

from __future__ import annotations

import argparse
import io
import uuid

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from fakegpu.cli.virtual_nodes_command import add_virtual_nodes_parser, run_virtual_nodes
from fakegpu.kube.discovery import SLICE_KINDS
from fakegpu.virtual_nodes.names import prefix_label_value


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fakegpu")
    add_virtual_nodes_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["virtual-nodes", *argv])


async def test_three_virtual_nodes_on_a_real_cluster():
    prefix = f"fakegpu-e2e-{uuid.uuid4().hex[:6]}-"
    names = [f"{prefix}{i:04d}" for i in range(3)]
    client = AsyncClient()
    out = io.StringIO()
    try:
        code = await run_virtual_nodes(
            parse("--count", "3", "--gpus", "2xh100-80gb", "--name-prefix", prefix), client=client, out=out, err=out
        )
        assert code == 0, out.getvalue()
        for name in names:
            node = await client.get(Node, name)
            assert node.metadata is not None and node.status is not None and node.spec is not None
            assert (node.metadata.annotations or {})["kwok.x-k8s.io/node"] == "fake"
            assert (node.metadata.labels or {})["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
            assert (node.status.allocatable or {})["nvidia.com/gpu"] == "2"
            assert (node.status.capacity or {})["nvidia.com/gpu"] == "2"
            assert any(t.key == "kwok.x-k8s.io/node" for t in node.spec.taints or [])
            # --delete selects on this label, never on a name prefix.
            assert (node.metadata.labels or {})["fakegpu.io/virtual-node-prefix"] == prefix_label_value(prefix)
        served = [v for v in SLICE_KINDS if f"ResourceSlices as {v} " in out.getvalue()]
        if served:  # a cluster without DRA gets nodes only
            kind = SLICE_KINDS[served[0]]
            for name in names:
                slices = [s async for s in client.list(kind, fields={"spec.nodeName": name})]
                assert len(slices) == 1
                (owner,) = slices[0].metadata.ownerReferences
                assert (owner.kind, owner.name, owner.controller) == ("Node", name, True)
                assert len(slices[0].spec.devices) == 2

        again = io.StringIO()
        code = await run_virtual_nodes(
            parse("--count", "3", "--gpus", "2xh100-80gb", "--name-prefix", prefix), client=client, out=again, err=again
        )
        assert code == 0 and "3 unchanged" in again.getvalue(), again.getvalue()
    finally:
        done = io.StringIO()
        code = await run_virtual_nodes(parse("--delete", "--name-prefix", prefix), client=client, out=done, err=done)
        left = [n.metadata.name async for n in client.list(Node) if n.metadata and n.metadata.name in names]
        await client.close()
    assert code == 0, done.getvalue()
    assert left == []
