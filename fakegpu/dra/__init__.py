"""The DRA face of fakegpu: ResourceSlices and the kubelet DRA plugin."""
