"""The ``fakegpu`` command: ``main`` holds the table of subcommands and parses them.

A subcommand with a parser of its own lives in its ``*_command`` module; the daemons (``fakegpu demo``,
``fakegpu plugin``, ``fakegpu dra``) run from ``daemon_runs`` with their options in ``daemon_options``, and
the commands that print a node's objects (``fakegpu slices``, ``fakegpu devices``, ...) from ``offline_runs``
with their options in ``offline_options``.
"""
