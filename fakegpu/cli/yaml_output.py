"""The one YAML writer of the CLI: strings that a YAML 1.2 reader would take for something else are quoted.

PyYAML resolves plain scalars by YAML 1.1, where ``08`` is no number (not octal), so it writes the
label value ``nvidia.com/cuda.driver.rev: "08"`` as ``08``; a YAML 1.2 reader (go-yaml v3 in
``kubectl kustomize``, and so every manifest pipeline) then reads the integer 8. Here a string is
written double-quoted when either YAML version would read it as a number, bool or null.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import yaml

_YAML12_NOT_A_STRING = re.compile(
    r"""^(?:
        [-+]?[0-9]+                                     # int (leading zeros too: 08)
      | 0o[0-7]+ | 0x[0-9a-fA-F]+                       # octal, hex
      | [-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?   # float
      | [-+]?\.(?:inf|Inf|INF) | \.(?:nan|NaN|NAN)
      | true|True|TRUE|false|False|FALSE
      | null|Null|NULL|~
      | [-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?   # YAML 1.1 base 60
      | [-+]?[0-9][0-9_]*(?:\.[0-9_]*)?                  # YAML 1.1 numbers with underscores
      | y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF
    )$""",
    re.VERBOSE,
)


def looks_like_another_type(text: str) -> bool:
    """True when a plain ``text`` would be read back as a number, bool or null by YAML 1.1 or 1.2."""
    return text == "" or _YAML12_NOT_A_STRING.match(text) is not None


class CliDumper(yaml.SafeDumper):
    """SafeDumper that double-quotes strings :func:`looks_like_another_type` flags."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if looks_like_another_type(value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    return dumper.represent_str(value)


CliDumper.add_representer(str, _represent_str)


def dump_yaml(document: Any, *, sort_keys: bool = False) -> str:
    """One YAML document (block style, key order kept unless ``sort_keys``)."""
    return yaml.dump(document, Dumper=CliDumper, sort_keys=sort_keys, allow_unicode=True)


def dump_yaml_documents(documents: Iterable[Any]) -> str:
    """Several documents, each starting with ``---`` (what ``kubectl apply -f -`` reads)."""
    return yaml.dump_all(list(documents), Dumper=CliDumper, sort_keys=False, explicit_start=True, allow_unicode=True)
