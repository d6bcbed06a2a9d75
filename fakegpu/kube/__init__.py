"""API-server plumbing shared by the device plugin, the DRA driver and the virtual-node controller.

Depends only on ``fakegpu.sharing``, lightkube (with its httpx2), msgspec and PyYAML, so both faces may use
it without importing each other.
"""
