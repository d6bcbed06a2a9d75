"""The kubelet's check that a device plugin's resource name is an extended resource name."""

from __future__ import annotations

from fakegpu.sharing.label_syntax import NAME_PART, is_dns1123_subdomain


def is_extended_resource_name(name: str) -> bool:
    """Domain-prefixed, not in the ``kubernetes.io`` namespace, not a quota ``requests.`` name, and a
    valid qualified name (prefix a DNS subdomain of at most 253 characters, name at most 63)."""
    if "/" not in name or name.startswith("requests."):
        return False
    prefix, _, short = name.partition("/")
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return False
    if not prefix or not is_dns1123_subdomain(prefix):
        return False
    if "/" in short:
        return False
    return 0 < len(short) <= 63 and NAME_PART.fullmatch(short) is not None
