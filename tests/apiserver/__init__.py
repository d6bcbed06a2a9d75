"""In-process fake Kubernetes API server (resource.k8s.io + nodes) for DRA driver tests."""

from .fake_apiserver import ApiFailure, FakeApiServer, Rejection, RequestRecord
from .serving import serving

__all__ = ["ApiFailure", "FakeApiServer", "Rejection", "RequestRecord", "serving"]
