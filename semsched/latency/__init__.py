"""Pluggable step-latency models for the simulator.

* :mod:`~semsched.latency.base`: the :class:`LatencyModel` protocol and :class:`BatchSample`.
* :mod:`~semsched.latency.analytic`: seed 000's analytic model and its cache-or-recompute rules.
* :mod:`~semsched.latency.batch`: PROSERVE's batch estimator (eq. 4-7) and its least-squares fit.
* :mod:`~semsched.latency.profiles`: named YAML/JSON profiles, packaged or in the user profile directory
  (``load_profile("a100-qwen1.5-7b")``).
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
    PROFILE_DIR_ENV,
    EngineOverheads,
    ProfiledEngine,
    ProfileError,
    ProfileInfo,
    check_profile_name,
    list_profiles,
    load_profile,
    load_profile_info,
    packaged_profiles,
    profile_from_dict,
    profile_to_dict,
    save_profile,
    user_profile_dir,
    user_profile_path,
    user_profiles,
)

__all__ = [
    "EngineOverheads",
    "FEATURE_NAMES",
    "PROFILE_DIR_ENV",
    "AnalyticConfig",
    "AnalyticLatencyModel",
    "BatchConfig",
    "BatchLatencyModel",
    "BatchSample",
    "CacheDecision",
    "FitReport",
    "LatencyModel",
    "ProfileError",
    "ProfileInfo",
    "ProfiledEngine",
    "cache_or_recompute",
    "check_profile_name",
    "evaluate",
    "fit_batch_model",
    "list_profiles",
    "load_profile",
    "load_profile_info",
    "optimal_saved_decode_tokens",
    "packaged_profiles",
    "partial_save_cost_s",
    "prefill_time_s",
    "profile_from_dict",
    "profile_to_dict",
    "save_profile",
    "should_save_prefill_kv",
    "user_profile_dir",
    "user_profile_path",
    "user_profiles",
]
