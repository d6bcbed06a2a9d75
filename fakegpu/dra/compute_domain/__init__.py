"""NVIDIA's ComputeDomains, emulated: multi-node NVLink (IMEX) domains for workloads that span nodes of a
clique (``kubernetes-sigs/dra-driver-nvidia-gpu``, ``cmd/compute-domain-*``, driver release 25.12)."""
