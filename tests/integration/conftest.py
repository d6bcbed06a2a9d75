"""Integration tests run the real servers over real Unix sockets in a short temporary directory."""
