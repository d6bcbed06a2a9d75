"""``nvidia-smi mig -lgip``, ``-lgi`` and ``-lci``, byte for byte against real readings.

Readings quoted (the real tool; NVIDIA ships no source for it):
- H100 80GB HBM3, driver 580.173.02, captured unmodified in starkdrift/prickle-exporter
  ``internal/collector/gpu/testdata/h100-default-20260729/nvidia/mig-*.txt`` (MIG off) and
  ``.../h100-mig-mixed-20260729/nvidia/mig-*.txt`` (1g.10gb at slot 6, 3g.40gb at 0 with a ``1c`` compute
  instance, 1g.10gb+me at 4);
- ``-lgip`` on 4x H100 SXM5 before driver 580 (``stackhpc/ansible-slurm-appliance/docs/mig.md``);
- ``-lgi`` on H100 80GB before driver 580 (NVIDIA/DCGM#138);
- ``No GPU instances found: Not Found`` (``-lgi`` with MIG on and no instance): what nvidia-smi prints before
  NVML's error string for ``NVML_ERROR_NOT_FOUND`` (``nvmlErrorString``, NVIDIA's NVML API Reference Guide);
- exit status 6 when nothing is found (``mig --list-gpu-instance-profiles`` without MIG): the nvidia-smi(1)
  manual page, RETURN VALUE, "6 - A query to find an object was unsuccessful".
"""

from __future__ import annotations

from typing import Any

from fakegpu.sharing.node import build_node
from fakegpu.sharing.node_spec import parse_node_spec
from fakegpu.telemetry.nvidia_smi.devices import SmiNode, from_node
from tests.unit.nvidia_smi.helpers import mixed, node, out, smi, smi_node

LGIP_580_CAPTURE_MIXED = """\
+-------------------------------------------------------------------------------+
| GPU instance profiles:                                                        |
| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                                Free/Total   GiB              CE    JPEG  OFA  |
|===============================================================================|
|   0  MIG 1g.10gb         19     1/7        9.75       No     16     1     0   |
|                                                               1     1     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.10gb+me      20     0/1        9.75       No     16     1     0   |
|                                                               1     1     1   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.20gb         15     0/4        19.62      No     26     1     0   |
|                                                               1     1     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 2g.20gb         14     0/3        19.62      No     32     2     0   |
|                                                               2     2     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 3g.40gb          9     0/2        39.50      No     60     3     0   |
|                                                               3     3     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 4g.40gb          5     0/1        39.50      No     64     4     0   |
|                                                               4     4     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 7g.80gb          0     0/1        79.25      No     132    7     0   |
|                                                               8     7     1   |
+-------------------------------------------------------------------------------+
"""
LGI_580_CAPTURE_MIXED = """\
+---------------------------------------------------------+
| GPU instances:                                          |
| GPU   Name               Profile  Instance   Placement  |
|                            ID       ID       Start:Size |
|=========================================================|
|   0  MIG 1g.10gb           19       13          6:1     |
+---------------------------------------------------------+
|   0  MIG 3g.40gb            9        1          0:4     |
+---------------------------------------------------------+
|   0  MIG 1g.10gb+me        20       11          4:1     |
+---------------------------------------------------------+
"""
LCI_580_CAPTURE_MIXED = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0     13       MIG 1g.10gb          0         0          0:1     |
+--------------------------------------------------------------------+
|   0      1       MIG 1c.3g.40gb       0         0          2:1     |
+--------------------------------------------------------------------+
|   0     11       MIG 1g.10gb          0         0          0:1     |
+--------------------------------------------------------------------+
"""
LGIP_SLURM_APPLIANCE_GPU0 = """\
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.10gb       19     7/7        9.75       No     16     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb+me    20     1/1        9.75       No     16     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.20gb       15     4/4        19.62      No     26     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 2g.20gb       14     3/3        19.62      No     32     2     0   |
|                                                             2     2     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 3g.40gb        9     2/2        39.50      No     60     3     0   |
|                                                             3     3     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 4g.40gb        5     1/1        39.50      No     64     4     0   |
|                                                             4     4     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 7g.80gb        0     1/1        79.25      No     132    7     0   |
|                                                             8     7     1   |
+-----------------------------------------------------------------------------+
"""
LGI_DCGM_138_GPU0 = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 1g.10gb         19        9          2:1     |
+-------------------------------------------------------+
|   0  MIG 1g.10gb         19       10          3:1     |
+-------------------------------------------------------+
|   0  MIG 2g.20gb         14        3          0:2     |
+-------------------------------------------------------+
|   0  MIG 3g.40gb          9        2          4:4     |
+-------------------------------------------------------+
"""
NO_MIG = "No MIG-enabled devices found.\n"


