"""Server options: limits, timeouts, auth and truncation defaults shared by every route."""

from __future__ import annotations

import os
from dataclasses import dataclass

OPEN_PATHS = ("/health", "/live", "/ready", "/metrics", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc")
POSITIVE_INTS = ("max_client_batch_size", "payload_limit", "image_payload_limit", "max_concurrent_requests",
                 "max_request_tokens", "max_request_pixels", "max_output_floats")
POSITIVE_SECONDS = ("header_timeout", "body_timeout", "graceful_timeout")


@dataclass
class ServerOptions:
    """What ``wde serve`` takes beyond the models: limits, timeouts, auth and defaults (as TEI names them)."""

    max_client_batch_size: int = 2048
    payload_limit: int = 2_000_000
    image_payload_limit: int = 33_554_432  # 32 MiB: requests with images, where a served model reads them
    max_concurrent_requests: int = 512
    max_request_tokens: int = 131_072
    max_request_pixels: int = 200_000_000  # all of a request's images, from their headers, before decoding
    max_output_floats: int = 4_194_304
    request_timeout: float | None = None
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    graceful_timeout: float = 30.0
    api_key: str | None = None
    key_file: str | None = None
    protect_all: bool = False
    auto_truncate: bool = False
    calibration: str | None = None

    def __post_init__(self) -> None:
        if self.api_key is None:
            self.api_key = refuse_empty_key(os.environ.get("WDE_API_KEY"), "WDE_API_KEY")
        else:
            self.api_key = refuse_empty_key(self.api_key, "--api-key")
        for name in POSITIVE_INTS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{flag(name)}={value!r}: expected a positive integer")
        for name in POSITIVE_SECONDS + ("request_timeout",):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or not value > 0):
                raise ValueError(f"{flag(name)}={value!r}: expected a positive number of seconds")

    @property
    def keyed(self) -> bool:
        """Whether requests need a key (``--api-key`` or ``--key-file``)."""
        return self.api_key is not None or self.key_file is not None

    def needs_key(self, path: str) -> bool:
        """Whether ``path`` requires the API key: every route when ``protect_all``, else all but the open ones."""
        if not self.keyed:
            return False
        return self.protect_all or not is_open(path)


def is_open(path: str) -> bool:
    """Whether ``path`` is a service route (health, metrics, docs) rather than an inference route."""
    return any(path == p or path.startswith(p + "/") for p in OPEN_PATHS)


def flag(name: str) -> str:
    """The ``wde serve`` flag of option ``name``."""
    return "--" + name.replace("_", "-")


def refuse_empty_key(key: str | None, source: str) -> str | None:
    """``key`` as given; an empty or blank key is refused, since it would turn authentication off silently."""
    if key is not None and not key.strip():
        raise ValueError(f"{source} is empty: refusing to start without authentication by mistake; give a "
                         "non-empty key, or unset it to serve without one")
    return key
