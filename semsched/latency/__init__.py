"""Pluggable step-latency models for the simulator.

* :mod:`~semsched.latency.base`: the :class:`LatencyModel` protocol and :class:`BatchSample`.
* :mod:`~semsched.latency.analytic`: seed 000's analytic model and its cache-or-recompute rules.
* :mod:`~semsched.latency.batch`: PROSERVE's batch estimator (eq. 4-7) and its least-squares fit.
* :mod:`~semsched.latency.profiles`: named YAML/JSON profiles (``load_profile("a100-qwen1.5-7b")``).
"""

from semsched.latency.analytic import (
    AnalyticConfig,
    AnalyticLatencyModel,
    CacheDecision,
    cache_or_recompute,
    optimal_saved_decode_tokens,
    partial_save_cost_s,
    prefill_time_s,
    should_save_prefill_kv,
)
from semsched.latency.base import BatchSample, LatencyModel
from semsched.latency.batch import FEATURE_NAMES, BatchConfig, BatchLatencyModel, FitReport, evaluate
from semsched.latency.batch import fit as fit_batch_model
from semsched.latency.profiles import (
    ProfileError,
    list_profiles,
    load_profile,
    profile_from_dict,
    profile_to_dict,
    save_profile,
)

__all__ = [
    "FEATURE_NAMES",
    "AnalyticConfig",
    "AnalyticLatencyModel",
    "BatchConfig",
    "BatchLatencyModel",
    "BatchSample",
    "CacheDecision",
    "FitReport",
    "LatencyModel",
    "ProfileError",
    "cache_or_recompute",
    "evaluate",
    "fit_batch_model",
    "list_profiles",
    "load_profile",
    "optimal_saved_decode_tokens",
    "partial_save_cost_s",
    "prefill_time_s",
    "profile_from_dict",
    "profile_to_dict",
    "save_profile",
    "should_save_prefill_kv",
]
