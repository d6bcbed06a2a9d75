"""What users see around their pods, shared by both faces: Prometheus metrics, the fake DCGM exporter,
structured logs. Depends on ``sharing/`` and ``kubeletapi/`` only, never on ``fakeplugin/`` or ``dra/``.
"""
