"""The user's own DRA driver: its name would have collided with a top-level ``dra`` from fakegpu."""

DRIVER_NAME = "gpu.example.com"
