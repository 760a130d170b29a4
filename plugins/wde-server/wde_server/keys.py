"""API keys: ``--api-key`` (one key) and ``--key-file`` (named keys, each with its own rate and token limits).

A key file is JSON: ``{"keys": [{"name": "search", "key": "...", "requests_per_minute": 600,
"tokens_per_minute": 200000}]}``; both limits are optional. Limits are token buckets refilled
continuously: a key may burst up to a minute's allowance, then is held to its rate (429 with
``Retry-After``). Metrics and the scheduler's fairness use the key's name, never the key itself.
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

LIMITS = ("requests_per_minute", "tokens_per_minute")


class Bucket:
    """A token bucket holding up to ``per_minute``, refilled at ``per_minute / 60`` a second (thread-safe)."""

    def __init__(self, per_minute: int) -> None:
        self.capacity, self.rate = float(per_minute), per_minute / 60.0
        self.level, self.stamp = float(per_minute), time.monotonic()
        self.lock = threading.Lock()

    def take(self, amount: float) -> float:
        """Take ``amount`` and return 0, or take nothing and return the seconds until it would be there."""
        with self.lock:
            now = time.monotonic()
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now
            if amount <= self.level:
                self.level -= amount
                return 0.0
            return (amount - self.level) / self.rate


@dataclass
class ApiKey:
    """One client key: its name (for metrics and fairness) and its optional per-minute limits."""

    name: str
    key: str
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    buckets: dict[str, Bucket] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.buckets = {limit: Bucket(getattr(self, limit)) for limit in LIMITS if getattr(self, limit)}

    def wait(self, limit: str, amount: float) -> float:
        """Seconds until ``amount`` of ``limit`` is allowed (0: allowed, and taken now)."""
        bucket = self.buckets.get(limit)
        return 0.0 if bucket is None else bucket.take(amount)


class KeyRing:
    """The keys a server accepts, matched in constant time."""

    def __init__(self, keys: list[ApiKey]) -> None:
        self.keys = keys

    @classmethod
    def from_options(cls, api_key: str | None, key_file: str | None) -> "KeyRing | None":
        """The ring for ``--api-key`` (named ``default``) and ``--key-file``; ``None`` when neither is given."""
        keys = [ApiKey("default", api_key)] if api_key else []
        keys += read_key_file(key_file) if key_file else []
        if len({k.name for k in keys}) != len(keys) or len({k.key for k in keys}) != len(keys):
            raise ValueError("key names and keys must be unique (--api-key is named 'default')")
        return cls(keys) if keys else None

    def match(self, authorization: bytes) -> ApiKey | None:
        """The key an ``Authorization: Bearer KEY`` header carries, or ``None``."""
        found = None
        for key in self.keys:  # compare with every key: the time taken does not tell which one matched
            if secrets.compare_digest(authorization, b"Bearer " + key.key.encode()):
                found = key
        return found


def read_key_file(path: str | Path) -> list[ApiKey]:
    """The keys of a ``--key-file``, checked: a clear ``ValueError`` naming the entry and field at fault."""
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))["keys"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--key-file {path}: expected JSON {{\"keys\": [{{\"name\", \"key\", ...}}]}} ({exc})") from None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"--key-file {path}: 'keys' must be a non-empty list")
    return [read_entry(path, i, entry) for i, entry in enumerate(entries)]


def read_entry(path, i: int, entry) -> ApiKey:
    """One key-file entry as an :class:`ApiKey`."""
    where = f"--key-file {path}: keys[{i}]"
    if not isinstance(entry, dict) or set(entry) - {"name", "key", *LIMITS}:
        raise ValueError(f"{where}: expected an object with name, key, {', '.join(LIMITS)}")
    for name in ("name", "key"):
        if not isinstance(entry.get(name), str) or not entry[name].strip():
            raise ValueError(f"{where}.{name}: expected a non-empty string")
    for limit in LIMITS:
        value = entry.get(limit)
        if value is not None and (type(value) is not int or value < 1):
            raise ValueError(f"{where}.{limit}: expected a positive integer, got {value!r}")
    return ApiKey(**entry)


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
