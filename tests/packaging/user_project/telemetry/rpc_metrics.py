"""The module fakegpu's plugin once failed to import when a user's telemetry/ shadowed fakegpu's."""

PREFIX = "example_rpc"
