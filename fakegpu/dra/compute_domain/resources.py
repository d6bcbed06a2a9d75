"""NVIDIA's ComputeDomain custom resources as lightkube resources, and the names both the controller and
the kubelet plugin write on objects (``kubernetes-sigs/dra-driver-nvidia-gpu``, driver 25.12:
``api/nvidia.com/resource/v1beta1/computedomain.go``, ``cmd/compute-domain-controller/computedomain.go``).
"""

from __future__ import annotations

from lightkube.generic_resource import create_namespaced_resource

GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

ComputeDomain = create_namespaced_resource(GROUP, VERSION, "ComputeDomain", "computedomains")
"""What a workload asks for: a set of nodes prepared to run one multi-node job, and the claim template its
pods reference to get an IMEX channel."""
ComputeDomainClique = create_namespaced_resource(GROUP, VERSION, "ComputeDomainClique", "computedomaincliques")
"""The IMEX daemons of one ComputeDomain on one clique, named ``<domain UID>.<clique>``, in the driver's
namespace; written by the daemons, read by the controller into the domain's status."""

COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
"""Value: the domain's UID. On a node (set while a channel claim of the domain is prepared there, so the
domain's daemons land on it), on the claim templates and the daemon set; also the finalizer's name."""
COMPUTE_DOMAIN_FINALIZER = COMPUTE_DOMAIN_LABEL
CLIQUE_LABEL = "resource.nvidia.com/computeDomain.cliqueID"
TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
"""``Workload`` on the template the workload's pods use, ``Daemon`` on the IMEX daemons' template."""

CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"
DAEMON_CONFIG_KIND = "ComputeDomainDaemonConfig"
DEFAULT_CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
READY = "Ready"
NOT_READY = "NotReady"

DRIVER_NAMESPACE = "fakegpu"
"""Where the ComputeDomainCliques and daemon templates live by default: the namespace deploy/ installs fakegpu
in (NVIDIA's chart uses its release namespace, e.g. ``nvidia-dra-driver-gpu``). The controller and the node
plugins must agree on it."""
