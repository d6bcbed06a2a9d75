"""``--compute-domain-namespace``: where the virtual nodes' IMEX daemons write their ComputeDomainCliques, the
compute-domain controller's ``--namespace`` (NVIDIA's daemons write them in the driver's namespace,
kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-daemon/cdclique.go`` at commit 3fe9487)."""

from __future__ import annotations

import pytest

from fakegpu.cli.virtual_nodes_command import settings_from_args


def test_the_namespace_defaults_to_the_controllers_and_reaches_the_settings(parse):
    assert settings_from_args(parse()).compute_domain_namespace == "fakegpu"
    settings = settings_from_args(parse("--compute-domain-namespace", "nvidia-dra-driver-gpu"))
    assert settings.compute_domain_namespace == "nvidia-dra-driver-gpu"


def test_a_name_that_is_no_namespace_is_refused_naming_the_flag(parse, capsys):
    with pytest.raises(SystemExit):
        parse("--compute-domain-namespace", "Team_A")
    err = capsys.readouterr().err
    assert "--compute-domain-namespace" in err and "'Team_A' is not a namespace name" in err
