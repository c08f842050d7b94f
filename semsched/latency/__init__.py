"""Pluggable step-latency models for the simulator.

* :mod:`~semsched.latency.base`: the :class:`LatencyModel` protocol and :class:`BatchSample`.
* :mod:`~semsched.latency.analytic`: seed 000's analytic model and its cache-or-recompute rules.
* :mod:`~semsched.latency.batch`: PROSERVE's batch estimator (eq. 4-7) and its least-squares fit.
* :mod:`~semsched.latency.profiles`: named YAML/JSON profiles, packaged or in the user profile directory
  (``load_profile("a100-qwen1.5-7b")``).

In more detail:

* ``base``: :class:`LatencyModel`: ``step_time_s(prefill, num_decode, decode_context_tokens)`` for one
  batch of ``(lq, lkv)`` chunks plus decodes, ``decode_times_s(B, S0, k)`` for fast-forward and
  ``swap_time_s``. Contract: ``decode_times_s(B, S0, k)[i]`` equals ``step_time_s([], B, S0 + i*B)`` bit for
  bit, so the simulator's fast-forward gives the same token times as its per-step loop.
* ``analytic``: seed 000's Appendix-B profiles and its cache-or-recompute rules (eq. 3-6).
* ``batch``: PROSERVE eq. 4-7, plus an optional per-prefill-chunk constant ``d_p``; least-squares fit,
  optionally non-negative. ``derive_profiles`` regenerates the packaged batch profile from the analytic one.
* ``roofline``: step time from a model's size and a GPU's datasheet (max of FLOPs over peak x MFU and bytes
  over HBM x MBU; tensor parallel over the fewest GPUs that hold the weights): seed 003's cost table.
* ``profiles``: ``load_profile(name or path)`` over the packaged ``profiles/`` files and the user profile
  directory (``$SEMSCHED_PROFILE_DIR``, else ``$XDG_DATA_HOME/semsched/profiles``, else
  ``~/.local/share/semsched/profiles``; packaged names are reserved); ``load_profile_info`` adds
  ``ProfiledEngine`` (the engine a measured profile came from: block size, KV blocks, token budget, sequence
  cap) and optional ``EngineOverheads`` (``arrival_s`` per accepted request, ``new_shape_s`` for the first step
  of each batch size, ``idle_wakeup_s`` per arrival that finds the engine idle). Every number is checked with a
  ``ProfileError`` naming the field and the limit (times 0 to ``MAX_SECONDS`` = 3600, engine integers at most
  2**31-1).
* ``preemption``: seed 003's preemption cost, made physical: ``ModelShape`` (KV bytes per token;
  ``KNOWN_SHAPES``), ``PreemptionCostModel`` prices SWAP (the KV cache over the host link both ways, or the
  profile's ``swap_time_s``), RECOMPUTE (one prefill of prompt + generated) and DROP (the work lost plus
  ``drop_penalty_s``); ``cheapest`` among the allowed strategies.
* ``correction``: PROSERVE's online estimator correction (seed 001 section 4.1): ``CorrectedEstimator`` scales a
  ``BatchLatencyModel`` by beta, updated after every observed step from the real-to-estimated ratio over the last
  ``window_s`` of engine time (``mode="paper"``: the literal compounding rule, which oscillates or diverges);
  fed by ``Policy.on_step``; ``correction_mape`` and ``benchmarks/estimator_correction.py`` measure it.
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
