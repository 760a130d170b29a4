"""Prometheus metrics, labelled by model: requests, failures, queue, batches and durations per phase."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
TOKENS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


class Metrics:
    """The server's metrics in their own registry (several apps in one process do not collide)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("wde_requests", "HTTP requests by route and status", ["model", "route", "status"],
                                registry=r)
        self.failures = Counter("wde_request_failures", "Failed requests by error type", ["model", "error_type"],
                                registry=r)
        self.cancelled = Counter("wde_requests_cancelled", "Requests whose work was dropped: client gone or "
                                 "deadline passed", ["model", "reason"], registry=r)
        self.key_requests = Counter("wde_key_requests", "Requests by API key name and status", ["key_name", "status"],
                                    registry=r)
        self.key_tokens = Counter("wde_key_tokens", "Tokens computed by API key name", ["key_name"], registry=r)
        self.in_flight = Gauge("wde_requests_in_flight", "Inference requests being served", registry=r)
        self.queue_size = Gauge("wde_queue_size", "Requests waiting in the engine's scheduler", ["model"],
                                registry=r)
        self.batch_size = Histogram("wde_batch_size", "Sequences per batch", ["model"], buckets=COUNTS, registry=r)
        self.batch_tokens = Histogram("wde_batch_tokens", "Tokens per batch", ["model"], buckets=TOKENS, registry=r)
        self.input_tokens = Histogram("wde_request_input_tokens", "Tokens per request", ["model"], buckets=TOKENS,
                                      registry=r)
        self.phases = {phase: Histogram(f"wde_request_{phase}_duration_seconds", f"{phase} time per request",
                                        ["model"], buckets=SECONDS, registry=r)
                       for phase in ("tokenization", "queue", "inference", "total")}

    def watch(self, model) -> None:
        """Batch size and tokens of every batch ``model``'s engine forms, and its scheduler's queue length."""
        size, tokens = self.batch_size.labels(model.name), self.batch_tokens.labels(model.name)

        def on_batch(batch) -> None:
            size.observe(len(batch))
            tokens.observe(sum(r.num_tokens for r in batch))

        model.sync.batch_listeners.append(on_batch)
        self.queue_size.labels(model.name).set_function(lambda: model.sync.scheduler.num_waiting())

    def observe(self, model: str, timing) -> None:
        """Record one served request's token count and phase durations."""
        self.input_tokens.labels(model).observe(timing.tokens)
        for phase, seconds in (("tokenization", timing.tokenize), ("queue", timing.queue),
                               ("inference", timing.inference)):
            self.phases[phase].labels(model).observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
