"""fakegpu: fake NVIDIA GPUs for Kubernetes, every part under this one import root.

Subpackages: ``sharing`` (the pure core), ``fakeplugin`` and ``dra`` (the two faces), ``kubelet`` (the
kubelet emulator), ``control`` (the admin plane), ``kube`` (API-server plumbing), ``runtime`` (what a
daemon on a node shares: sockets, registration, host files), ``telemetry`` (metrics, DCGM, nvidia-smi,
logs), ``testing`` (pytest plugin, scenarios), ``virtual_nodes`` and ``cli``. Importing ``fakegpu``
itself stays cheap: the pytest plugin loads it in every test run of every project that installs it.
"""
