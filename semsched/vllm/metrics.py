"""Prometheus metrics of the vLLM adapter (``semsched_*``), exported next to vLLM's own.

The scheduler runs in vLLM's engine process. Its metrics reach a scrape in one of three ways:

* in-process engines (``vllm.LLM`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the default registry;
* ``vllm serve`` with ``PROMETHEUS_MULTIPROC_DIR`` set: prometheus-client's multiprocess mode, so vLLM's
  ``/metrics`` endpoint shows them beside ``vllm:*``. vLLM 0.32 sets the variable itself only for
  ``--api-server-count`` > 1; its one-API-server default keeps metrics per process, and the API server's
  ``/metrics`` cannot see the engine process's. The adapter then says so, once, at start
  (:func:`unexported_metrics_note`);
* ``metrics_port`` in the adapter config: a small exporter served by the engine process itself.

Label ``priority`` is the request's vLLM priority (lower is more important), the class the adapter reports on;
per-request families also carry ``tier`` (:func:`tier_label`). Latencies here are measured in the engine (arrival
stamp to the step that produced the token); they exclude detokenisation and network time, which vLLM's own
``vllm:time_to_first_token_seconds`` includes.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics import MetricWrapperBase

from semsched.core.tiers import DEFAULT_TIERS, TierSpec
from semsched.vllm.xargs import NO_TIER, RequestOptions

PREEMPTION_REASONS = ("kv_pressure", "priority", "exclusive")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_TIER_LABELS = {tier.name.lower(): tier.name for tier in DEFAULT_TIERS}


def tier_label(options: RequestOptions, tiers: Sequence[TierSpec] = DEFAULT_TIERS) -> str:
    """The ``tier`` label of a request: a tier of the table (default: the default table) by its name
    (``PREMIUM``), ``other`` for any other label (clients choose tiers freely; the label keeps the number of
    series bounded), ``none`` without."""
    if options.tier == NO_TIER:
        return "none"
    labels = _TIER_LABELS if tiers is DEFAULT_TIERS else {tier.name.lower(): tier.name for tier in tiers}
    return labels.get(options.tier.lower(), "other")


def unexported_metrics_note(environ: Mapping[str, str] | None = None) -> str | None:
    """What to tell the operator when this process's ``semsched_*`` metrics reach no scrape: in a vLLM engine
    process (a child process) without prometheus-client's multiprocess directory, vLLM's ``/metrics`` cannot
    show them. ``None`` when they are exported (or the engine runs in the caller's process)."""
    env = os.environ if environ is None else environ
    if env.get(MULTIPROC_ENV) or multiprocessing.parent_process() is None:
        return None
    return (f"the semsched_* metrics are not on vLLM's /metrics: {MULTIPROC_ENV} is not set. To export them, "
            f"start the server with {MULTIPROC_ENV} set to an empty directory, or set metrics_port in "
            "SEMSCHED_CONFIG for an endpoint of their own")
_Family = TypeVar("_Family", bound=MetricWrapperBase)
_LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)


#: every (reason, mode) a preemption is counted under: KV pressure, displacement by a more important request, class
#: exclusivity; recomputed (vLLM has no swap space) or ended by the policy (``drop``)
PREEMPTION_LABELS: tuple[tuple[str, str], ...] = tuple(
    (reason, mode) for reason in ("kv_pressure", "priority", "exclusive") for mode in ("recompute", "drop")
)
#: every reason a request is counted as rejected under (the SLO guard's kinds, another policy refusal, a bad
#: request, a request the policy ended when it would have been preempted)
REJECTION_LABELS: tuple[str, ...] = ("invalid_request", "shed", "queue_full", "hopeless", "policy", "dropped")


class AdapterMetrics:
    """The adapter's metric families on one registry (one instance per registry per process). The preemption and
    rejection counters export every known label set at 0 from the start, so a dashboard's rate() has a series
    before the first event."""

    def __init__(self, registry: CollectorRegistry) -> None:
        #: each (family, label values)'s child, once looked up (see :meth:`child`)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.preemptions = Counter(
            "semsched_preemptions",
            "Requests preempted by the semsched scheduler, by reason and mode (recompute; drop: it ended)",
            ["reason", "mode"], registry=registry,
        )
        self.rejections = Counter(
            "semsched_rejections", "Requests rejected at admission, by reason", ["reason"], registry=registry
        )
        for reason, mode in PREEMPTION_LABELS:
            self.preemptions.labels(reason, mode)
        for reason in REJECTION_LABELS:
            self.rejections.labels(reason)
        self.queue_depth = Gauge(
            "semsched_queue_depth", "Waiting requests per priority class", ["priority"], registry=registry,
            multiprocess_mode="livesum",
        )
        self.running = Gauge(
            "semsched_running_requests", "Running requests per priority class", ["priority"], registry=registry,
            multiprocess_mode="livesum",
        )
        self.finished = Counter(
            "semsched_requests_finished", "Requests finished, per priority class and tier", ["priority", "tier"],
            registry=registry,
        )
        self.slo = Counter(
            "semsched_slo_requests",
            "Finished requests with an SLO, per priority class, tier, SLO kind (ttft, tpot, e2e) and outcome "
            "(met, missed)",
            ["priority", "tier", "slo", "outcome"], registry=registry,
        )
        self.output_tokens = Counter(
            "semsched_output_tokens",
            "Output tokens served, per priority class and tier, counted when a request ends (finished or not); "
            "a class's share of served tokens is its rate over the sum of all",
            ["priority", "tier"], registry=registry,
        )
        self.ttft = Histogram(
            "semsched_ttft_seconds", "Engine-side time to first token, per priority class and tier",
            ["priority", "tier"], buckets=_LATENCY_BUCKETS_S, registry=registry,
        )
        self.e2e = Histogram(
            "semsched_e2e_seconds", "Engine-side end-to-end latency, per priority class and tier",
            ["priority", "tier"], buckets=_LATENCY_BUCKETS_S, registry=registry,
        )

    def child(self, family: _Family, *labels: str) -> _Family:
        """``family.labels(*labels)``, the series of those label values, kept once looked up: prometheus-client
        checks the values and takes a lock at every ``labels`` call (a microsecond, several times per finished
        request on the scheduler's step), while the series it returns stays the same for the process's life
        (nothing here removes one)."""
        key = (id(family), labels)
        series = self._children.get(key)
        if series is None:
            series = self._children[key] = family.labels(*labels)
        return series


_lock = threading.Lock()
_by_registry: dict[int, AdapterMetrics] = {}
_servers: set[tuple[str, int]] = set()


def adapter_metrics(registry: CollectorRegistry | None = None) -> AdapterMetrics:
    """The metric families on ``registry`` (default: the process registry), created on first use.

    Metric families are process-wide by nature in Prometheus; several schedulers in one process (tests that
    start engines one after another) share them.
    """
    target = REGISTRY if registry is None else registry
    with _lock:
        metrics = _by_registry.get(id(target))
        if metrics is None:
            metrics = _by_registry[id(target)] = AdapterMetrics(target)
        return metrics


def serve_metrics(host: str, port: int) -> None:
    """Serve the process registry on ``host:port`` (once per process and address)."""
    with _lock:
        if (host, port) in _servers:
            return
        start_http_server(port, addr=host)
        _servers.add((host, port))