def _node(driver: str, *gpus: dict[str, Any]) -> SmiNode:
    spec = parse_node_spec({"driverVersion": driver, "gpus": list(gpus)}, "test")
    return from_node(build_node(spec, "node-a", source="test"))


def _h100(driver: str, *placements: tuple[str, int]) -> SmiNode:
    devices = [{"profile": p, "start": s} for p, s in placements]
    return _node(driver, {"model": "h100-80gb", "migEnabled": True, "migDevices": devices})


CAPTURED = (("1g.10gb", 6), ("3g.40gb", 0), ("1g.10gb+me", 4))
"""The mixed capture's GPU instances (its GI IDs 13, 1 and 11 are the ones fakegpu derives)."""


def test_driver_580_lists_the_captured_instances_as_the_capture():
    smi_580 = _h100("580.173.02", *CAPTURED)
    assert out(smi_580, "mig", "-lgip") == LGIP_580_CAPTURE_MIXED
    assert out(smi_580, "mig", "--list-gpu-instance-profiles") == LGIP_580_CAPTURE_MIXED
    assert out(smi_580, "mig", "-lgi") == LGI_580_CAPTURE_MIXED
    assert out(smi_580, "mig", "--list-gpu-instances") == LGI_580_CAPTURE_MIXED


def test_compute_instances_as_the_capture_but_the_subdivided_one():
    """fakegpu creates one full compute instance per GPU instance (as mig-parted does); the capture's GI 1
    was split into a ``1c`` compute instance by hand, so that one row differs: full size, profile 2, 0:3."""
    expected = LCI_580_CAPTURE_MIXED.replace(
        "|   0      1       MIG 1c.3g.40gb       0         0          2:1     |",
        "|   0      1       MIG 3g.40gb          2         0          0:3     |",
    )
    assert out(_h100("580.173.02", *CAPTURED), "mig", "-lci") == expected
    assert out(_h100("570.172.08", *CAPTURED), "mig", "--list-compute-instances") == expected


