"""A fake dcgm-exporter: DCGM's metric names and labels, with values that follow the allocations the
kubelet (device plugin) or the DRA driver made. See ``exporter.py``."""
