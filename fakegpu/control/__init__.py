"""The admin plane: each daemon's owner-only admin socket, the ops both faces share on it, and the client
``fakegpu ctl`` and live scenarios use.

- ``protocol``: newline-delimited JSON requests and answers, size limits, op field checking, ``AdminError``.
- ``server``: ``AdminServer``, the owner-only Unix socket server (0600 file, peer UID check).
- ``client``: ``admin_request``/``admin_call``, what ``fakegpu ctl`` and the live scenario runner send with.
- ``op_table``: ``bind_ops``, a face's op functions (its target first, then the request's fields) as served.
- ``operations``: the ops as one table: each op's fields as ``fakegpu ctl`` takes them and its answer's line.
- ``status_text``: the status answer of either daemon as ``fakegpu ctl status`` prints it.
- ``pods_text``: the kubelet emulator's pods as ``fakegpu ctl pods`` prints them.
- ``health_ops``: the health, xid, off-bus, gpu-lost and unmonitored ops and the GPUs' health, on the live
  inventory.
- ``fault_ops``: the fault and clear-faults ops checked against the face's ``FaultableRpcs``, and fault status.
- ``gpu_fault_ops``: the gpu-fault and recover ops (every GPU fault kind, now or after N calls), the XID classes and
  the faulted GPUs for status.
- ``injected_faults``: a planned fault applied inside a gRPC handler.

Each face (``fakegpu.fakeplugin.admin_ops``, ``fakegpu.dra.admin_ops``) adds its own ops, module-level
functions over a small Protocol of what they act on (as the kubelet emulator's ``fakegpu.kubelet.admin_ops``
does), and exports the RPCs it can fault; the fault plan itself is state in ``fakegpu.sharing.faults``.
"""
