"""fakegpu: fake NVIDIA GPUs for Kubernetes. This package holds the command-line entry points."""
