"""What every fakegpu daemon on a node shares, below both faces: where the kubelet keeps its sockets,
gRPC servers on Unix sockets, plugin registration, change streams, owner-only directories, atomic files,
bounded shutdown and the one polling helper (``eventually``).
"""
