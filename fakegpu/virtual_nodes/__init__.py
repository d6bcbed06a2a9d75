"""``fakegpu virtual-nodes``: many KWOK nodes with fake GPUs, published from one process.

Each virtual node is a Node object that KWOK (https://kwok.sigs.k8s.io) keeps "Ready" without a kubelet,
carrying what a real GPU node would show the scheduler: the device plugin resources in capacity and
allocatable, GPU Feature Discovery labels, and ResourceSlices owned by the Node. A real kube-scheduler can
then be rehearsed against thousands of GPU nodes from a laptop.

Modules, one concept each: ``names`` (node names), ``pools`` (which nodes with which GPUs),
``pool_rules`` (rules across pools: a rack layout's single pool, dynamic MIG), ``node_manifest`` (the Node
object and how to bring an existing one in line), ``slice_template`` (a pool's ResourceSlices built once,
each node's derived from them), ``extended_classes`` (the DeviceClasses a ``dra-extended`` pool needs),
``cost_estimate`` (what a plan adds to the API server and etcd, before it is written), ``api`` (counted API
calls, and the server's version), ``controller`` (bring up, adopt, delete),
``watcher`` (keep them as planned), ``imex_daemons`` (with ``--watch``, the nodes' IMEX daemons: node
labels and ComputeDomainClique entries), ``imex_claims`` (the compute-domain claims a node would prepare),
``node_faults`` (what a node's recorded GPU faults change), ``fleet_faults`` (faults across the fleet: targets,
schedule, writing them) and ``report`` (what happened). The command line is
``fakegpu.cli.virtual_nodes_command``.
"""
