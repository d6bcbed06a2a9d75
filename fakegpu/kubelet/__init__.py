"""The kubelet emulator: the kubelet's side of the device plugin protocol (device manager)."""
