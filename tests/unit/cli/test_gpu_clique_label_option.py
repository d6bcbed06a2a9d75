"""``fakegpu dra --gpu-clique-label-enabled`` and ``GPU_CLIQUE_LABEL_ENABLED``, read as NVIDIA's compute-domain
plugin reads them (kubernetes-sigs/dra-driver-nvidia-gpu cmd/compute-domain-kubelet-plugin/main.go @ 89aa5bb:
a urfave/cli bool flag with that env var, parsed by Go's strconv.ParseBool)."""

from __future__ import annotations

import argparse

import pytest

from fakegpu.cli.daemon_runs import gpu_clique_label
from fakegpu.cli.main import full_parser, main
from fakegpu.sharing.errors import SpecError


def args(*flags: str) -> argparse.Namespace:
    return full_parser().parse_args(["dra", "--compute-domains", *flags])


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ((), {}, False),
        ((), {"GPU_CLIQUE_LABEL_ENABLED": "T"}, True),
        ((), {"GPU_CLIQUE_LABEL_ENABLED": "TRUE"}, True),
        ((), {"GPU_CLIQUE_LABEL_ENABLED": "0"}, False),
        (("--gpu-clique-label-enabled",), {"GPU_CLIQUE_LABEL_ENABLED": "false"}, True),
    ],
)
def test_the_flag_wins_and_the_env_is_a_go_bool(flags, env, expected):
    assert gpu_clique_label(args(*flags), env) is expected


def test_a_value_go_does_not_take_is_an_error_not_false():
    with pytest.raises(SpecError, match=r"GPU_CLIQUE_LABEL_ENABLED.*'yes'"):
        gpu_clique_label(args(), {"GPU_CLIQUE_LABEL_ENABLED": "yes"})


def test_the_command_refuses_it_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("GPU_CLIQUE_LABEL_ENABLED", "yes")
    assert main(["dra", "--node-name", "n1", "--compute-domains"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GPU_CLIQUE_LABEL_ENABLED" in err[0]
