"""What users see around their pods, shared by both faces: Prometheus metrics, the fake DCGM exporter
(``dcgm``), the fake nvidia-smi (``nvidia_smi``) and its files on the host, structured logs.

Depends on ``fakegpu.sharing``, ``fakegpu.runtime`` and ``fakegpu.kubeletapi`` only, never on either face.
"""
