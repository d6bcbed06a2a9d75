"""The admin plane: each daemon's owner-only admin socket, the faults it can inject into RPCs, and the
client ``fakegpu ctl`` and live scenarios use.
"""
