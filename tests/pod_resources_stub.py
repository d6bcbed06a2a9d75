"""A kubelet PodResources API that answers with a fixed response, for the DCGM exporter's pod attribution."""

from __future__ import annotations

from typing import Any

import grpc

from fakegpu.kubeletapi.podresources.v1 import api_pb2 as pr
from fakegpu.kubeletapi.podresources.v1 import api_pb2_grpc as pr_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class DraKubelet(pr_grpc.PodResourcesListerServicer):
    """A kubelet whose pod resources API reports a DRA allocation (Kubernetes 1.34+)."""

    def __init__(self, response: pr.ListPodResourcesResponse) -> None:
        self.response = response

    async def List(self, request: pr.ListPodResourcesRequest, context: Context) -> pr.ListPodResourcesResponse:
        return self.response

    async def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: Context
    ) -> pr.AllocatableResourcesResponse:
        return pr.AllocatableResourcesResponse()

    async def Get(self, request: pr.GetPodResourcesRequest, context: Context) -> pr.GetPodResourcesResponse:
        return pr.GetPodResourcesResponse()
