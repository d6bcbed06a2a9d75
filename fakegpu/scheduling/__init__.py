"""The scheduler's part of DRA: structured-parameters allocation of ResourceClaims on one node."""
