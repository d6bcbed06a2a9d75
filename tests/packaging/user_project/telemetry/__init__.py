"""The user's own telemetry package."""
