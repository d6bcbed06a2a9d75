"""Python modules generated from ``protos/`` (kubelet device plugin, plugin registration, DRA).

Never edit the generated files: change the ``.proto`` and run ``python -m kubeletapi.generate``.
CI runs ``python -m kubeletapi.generate --check`` and fails when the checked-in output is stale.
"""
