"""The adapter's Prometheus families (semsched/vllm/metrics.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from semsched.vllm.metrics import PREEMPTION_LABELS, REJECTION_LABELS, AdapterMetrics
from semsched.vllm.scheduler import _policy_rejection_label


def test_preemption_and_rejection_counters_exist_at_zero_before_any_event() -> None:
    registry = CollectorRegistry()
    AdapterMetrics(registry)
    for reason, mode in PREEMPTION_LABELS:
        assert registry.get_sample_value("semsched_preemptions_total", {"reason": reason, "mode": mode}) == 0.0
    for reason in REJECTION_LABELS:
        assert registry.get_sample_value("semsched_rejections_total", {"reason": reason}) == 0.0


def test_every_policy_rejection_is_counted_under_a_known_label() -> None:
    for reason in ("shed: PREMIUM at risk", "queue full: 64 STANDARD waiting",
                   "hopeless: TTFT 0.2 s already passed", "over the tenant's budget"):
        assert _policy_rejection_label(reason) in REJECTION_LABELS
