"""The one error of claim preparation: why a claim cannot be prepared, in words for the pod's events."""

from __future__ import annotations


class ClaimError(Exception):
    """The claim cannot be prepared on this node; the message is what the kubelet shows for the pod."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
