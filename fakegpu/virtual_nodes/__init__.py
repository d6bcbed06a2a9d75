"""``fakegpu virtual-nodes``: many KWOK nodes with fake GPUs, published from one process.

Each virtual node is a Node object that KWOK (https://kwok.sigs.k8s.io) keeps "Ready" without a kubelet,
carrying what a real GPU node would show the scheduler: the device plugin resources in capacity and
allocatable, GPU Feature Discovery labels, and ResourceSlices owned by the Node. A real kube-scheduler can
then be rehearsed against thousands of GPU nodes from a laptop.

Modules, one concept each: ``names`` (node names), ``pools`` (which nodes with which GPUs),
``node_manifest`` (the Node object and how to bring an existing one in line), ``slice_set`` (one node's
ResourceSlices), ``api`` (counted API calls, and the server's version), ``controller`` (bring up, adopt,
delete), ``watcher`` (keep them as planned), ``report`` (what happened) and ``command`` (the CLI).
"""
