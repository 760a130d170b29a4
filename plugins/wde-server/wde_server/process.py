"""What ``wde serve`` sets up in its own process: glibc's allocator settings, periodic heap trimming, and
uvicorn's HTTP protocol with a header timeout."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("uvicorn.error")

# glibc's mallopt parameter for MALLOC_ARENA_MAX. Measured with 4 rounds of 130 mixed embed/rerank requests (8 at
# a time, MiniLM + a cross-encoder, 2 cores): glibc's defaults 1,638 -> 1,763 MiB at 46 s a round; arenas capped at
# 2 with a fixed 128 KiB mmap threshold 954 -> 1,112 MiB but 60 s a round (every activation mmapped and unmapped);
# arenas capped at 2 plus malloc_trim every 10 s 1,150 -> 1,277 MiB at 46 s a round: what `wde serve` does
M_ARENA_MAX = -8
ALLOCATOR = {"MALLOC_ARENA_MAX": (M_ARENA_MAX, 2)}


def tune_allocator() -> dict[str, int]:
    """Apply ``MALLOC_ARENA_MAX=2`` to this process through glibc's ``mallopt`` (before the engine's threads
    start) unless the environment sets it; the settings applied (empty where the C library is not glibc)."""
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


def malloc_trim() -> bool:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim(0)``); ``False`` where unavailable."""
    try:
        return bool(ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0))
    except (OSError, AttributeError, TypeError):
        return False


async def trim_periodically(seconds: float) -> None:
    """``malloc_trim`` every ``seconds``, off the event loop: fragmented arenas give their free pages back."""
    import asyncio

    while True:
        await asyncio.sleep(seconds)
        await asyncio.to_thread(malloc_trim)


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
