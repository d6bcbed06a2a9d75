"""Which XIDs count, as NVIDIA's two components read their lists.

The device plugin's cases follow NVIDIA/k8s-device-plugin ``internal/rm/health.go`` and its
``health_test.go`` (``TestNewHealthCheckXIDs``, ``TestGetDisabledHealthCheckXids``) at commit 02597b9
(v0.18.0 and later: ``DP_ENABLE_HEALTHCHECKS`` beside ``DP_DISABLE_HEALTHCHECKS``, PR #1443). The DRA
driver's follow kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/device_health.go``
(``xidsToSkip``, ``--additional-xids-to-ignore`` / ``ADDITIONAL_XIDS_TO_IGNORE``) at commit bc3c4d8.
"""

from __future__ import annotations

import pytest

from fakegpu.sharing.health import DEFAULT_IGNORED_XIDS, XidPolicy


def test_default_ignored_xids_are_nvidias_application_errors():
    assert sorted(DEFAULT_IGNORED_XIDS) == [13, 31, 43, 45, 68, 109]
    policy = XidPolicy.from_env({})
    assert [x for x in (13, 31, 43, 45, 48, 68, 79, 94, 109) if policy.is_critical(x)] == [48, 79, 94]


@pytest.mark.parametrize(
    ("env", "critical", "not_critical"),
    [
        # NVIDIA's TestGetDisabledHealthCheckXids: "disabled is all" (555 and the defaults disabled).
        ({"DP_DISABLE_HEALTHCHECKS": "all"}, [], [13, 79, 555]),
        ({"DP_DISABLE_HEALTHCHECKS": "XIDS"}, [], [79]),  # lower-cased, and "xids" means all
        # "enabled is all": every XID counts, the default-ignored ones too.
        ({"DP_ENABLE_HEALTHCHECKS": "all"}, [13, 31, 43, 45, 68, 109, 555], []),
        # "enabled overrides disabled".
        ({"DP_DISABLE_HEALTHCHECKS": "11", "DP_ENABLE_HEALTHCHECKS": "11"}, [11, 555], [13]),
        # The enable list turns a default-ignored XID back on (the reason it was added, PR #1335).
        ({"DP_ENABLE_HEALTHCHECKS": "45"}, [45, 79], [13]),
        ({"DP_DISABLE_HEALTHCHECKS": "79, 94"}, [48], [79, 94]),
        # "all" anywhere in the list makes the list "every XID": the 48 beside it is not kept.
        ({"DP_DISABLE_HEALTHCHECKS": "48,all", "DP_ENABLE_HEALTHCHECKS": ""}, [], [48]),
        # With every XID disabled NVIDIA's IsAllDisabled is true and the checker never starts, so an XID
        # the enable list names does not count either (IsDisabled alone would say it does).
        ({"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "79"}, [], [79, 13]),
        # Enabling everything beats disabling everything.
        ({"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "all"}, [13, 79], []),
        # A literal 0 lands on NVIDIA's "every XID" key.
        ({"DP_DISABLE_HEALTHCHECKS": "0"}, [], [79]),
    ],
)
def test_device_plugin_precedence(env, critical, not_critical):
    policy = XidPolicy.from_env(env)
    assert [x for x in critical if policy.is_critical(x)] == critical
    assert [x for x in not_critical if policy.is_critical(x)] == []


@pytest.mark.parametrize("value", ["not-an-int", "-68", "+68", "68x", "18446744073709551616"])
def test_malformed_entries_are_skipped_with_a_warning(value):
    policy = XidPolicy.from_env({"DP_DISABLE_HEALTHCHECKS": f"{value},79"})
    assert not policy.is_critical(79) and policy.is_critical(48)
    assert policy.warnings == (f"DP_DISABLE_HEALTHCHECKS: ignoring malformed XID {value!r}",)


def test_empty_and_spaced_entries_are_nvidias_test_cases():
    # TestNewHealthCheckXIDs: "", ",", "68  ", "68,", ",68" all parse to {68} or nothing, silently.
    for value in ("", ",", "68  ", "68,", ",68"):
        policy = XidPolicy.from_env({"DP_ENABLE_HEALTHCHECKS": value})
        assert policy.warnings == ()
        assert policy.is_critical(68) == ("68" in value)


def test_dra_driver_non_fatal_xids_are_the_defaults_and_additional_ones():
    policy = XidPolicy.for_dra_driver({"ADDITIONAL_XIDS_TO_IGNORE": "79, bad ,94"})
    assert [x for x in (13, 43, 48, 79, 94, 109) if policy.is_critical(x)] == [48]
    assert policy.warnings == ("ADDITIONAL_XIDS_TO_IGNORE: ignoring malformed XID 'bad'",)
    # The DRA driver has no "all" and reads no DP_* variable.
    assert XidPolicy.for_dra_driver({"ADDITIONAL_XIDS_TO_IGNORE": "all", "DP_DISABLE_HEALTHCHECKS": "79"}).is_critical(
        79
    )
