"""The kubelet device plugin face of fakegpu (device plugin API v1beta1)."""
