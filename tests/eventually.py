"""The one polling helper of the test suite: ``fakegpu.runtime.eventually``, under the name tests import.

A test waits for an effect with :func:`eventually` (a timeout that fails loudly, naming what was awaited
and the last value seen), never by sleeping. The implementation lives in the product so that the kubelet
emulator's ``wait_for`` and the pytest fixture poll the same way; this module only re-exports it.
"""

from __future__ import annotations

from fakegpu.runtime.eventually import WaitTimeout, eventually

__all__ = ["WaitTimeout", "eventually"]
