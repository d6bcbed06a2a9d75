"""Scripted scenarios: a YAML timeline run against the kubelet emulator and fakegpu's real device plugins.

``load_scenario`` validates a file (``model``), ``run_files``/``run_scenario`` run it (``runner``), and
``expectations`` holds the checks of an ``expect:`` step; ``live`` runs the inject steps against a live
daemon's admin socket instead (``run_files(..., socket=PATH)``). The step vocabulary is documented in
``scenarios/README.md``.
"""

from fakegpu.testing.scenario.model import Scenario, load_scenario
from fakegpu.testing.scenario.output import EXIT_BAD_FILE, EXIT_FAIL, EXIT_PASS
from fakegpu.testing.scenario.runner import run_files, run_scenario

__all__ = ["EXIT_BAD_FILE", "EXIT_FAIL", "EXIT_PASS", "Scenario", "load_scenario", "run_files", "run_scenario"]
