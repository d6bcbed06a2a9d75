"""The user's own GPU-sharing policy package."""


def fair_share(gpus: int, tenants: int) -> int:
    return gpus // tenants
