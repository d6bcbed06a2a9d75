"""The pure core of fakegpu: GPU catalog, MIG geometry, NVIDIA config and the device inventory.

Nothing in this package performs network I/O or imports gRPC or a Kubernetes client, so both faces of
the product (the device plugin and the DRA driver) see byte-for-byte the same inventory.
"""
