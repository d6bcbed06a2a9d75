"""The kubelet's gRPC APIs, generated from ``protos/`` (never edit: change the ``.proto`` and run
``python -m fakegpu.kubeletapi.generate``, which CI runs with ``--check``): ``deviceplugin/``,
``pluginregistration/``, ``dra/``, ``drahealth/``, ``podresources/``.
"""
