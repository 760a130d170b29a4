"""What ``wde serve`` sets up in its own process: glibc's allocator settings and uvicorn's HTTP protocol
with a header timeout."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("uvicorn.error")

# glibc mallopt parameters: with one arena per thread and a dynamic mmap threshold, the server's RSS grew from
# 0.7 to 4.4 GB under mixed load (fragmentation, not a leak); with these it levels off
M_ARENA_MAX, M_MMAP_THRESHOLD = -8, -3
ALLOCATOR = {"MALLOC_ARENA_MAX": (M_ARENA_MAX, 2), "MALLOC_MMAP_THRESHOLD_": (M_MMAP_THRESHOLD, 131072)}


def tune_allocator() -> dict[str, int]:
    """Apply ``MALLOC_ARENA_MAX=2`` and ``MALLOC_MMAP_THRESHOLD_=131072`` to this process through glibc's
    ``mallopt`` (before the engine's threads start), leaving alone any the environment already sets; the
    settings applied (empty where the C library is not glibc)."""
    libc_name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(libc_name).mallopt
    except (OSError, AttributeError, TypeError):
        return {}
    applied = {}
    for variable, (parameter, value) in ALLOCATOR.items():
        if variable not in os.environ and mallopt(parameter, value) == 1:
            applied[variable] = value
    return applied


def protocol_with_header_timeout(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request headers are not complete ``seconds``
    after it opened or after its previous response (a slow-headers client holds no socket for long)."""

    class HeaderTimeoutProtocol(H11Protocol):
        """H11Protocol with a header timeout."""

        header_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.arm_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.arm_header_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE and self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None

        def arm_header_timer(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
            self.header_timer = self.loop.call_later(seconds, self.headers_late)

        def headers_late(self) -> None:
            self.header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                log.info("wde: closed a connection whose request headers took over %g s (--header-timeout)", seconds)
                self.transport.close()

    return HeaderTimeoutProtocol
