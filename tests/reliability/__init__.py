"""Reliability suites (issue 8): soak, chaos, load, fuzz, bad input and security checks.

Each runs a short profile in CI and a long one with ``pytest --soak tests/reliability``.
"""
