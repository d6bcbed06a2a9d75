"""Where the daemons' admin sockets conventionally are: one path each, used by everyone who names them.

The overlays pass them as ``--admin-socket``, ``fakegpu ctl`` dials them by default, and ``fakegpu cleanup``
removes them once no process serves them; all under ``/var/run/fakegpu``, the hostPath both DaemonSets mount.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

DEFAULT_PLUGIN_SOCKET: Final = Path("/var/run/fakegpu/plugin.sock")
"""``fakegpu plugin``'s."""
DEFAULT_DRA_SOCKET: Final = Path("/var/run/fakegpu/dra.sock")
"""``fakegpu dra``'s."""
