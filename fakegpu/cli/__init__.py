"""The ``fakegpu`` command: ``main`` parses the subcommands; each ``*_command`` module holds one."""
