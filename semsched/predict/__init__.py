"""Predictors that run outside the scheduling core (issue 15): urgency from what a request says (``urgency``, on
KTAS triage data), output-length buckets from its prompt (``length``), seed 000's noisy oracles (``oracle``) and
what predicting costs before a request can be scheduled (``cost``). The core sees only their results on a
:class:`~semsched.core.request.Request`: ``urgency``, ``predicted_output`` and ``ready_time_s``."""
