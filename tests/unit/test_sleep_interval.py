"""GFD's ``--sleep-interval``: a Go duration or ``infinite``, from the flag, ``GFD_SLEEP_INTERVAL`` or
``flags.gfd.sleepInterval``.

Follows NVIDIA/k8s-device-plugin ``cmd/gpu-feature-discovery/main.go`` (``sleep-interval``, default 60 s,
env ``GFD_SLEEP_INTERVAL``) and ``api/config/v1/duration.go`` (a config number is nanoseconds) @ v0.20.0, with
Go's ``time.ParseDuration`` grammar and error texts.
"""

from __future__ import annotations

import pytest

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.nvidia_config import parse_nvidia_config
from fakegpu.sharing.plugin_config import resolve_plugin_config
from fakegpu.sharing.sleep_interval import go_duration_seconds, sleep_interval_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        (".5s", 0.5),
        ("250ms", 0.25),
        ("1h2m3s4ms", 3723.004),
        ("0", 0.0),
        ("-2s", -2.0),
        ("100us", 1e-4),
        ("7µs", 7e-6),
        ("9223372036854775807ns", 9223372036.854775807),
        ("2562047h47m16.854775807s", 9223372036.854775807),
        ("-9223372036854775808ns", -9223372036.854775808),
        ("0." + "0" * 400 + "1s", 0.0),
    ],
)
def test_go_durations(text, seconds):
    assert go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("60", 'time: missing unit in duration "60"'),
        ("1x", 'time: unknown unit "x" in duration "1x"'),
        ("", 'time: invalid duration ""'),
        ("s", 'time: invalid duration "s"'),
        ("forever", 'time: invalid duration "forever"'),
        ("99999999999h", 'time: invalid duration "99999999999h"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("2562047h47m16.854775808s", 'time: invalid duration "2562047h47m16.854775808s"'),
        ("9" * 400 + "s", f'time: invalid duration "{"9" * 400}s"'),
        ("1" + "0" * 399 + "ns", f'time: invalid duration "1{"0" * 399}ns"'),
    ],
)
def test_go_duration_errors_say_what_go_says(text, message):
    """Go's ``time.ParseDuration`` (golang/go src/time/format.go @ go1.24): overflow past the largest ``time.Duration``
    (2^63 - 1 ns) is ``invalid duration`` too, however many digits."""
    with pytest.raises(ValueError) as error:
        go_duration_seconds(text)
    assert str(error.value) == message


def test_infinite_and_the_default():
    assert sleep_interval_seconds("infinite", "x") is None
    assert resolve_plugin_config(None).sleep_interval == "60s"


@pytest.mark.parametrize(
    ("cli", "env", "file", "expected"),
    [
        ("infinite", {"GFD_SLEEP_INTERVAL": "5m"}, "10s", "infinite"),
        (None, {"GFD_SLEEP_INTERVAL": "5m"}, "10s", "5m"),
        (None, {}, "10s", "10s"),
        (None, {}, 30_000_000_000, "30000000000ns"),
        (None, {}, "infinite", "infinite"),
    ],
)
def test_flag_env_file_precedence(cli, env, file, expected):
    config_file, warnings = parse_nvidia_config({"version": "v1", "flags": {"gfd": {"sleepInterval": file}}}, "c.yaml")
    assert warnings == []
    config = resolve_plugin_config(config_file, file_source="c.yaml", cli={"sleep_interval": cli}, env=env)
    assert config.sleep_interval == expected
    assert sleep_interval_seconds(config.sleep_interval, "x") in (None, 300.0, 10.0, 30.0)


@pytest.mark.parametrize(
    ("cli", "env", "file", "message"),
    [
        ("soon", {}, None, "--sleep-interval: invalid sleep interval 'soon': time: invalid duration"),
        (None, {"GFD_SLEEP_INTERVAL": "60"}, None, "environment variable GFD_SLEEP_INTERVAL: invalid sleep interval"),
        (None, {}, "0s", "c.yaml: flags.gfd.sleepInterval: invalid sleep interval '0s': must be positive"),
    ],
)
def test_a_bad_interval_is_named_where_it_came_from(cli, env, file, message):
    config_file, _ = parse_nvidia_config({"version": "v1", "flags": {"gfd": {"sleepInterval": file}}}, "c.yaml")
    with pytest.raises(SpecError) as error:
        resolve_plugin_config(config_file, file_source="c.yaml", cli={"sleep_interval": cli}, env=env)
    assert message in str(error.value)
