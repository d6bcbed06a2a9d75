"""The ``virtual-nodes`` subcommand's flags, as the lead wires them into ``fakegpu``."""

from __future__ import annotations

import pytest

from fakegpu.virtual_nodes.command import run_virtual_nodes, settings_from_args
from sharing.errors import SpecError


def test_defaults(parse):
    args = parse()
    assert args.command == "virtual-nodes"
    assert (args.count, args.pool, args.name_prefix, args.concurrency) == (None, [], "fakegpu-virtual-", 16)
    assert (args.watch, args.delete, args.server_version, args.kubeconfig) == (False, False, None, None)
    settings = settings_from_args(args)
    assert settings.shape.resources() == {"cpu": "32", "memory": "256Gi", "pods": "110"}
    assert (settings.driver, settings.mig_mode, settings.api_version) == ("gpu.nvidia.com", "static", None)


def test_inventory_slice_and_version_options_are_there(parse):
    args = parse(
        "--gpus", "4xa100-40gb", "--mig-layout", "all-1g.5gb", "--mig-strategy", "mixed", "--mig-mode", "dynamic",
        "--driver-name", "gpu.example.com", "--server-version", "1.35", "--resource-api-version",
        "resource.k8s.io/v1beta2", "--pool", "a.yaml=3", "--pool", "b.yaml=1",
    )  # fmt: skip
    assert args.gpus == ["4xa100-40gb"] and args.mig_strategy == "mixed" and args.pool == ["a.yaml=3", "b.yaml=1"]
    settings = settings_from_args(args)
    assert (settings.mig_mode, settings.driver, settings.server_minor) == ("dynamic", "gpu.example.com", 35)
    assert settings.api_version == "resource.k8s.io/v1beta2"


def test_watch_and_delete_exclude_each_other(parse, capsys):
    with pytest.raises(SystemExit):
        parse("--watch", "--delete")
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--concurrency", "0"], "--concurrency"),
        (["--resync-interval", "0"], "--resync-interval"),
        (["--driver-name", "Not_A_DNS_Name"], "--driver-name"),
    ],
)
def test_bad_values_name_their_flag(parse, flags, named):
    with pytest.raises(SpecError) as info:
        settings_from_args(parse(*flags))
    assert info.value.source == named


async def test_a_missing_or_broken_kubeconfig_names_the_flag_or_the_file(parse, tmp_path):
    with pytest.raises(SpecError, match=r"^--kubeconfig: Configuration file .*missing\.yaml not found"):
        await run_virtual_nodes(parse("--kubeconfig", str(tmp_path / "missing.yaml")))
    broken = tmp_path / "broken.yaml"
    broken.write_text("just a string\n")
    with pytest.raises(SpecError, match="not a usable kubeconfig"):
        await run_virtual_nodes(parse("--kubeconfig", str(broken)))
