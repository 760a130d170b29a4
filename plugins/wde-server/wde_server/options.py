"""Server options: limits, auth and truncation defaults shared by every route."""

from __future__ import annotations

import os
from dataclasses import dataclass

OPEN_PATHS = ("/health", "/metrics", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc")


@dataclass
class ServerOptions:
    """What ``wde serve`` takes beyond the models: limits, auth and defaults (as TEI names them)."""

    max_client_batch_size: int = 2048
    payload_limit: int = 2_000_000
    max_concurrent_requests: int = 512
    api_key: str | None = None
    protect_all: bool = False
    auto_truncate: bool = False
    calibration: str | None = None

    def __post_init__(self) -> None:
        if self.api_key is None:
            self.api_key = os.environ.get("WDE_API_KEY") or None
        for name in ("max_client_batch_size", "payload_limit", "max_concurrent_requests"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name.replace('_', '-')}={value!r}: expected a positive integer")

    def needs_key(self, path: str) -> bool:
        """Whether ``path`` requires the API key: every route when ``protect_all``, else all but the open ones."""
        if self.api_key is None:
            return False
        return self.protect_all or not any(path == p or path.startswith(p + "/") for p in OPEN_PATHS)
