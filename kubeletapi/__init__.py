"""The kubelet's gRPC APIs: modules generated from ``protos/`` plus the socket plumbing both faces share.

Generated (never edit; change the ``.proto`` and run ``python -m kubeletapi.generate``, which CI runs
with ``--check``): ``deviceplugin/``, ``pluginregistration/``, ``dra/``, ``drahealth/``.
Hand-written, shared by the device plugin and the DRA driver so neither needs the other:
``kubelet_paths`` (where the kubelet keeps its sockets), ``unix_socket`` (socket files),
``socket_server`` (a gRPC server on one socket), ``plugin_registration`` (registering through
``plugins_registry/``), ``change_stream`` (pushing state changes to watch RPCs), ``atomic_files``,
``background_tasks``, ``injected_faults`` (scripted RPC faults) and ``admin_socket`` (the daemons'
owner-only admin socket for ``fakegpu ctl``).
"""
