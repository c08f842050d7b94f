"""The gateway's Prometheus metrics (``GET /metrics``), one registry per gateway.

Families (all prefixed ``semsched_gateway_``): requests by tier and outcome, rejections by tier and reason,
TTFT/TPOT/E2E histograms by tier, SLO outcomes by tier and metric (attainment = met / (met + missed)), routing
decisions by backend and reason, re-routed attempts, backend health and in-flight gauges, queue depth by tier,
the shed level, classifier latency by stage, configuration reloads by outcome and outlier ejections by
backend.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: the label values the gateway uses, each set exported (at 0) from the start: a dashboard or an alert on a
#: rate finds every series before its first event
OUTCOMES = ("ok", "rejected", "error", "timeout", "cancelled")
REJECTION_REASONS = ("shed", "queue_full", "queue_timeout", "no_backend", "invalid", "unauthorized", "too_large",
                     "quota")
SLO_METRICS = ("ttft", "tpot", "e2e")

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
                     15.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)
CLASSIFIER_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class GatewayMetrics:
    """Every metric family the gateway exports, registered in its own ``registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry
        p = "semsched_gateway_"
        self.requests = Counter(p + "requests", "requests answered, by tier and outcome "
                                "(ok, rejected, error, timeout, cancelled)", ["tier", "outcome"], registry=r)
        self.rejections = Counter(p + "rejections", "requests refused, by tier and reason (shed, queue_full, "
                                  "queue_timeout, no_backend, invalid, unauthorized, too_large, quota)",
                                  ["tier", "reason"], registry=r)
        self.ttft = Histogram(p + "ttft_seconds", "time to first token seen by the gateway", ["tier"],
                              buckets=LATENCY_BUCKETS_S, registry=r)
        self.tpot = Histogram(p + "tpot_seconds", "time per output token after the first", ["tier"],
                              buckets=TOKEN_BUCKETS_S, registry=r)
        self.e2e = Histogram(p + "e2e_seconds", "end-to-end latency", ["tier"], buckets=LATENCY_BUCKETS_S,
                             registry=r)
        self.slo = Counter(p + "slo", "SLO outcomes of finished requests, by tier, metric (ttft, tpot, e2e) and "
                           "outcome (met, missed)", ["tier", "metric", "outcome"], registry=r)
        self.routed = Counter(p + "routed", "dispatches by backend, router and reason (chosen: the router's "
                              "choice; fallback: the choice was out of the pool or full; retry: after a failed "
                              "attempt)", ["backend", "router", "reason"], registry=r)
        self.rerouted = Counter(p + "rerouted", "attempts moved off a backend before their first token, by "
                                "backend and cause", ["backend", "cause"], registry=r)
        self.backend_healthy = Gauge(p + "backend_healthy", "1 while the backend is in the pool", ["backend"],
                                     registry=r)
        self.backend_inflight = Gauge(p + "backend_inflight", "requests in flight at the backend",
                                      ["backend"], registry=r)
        self.queue_depth = Gauge(p + "queue_depth", "requests waiting in the gateway for a backend slot",
                                 ["tier"], registry=r)
        self.shed_level = Gauge(p + "shed_level", "tiers shed now, least important first (0: none)", registry=r)
        self.classifier = Histogram(p + "classifier_seconds", "classification time per request, by stage "
                                    "(queue: waiting for a batch; predict: the batch's model time; total)",
                                    ["stage"], buckets=CLASSIFIER_BUCKETS_S, registry=r)
        self.classifier_timeouts = Counter(p + "classifier_timeouts", "requests sent on without a "
                                           "classification (classifier too slow or failed)", registry=r)
        self.reloads = Counter(p + "reloads", "configuration reloads (SIGHUP, POST /admin/reload), by outcome "
                               "(applied, unchanged, refused: the file was bad and the old one is kept)",
                               ["outcome"], registry=r)
        self.outlier_ejections = Counter(p + "outlier_ejections", "backends taken out of the pool for a "
                                         "cool-down as TTFT outliers (routing.outlier_ejection)", ["backend"],
                                         registry=r)
        self.shared_state_up = Gauge(p + "shared_state_up", "1 while the state shared with the other replicas "
                                     "(shared_state.redis_url) is reachable, or none is configured; 0 while this "
                                     "replica serves on its own state", registry=r)
        self.shared_state_fallbacks = Counter(p + "shared_state_fallbacks", "times this replica found Redis "
                                              "unreachable and went on with its own state", registry=r)

    def initialise(self, tiers: list[str], backends: list[str], router: str) -> None:
        """Create every series the gateway's known labels give, at 0 (``unknown`` stands for tiers the table
        does not have)."""
        for tier in [*tiers, "unknown"]:
            for outcome in OUTCOMES:
                self.child(self.requests, tier, outcome)
            for reason in REJECTION_REASONS:
                self.child(self.rejections, tier, reason)
            for metric in SLO_METRICS:
                for outcome in ("met", "missed"):
                    self.child(self.slo, tier, metric, outcome)
            self.child(self.queue_depth, tier)
        for backend in backends:
            self.child(self.backend_inflight, backend)
            for reason in ("chosen", "fallback", "retry"):
                self.child(self.routed, backend, router, reason)
        self.shed_level.set(0)
        self.shared_state_up.set(1)

    def child(self, family: Any, *labels: str) -> Any:
        """``family.labels(*labels)``, cached: the labelled child is looked up once per label set."""
        key = (id(family), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = family.labels(*labels)
        return found