def test_before_580_the_name_column_is_narrower():
    """Driver 570 (fakegpu's default): the stackhpc ``-lgip`` of a MIG-capable H100 with MIG off, whole,
    for every GPU; the DCGM#138 ``-lgi`` of GPU 0."""
    four = smi_node("4xh100-80gb")
    rows = LGIP_SLURM_APPLIANCE_GPU0.split("\n")[5:-1]
    expected = LGIP_SLURM_APPLIANCE_GPU0 + "".join(
        line.replace("|   0  MIG", f"|   {gpu}  MIG") + "\n" for gpu in (1, 2, 3) for line in rows
    )
    assert out(four, "mig", "-lgip") == expected
    dcgm = _h100("570.172.08", ("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4))
    assert out(dcgm, "mig", "-lgi") == LGI_DCGM_138_GPU0


def test_mig_off_or_not_capable():
    """prickle-exporter's MIG-off H100: ``-lgi``/``-lci`` say so; ``-lgip`` still lists the profiles (the
    capture with every instance free is the stackhpc table at driver 580's width). A T4 has none at all."""
    off = _node("580.173.02", {"model": "h100-80gb"})
    assert out(off, "mig", "-lgip") == LGIP_580_CAPTURE_MIXED.replace("1/7", "7/7").replace("0/1  ", "1/1  ").replace(
        "0/4", "4/4"
    ).replace("0/3", "3/3").replace("0/2", "2/2")
    for listing in ("-lgi", "-lci"):
        assert (smi(off, "mig", listing).stdout, smi(off, "mig", listing).status) == (NO_MIG, 6)
    t4 = smi_node("2xt4")
    for listing in ("-lgip", "-lgi", "-lci"):
        assert (smi(t4, "mig", listing).stdout, smi(t4, "mig", listing).status) == (NO_MIG, 6)


def test_mig_on_without_instances():
    empty = _node("570.172.08", {"model": "a30", "migEnabled": True, "migDevices": {}})
    lgi, lci = smi(empty, "mig", "-lgi"), smi(empty, "mig", "-lci")
    assert (lgi.stdout, lgi.status) == ("No GPU instances found: Not Found\n", 6)
    assert (lci.stdout, lci.status) == ("No compute instances found: Not Found\n", 6)


def test_free_counts_follow_the_instances_of_each_gpu():
    """all-1g.10gb: every slot 0-6 taken, only slot 7 is free and no profile fits there."""
    full = smi_node("2xh100-80gb", "all-1g.10gb")
    text = out(full, "mig", "-lgip")
    assert text.count("0/7 ") == 2 and text.count("0/1 ") == 6 and text.count("0/4 ") == 2
    assert [line[:5] for line in text.splitlines() if "MIG 1g.10gb " in line] == ["|   0", "|   1"]


def test_a_container_lists_only_its_instances_numbered_as_it_sees_them():
    node_ = mixed()  # GPU 0: 3g.40gb at 0, 2g.20gb at 4, 1g.10gb at 6; GPU 1 whole, MIG off
    one = node_.gpus[0].migs[2]
    text = out(node_, "mig", "-lgi", visible=f"{node_.gpus[1].uuid},{one.uuid}")
    assert text.splitlines()[5:] == [
        "|   0  MIG 1g.10gb         19       13          6:1     |",
        "+-------------------------------------------------------+",
    ]
    assert out(node_, "mig", "-lci", visible="0").count("MIG ") == 3
    assert smi(node_, "mig", "-lgi", visible=node_.gpus[1].uuid).stdout == NO_MIG
    assert out(node_, "mig", "-lgip", visible="1").startswith("+---")
    assert "|   0  MIG 7g.80gb        0     1/1 " in out(node_, "mig", "-lgip", visible="1")


def test_a_dynamic_mig_device_is_an_instance_of_the_container():
    dynamic = from_node(node("1xa100-40gb"), dynamic_mig=True)
    option = dynamic.gpus[0].mig_options[0]
    text = out(dynamic, "mig", "-lgi", visible=option.uuid)
    assert text.splitlines()[5] == f"|   0  MIG {option.profile:<16} 0     {option.gi_id:>4}          0:8     |"
    assert smi(dynamic, "mig", "-lgi").stdout == NO_MIG


def test_mig_selects_gpus_with_i_and_refuses_what_it_does_not_know():
    node_ = mixed()
    assert out(node_, "mig", "-i", "1", "-lgip").count("MIG 1g.10gb ") == 1
    assert out(node_, "mig", "-lgip", "--id=0,1").count("MIG 1g.10gb ") == 2
    assert smi(node_, "mig", "-lgi", "-i", "1").stdout == NO_MIG
    assert smi(node_, "mig", "-lgi", "-i", "7").stdout == "No devices were found\n"
    invalid = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n"
    for argv in (["mig"], ["mig", "-i", "0"], ["mig", "-lgi", "-lci"], ["mig", "-lgip", "-lgi", "-lgip"]):
        assert (smi(node_, *argv).stdout, smi(node_, *argv).status) == (invalid, 2), argv
    for argv in (["mig", "-lgi", "--format=csv,noheader"], ["mig", "-L"], ["-lgi"], ["-L", "mig"]):
        result = smi(node_, *argv)
        assert result.status == 2 and "is not recognized" in result.stdout, argv
    assert smi(node_, "mig", "-lgi", "-i").stdout.startswith("ERROR: Option -i is missing its value.")


# A real `nvidia-smi mig -i 0 -lgip` of an RTX PRO 6000 Blackwell Server Edition with MIG on and no
# instance (a published walkthrough on an 8-GPU host, re-typed here), and its `-lgi` after
# `-cgi 1g.24gb,1g.24gb,1g.24gb,1g.24gb -C`: the board with NVIDIA's suffixed profiles.
LGIP_RTX_PRO_6000 = """\
+-------------------------------------------------------------------------------+
| GPU instance profiles:                                                        |
| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                                Free/Total   GiB              CE    JPEG  OFA  |
|===============================================================================|
|   0  MIG 1g.24gb         14     4/4        23.62      No     46     1     1   |
|                                                               1     1     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.24gb+me      21     1/1        23.62      No     46     1     1   |
|                                                               1     1     1   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.24gb+gfx     47     4/4        23.62      No     46     1     1   |
|                                                               1     1     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.24gb+me.all  65     1/1        23.62      No     46     4     4   |
|                                                               1     4     1   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.24gb-me      67     4/4        23.62      No     46     0     0   |
|                                                               1     0     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 2g.48gb          5     2/2        47.38      No     94     2     2   |
|                                                               2     2     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 2g.48gb+gfx     35     2/2        47.38      No     94     2     2   |
|                                                               2     2     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 2g.48gb+me.all  64     1/1        47.38      No     94     4     4   |
|                                                               2     4     1   |
+-------------------------------------------------------------------------------+
|   0  MIG 2g.48gb-me      66     2/2        47.38      No     94     0     0   |
|                                                               2     0     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 4g.96gb          0     1/1        95.12      No     188    4     4   |
|                                                               4     4     1   |
+-------------------------------------------------------------------------------+
|   0  MIG 4g.96gb+gfx     32     1/1        95.12      No     188    4     4   |
|                                                               4     4     1   |
+-------------------------------------------------------------------------------+
"""
LGI_RTX_PRO_6000_FOUR_1G = """\
+---------------------------------------------------------+
| GPU instances:                                          |
| GPU   Name               Profile  Instance   Placement  |
|                            ID       ID       Start:Size |
|=========================================================|
|   0  MIG 1g.24gb           14        3          0:3     |
+---------------------------------------------------------+
|   0  MIG 1g.24gb           14        4          3:3     |
+---------------------------------------------------------+
|   0  MIG 1g.24gb           14        5          6:3     |
+---------------------------------------------------------+
|   0  MIG 1g.24gb           14        6          9:3     |
+---------------------------------------------------------+
"""


def test_suffixed_profiles_of_an_rtx_pro_6000_as_the_reading():
    """Every suffix NVIDIA lists (``+me``, ``+gfx``, ``+me.all``, ``-me``), its profile ID, engines, GiB and
    the 12-unit placement grid, byte for byte."""
    empty = _node("580.173.02", {"model": "rtx-pro-6000", "migEnabled": True, "migDevices": {}})
    assert out(empty, "mig", "-lgip") == LGIP_RTX_PRO_6000
    four = [{"profile": "1g.24gb", "start": s} for s in (0, 3, 6, 9)]
    full = _node("580.173.02", {"model": "rtx-pro-6000", "migEnabled": True, "migDevices": four})
    assert out(full, "mig", "-lgi") == LGI_RTX_PRO_6000_FOUR_1G
