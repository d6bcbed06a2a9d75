"""The kubelet's check that a device plugin's resource name is an extended resource name."""

from __future__ import annotations

import re

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_extended_resource_name(name: str) -> bool:
    """Domain-prefixed, not in the ``kubernetes.io`` namespace, not a quota ``requests.`` name, and a
    valid qualified name (prefix a DNS subdomain of at most 253 characters, name at most 63)."""
    if "/" not in name or name.startswith("requests."):
        return False
    prefix, _, short = name.partition("/")
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return False
    if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
        return False
    if "/" in short:
        return False
    return 0 < len(short) <= 63 and _NAME.match(short) is not None
