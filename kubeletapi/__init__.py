"""The kubelet's gRPC APIs: modules generated from ``protos/`` plus the socket plumbing both faces share.

Generated (never edit; change the ``.proto`` and run ``python -m kubeletapi.generate``, which CI runs
with ``--check``): ``deviceplugin/``, ``pluginregistration/``, ``dra/``, ``drahealth/``.
Hand-written: ``unix_socket`` (socket files), ``socket_server`` (a gRPC server on one socket),
``plugin_registration`` (registering through ``plugins_registry/``). The device plugin and the DRA
driver both use these, so neither needs the other.
"""
