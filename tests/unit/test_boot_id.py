"""The node's boot ID (``fakegpu.runtime.boot_id``), as kubernetes-sigs/dra-driver-nvidia-gpu ``pkg/bootid``
(v0.4.0) reads it: trimmed, and an unreadable file reported with NVIDIA's wrapped text."""

from __future__ import annotations

import pytest

from fakegpu.runtime.boot_id import BootIdUnreadable, read_boot_id


def test_the_id_is_trimmed(tmp_path):
    path = tmp_path / "boot_id"
    path.write_text(" 5f1e-77\n")
    assert read_boot_id(path) == "5f1e-77"


def test_a_missing_file_is_reported_as_nvidia_reports_it(tmp_path):
    path = tmp_path / "absent"
    with pytest.raises(BootIdUnreadable) as err:
        read_boot_id(path)
    expected = f"read node boot id: failed to read boot ID from {path}: open {path}: no such file or directory"
    assert str(err.value) == expected
